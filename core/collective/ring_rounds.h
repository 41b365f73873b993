#pragma once
// Ring all-reduce rounds between the nodes of a job that can lose a node mid-round
// (docs/architecture/core.md, "Dense all-reduce"). Each round runs ring_allreduce over the
// members live at its start, its "view"; every part of a step's segment names its round, its view
// and its number (ring_allreduce.h), so a part of one view is never mixed into another's.
//
// When a member of the view is lost, the survivors are at this round (not done) or, having
// done it, at the next (a node cannot finish a round before every member has sent its part, so
// no node is further ahead). A survivor that has not finished starts the round again over the
// survivors, from its own values as they were. One that has finished keeps the round's result:
// when a segment of that round (of any view) reaches it, it sends the result to every member of
// that view (those the finished round counted), and a node that gets the result of the round it
// is in, from a member of its own view, takes it as its own. So the survivors end the round with
// the same bits, the lost node's part counted by all or by none. (A result from a member outside
// the view is ignored: that view can then never finish without answers from its own members.)
//
// No networking here: RingPost carries the messages (the daemon's mesh, or a test's threads),
// and whoever receives them calls on_segment / on_result.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "core/collective/ring_allreduce.h"
#include "core/collective/ring_part.h"
#include "core/collective/ring_wire.h"

namespace dtrain::core {

class RingPost {
 public:
  virtual ~RingPost() = default;
  // Part `step` of `round` over the ring of `members` (in ring order) to member `to` (the
  // steps' parts numbered in order: core/collective/ring_allreduce.h).
  virtual void send_segment(uint32_t to, int64_t round, const std::vector<uint32_t>& members,
                            int step, const float* values, int64_t n) = 0;
  // The whole result of `round`, the sum over `members`, to each of `to` (never called with
  // RingRounds' lock held; may be called from the thread that delivered a segment).
  virtual void send_result(const std::vector<uint32_t>& to, int64_t round,
                           const std::vector<uint32_t>& members, const float* values,
                           int64_t n) = 0;
};

class RingRounds {
 public:
  RingRounds(uint32_t self, RingPost& post) : self_(self), post_(post) {}

  // The members whose values a round's sum holds, in ring order.
  using Members = std::vector<uint32_t>;
  // Replaces `values` with their sum over the live members for `round` (rounds increase from
  // call to call). `live()` gives the live members, this one included, the same order on
  // every node; it is called without this object's lock, again after every members_changed().
  // Throws UserError when a segment does not come within `deadline` (naming whom it waited
  // for), when a segment does not fit, and after cancel(). `exact`: no value of this round is
  // rounded for the wire, whatever set_wire said (counts that must add up exactly; every member
  // of a round must pass the same).
  Members sum(float* values, int64_t n, int64_t round, const std::function<Members()>& live,
              std::chrono::milliseconds deadline, bool exact = false);

  // From the network, any thread. `from`: the member it came from.
  void on_segment(uint32_t from, int64_t round, Members members, int step, RingPart values);
  void on_result(uint32_t from, int64_t round, Members members, std::vector<float> values);
  // The live members changed (a node was declared lost): a waiting round looks again.
  void members_changed();
  void cancel();
  // The sums will be of about `n` values: segments of that size are held before this node's
  // first round (the bound on what is held is four times the largest sum expected or seen).
  void expect_values(int64_t n);
  // How the parts go on the wire (core/collective/ring_wire.h): before the first round.
  void set_wire(const RingWire& wire);

  // Segments held for rounds not yet reached: at most this many, of at most this many values
  // in all (or four times the largest sum so far, if more), so that no sender grows them
  // further; what would pass them is dropped (its round then waits for it, and says whom for).
  static constexpr size_t kMaxHeldSegments = 512;
  static_assert(kMaxHeldSegments >= 4 * kMaxRingPartsARound,
                "room for a round's parts, the next round's, and a round begun again twice");
  static constexpr int64_t kMinHeldValues = int64_t(1) << 22;

 private:
  struct ViewChanged {};
  struct ResultArrived {
    Members members;  // whose values the result holds (copied into the round's values)
  };
  class AttemptLinks;
  using SegmentKey = std::tuple<int64_t, Members, int>;  // round, view, part
  struct Result {
    int64_t round = -1;
    Members members;
    std::vector<float> values;
    uint32_t from = 0;  // who sent it (a result from another member)
  };
  // A finished round's result owed to members that started it again (sent without the lock).
  struct Answer {
    Members to;
    std::shared_ptr<const Result> result;
  };
  // `seen`: the version of the members the view was taken at (members_changed() since: the
  // waits look at live() again).
  void attempt(float* values, int64_t n, int64_t round, const Members& view,
               const std::function<Members()>& live, std::chrono::milliseconds deadline,
               uint64_t& seen, bool exact);
  RingPart wait_segment(const SegmentKey& key, uint32_t from, const Members& view,
                        const std::function<Members()>& live, std::chrono::milliseconds deadline,
                        float* values, int64_t n, uint64_t& seen);
  // The round is done with these values, summed over `view`: kept for members that did not
  // finish it, who are answered (those whose segments of it wait here too).
  void finished(int64_t round, const Members& view, const float* values, int64_t n);
  // Under mutex_: adds to `answer` the members of `view` not yet sent the result of the last
  // finished round (only members that round counted).
  void owe(const Members& view, Answer& answer);
  void send(const Answer& answer);
  // Under mutex_: the held segment out of segments_, its values out of held_values_.
  RingPart take_segment(std::map<SegmentKey, RingPart>::iterator it);

  const uint32_t self_;
  RingPost& post_;
  std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t members_version_ = 0;
  bool cancelled_ = false;
  std::vector<float> input_;  // sum()'s values as they came, for an attempt again
  std::map<SegmentKey, RingPart> segments_;
  int64_t held_values_ = 0;     // in segments_
  int64_t largest_sum_ = 0;     // values of the largest sum so far
  RingWire wire_;
  std::shared_ptr<const Result> last_ = std::make_shared<Result>();  // the last round finished
  // Rounds' results from other members, the newest of each sender (a result is taken only from
  // a member of the round's view, so one from outside it must not push out a usable one).
  std::map<uint32_t, Result> arrived_;
  std::set<std::pair<int64_t, uint32_t>> answered_;  // (round, member) sent last_ already
};

}  // namespace dtrain::core
