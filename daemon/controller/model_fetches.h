#pragma once
// `dtrain-submit fetch JOB` (docs/architecture/daemon.md, "Fetching a model"): the client asks for
// the finished job's model one chunk at a time; the controller asks a node that reported the model
// with its result (the lowest rank first, or the node the client names to stay on one file) over
// that node's session, waits for its answer without holding the controller's lock, and passes
// the chunk back with the SHA-256 the node reported, which the client checks the whole file
// against.
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/controller/job_store.h"
#include "daemon/controller/membership.h"
#include "daemon/protocol/client_requests.h"
#include "daemon/protocol/control_messages.h"

namespace dtrain::daemon {

class ModelFetches {
 public:
  // `mutex`: the controller's lock, which guards `store`, `members` and `stopping` too.
  ModelFetches(std::mutex& mutex, JobStore& store, Membership& members, const bool& stopping);

  // One chunk of a finished job's model; takes the lock itself (it waits for the node unlocked).
  std::vector<uint8_t> serve(const ClientRequest& request);
  // Under the lock: a node's answer to a FetchModel, taken only for a request still waiting,
  // from the node asked.
  void on_chunk(const Member& m, const JobMessageIn& in);
  // Under the lock: a node registered again or was lost, or the controller stops; waiting
  // fetches look again (a request sent on a session that ended is asked again or given up).
  void wake() { fetched_.notify_all(); }

 private:
  struct Pending {  // a FetchModel sent to `node`, waiting for its ModelChunk
    std::string node;
    uint64_t session = 0;  // the node's session it was sent on: another one lost it
    uint64_t job_id = 0, offset = 0;
    bool answered = false;
    ChunkMessage chunk;
  };
  std::vector<uint8_t> serve_locked(std::unique_lock<std::mutex>& lock,
                                    const ClientRequest& request);
  std::vector<uint8_t> fetch_from(std::unique_lock<std::mutex>& lock, const JobRecord& job,
                                  const std::vector<std::string>& holders,
                                  const std::string& model, uint64_t offset, uint32_t length);
  std::optional<Pending> ask(std::unique_lock<std::mutex>& lock, const std::string& node,
                             const FetchMessage& fetch, uint64_t job_id);

  std::mutex& mutex_;
  JobStore& store_;
  Membership& members_;
  const bool& stopping_;
  std::condition_variable fetched_;
  std::map<uint64_t, Pending> pending_;  // by request number
  uint64_t next_fetch_ = 0;  // drawn at start: a chunk queued before a restart matches nothing
};

}  // namespace dtrain::daemon
