#pragma once
// `training.sync: auto` (docs/user-guide.md, "Choosing how workers synchronise"): per-step
// sharing or local steps, and H, chosen from what the job's nodes measured. Their rehearsal
// (daemon/node/sync_rehearsal.h) times both as the nodes will train: a lock step of per-step
// sharing, and a step back to back plus a round of local steps over H; the faster step wins,
// local steps on a tie (at equal epochs they were as accurate as per-step sharing or more for
// every model measured, and reached the MLP's and LeNet's targets an epoch sooner:
// docs/performance.md, "Every cell, after the epoch end's check"). Without a rehearsal, each mode's wait a step is estimated from the probes: per-step
// sharing waits for a step's messages, sent half a round trip a hop along the mesh's longest
// path (a relay doubles it); local steps wait one round trip, one pseudo-gradient and the
// round's own work (encoding, decoding, the outer step) every H steps; the smaller wins. H is
// the smallest that keeps a round's wait under a tenth of H steps' compute, at least
// kMinLocalSteps and at most kMaxLocalSteps: past 20 the replicas drift apart (the example
// MLP: 0.6 points less at H = 50 after 4 epochs, and as fast or slower to 0.87 on every link
// measured but a 200 ms round trip; docs/performance.md, "Choosing the sync").
#include <cstdint>
#include <optional>
#include <string>

#include "core/spec/job_spec.h"

namespace dtrain::core {

// The slowest peer's figures, as the chooser measured them on the job's mesh.
// Each mode's goodput is measured with a message of its own size: a step's messages fit in
// the hosts' queues where a round's may overflow them (docs/performance.md, "Every cell, each
// mode weighed at its own message size").
struct LinkFigures {
  double rtt_s = 0.0;            // round trip of a small message
  double goodput_bytes_s = 0.0;  // of one the size of a round's message, its round trip taken off
  double step_goodput_bytes_s = 0.0;  // of one the size of a step's (0: taken as the above)
};

// What the nodes' rehearsal measured (daemon/node/sync_rehearsal.h). Where it ran, each mode's
// time a step comes from it rather than from the probes and one process's timings: a probe
// from one node sees neither the slowest node's step nor the hosts' queues under traffic that
// does not stop, and a step timed alone runs faster than beside the other nodes' on shared
// cores (docs/performance.md, "The rehearsal").
struct RehearsalFigures {
  int steps = 0;              // lock steps taken
  double lock_step_s = 0.0;   // per-step sharing's step: compute, its work, the others' messages
  double free_step_s = 0.0;   // a step of local steps: compute, back to back
  double round_s = 0.0;       // a round's work, and every node's message of round_bytes to all
  double round_bytes = 0.0;   // the size rehearsed (a larger round is scaled from it)
  // `mode: auto`: allreduce's step, a step and a ring all-reduce of the step's values, over
  // the second half of ring_steps (0: not rehearsed).
  int ring_steps = 0;
  double ring_step_s = 0.0;
};

struct SyncChoiceInputs {
  LinkFigures link;
  std::optional<RehearsalFigures> rehearsal;
  double step_s = 0.0;  // one worker's forward and backward pass on its minibatch
  int64_t num_params = 0;
  double round_bytes = 0.0;  // one node's message of a round of local steps
  // A round's own work in one process (core/train/step_timing.h): encoding, decoding its own
  // part, the outer step; a node of the job also decodes every other node's part.
  double round_work_s = 0.0;
  double part_decode_s = 0.0;
  // Per-step sharing's own work a step, one worker's: encoding its update and applying every
  // other worker's message (core/train/step_timing.h).
  double step_work_s = 0.0;
  int nodes = 1, workers = 1;  // in the job
  // Sends on the way between the two nodes farthest apart on the job's mesh
  // (transport::MeshMap::longest_path): a step's messages wait that many half round trips
  // (2 in a plain mesh of three or more nodes: the root relays).
  int path_hops = 1;
};

struct SyncChoice {
  int64_t local_steps = 0;  // H; 0: per-step sharing (bsp)
  std::string reason;       // one line: the figures and what they gave
  bool allreduce = false;   // `mode: auto` chose allreduce (core/train/mode_choice.h)
  double step_s = 0.0;      // the chosen way's time a step as measured (0: none measured)
};

constexpr double kWaitShareOfCompute = 0.1;
constexpr int64_t kMinLocalSteps = 10;
constexpr int64_t kMaxLocalSteps = 20;

SyncChoice choose_sync(const TrainingSpec& training, const SyncChoiceInputs& in);
// The lock steps the nodes rehearse: as many as fill about kRehearsalSeconds at the probes'
// estimate of a step under per-step sharing (`in` without a rehearsal), within
// kMinRehearsalLockSteps..kMaxRehearsalLockSteps: enough that the second half, which is timed,
// runs past what the hosts' queues absorb; few across a long link, where each step waits it.
constexpr double kRehearsalSeconds = 2.0;
constexpr int kMinRehearsalLockSteps = 8;
constexpr int kMaxRehearsalLockSteps = 40;
int rehearsal_steps(const TrainingSpec& training, const SyncChoiceInputs& in);
// The steps that fill about kRehearsalSeconds at `period` seconds a step, within those bounds.
int rehearsal_steps_for(double period);
// Whether the nodes rehearse at all: not where a step alone takes longer than this (a model
// sized for GPUs, timed on the CPU), whose rehearsal would take minutes and whose waits
// matter little beside its steps; its choice is made from the probes.
constexpr double kLongestRehearsedStep = 0.25;
bool worth_rehearsing(const SyncChoiceInputs& in);
// One node's message after a step under per-step sharing, as the nodes rehearse it: its
// workers' (the job's workers spread over its nodes), at the density an adaptive threshold
// holds over a job: below its band's top after the first steps, since the threshold rises
// when messages are too dense but falls only when they are sparser than the band's bottom
// (core/codec/threshold.cc). Over whole runs the example MLP's messages held 0.73-0.85% and
// the wide MLP's 0.54% against a top of 1% (docs/performance.md, "The rehearsal").
constexpr double kSettledShareOfBand = 0.65;
double node_step_bytes(const TrainingSpec& training, const SyncChoiceInputs& in);
// Where the nodes rehearsed, the mode with the faster step wins, local steps on a tie. A lean
// towards local steps (at equal epochs they were as accurate or more for every model measured)
// was tried and dropped: the rehearsal brings the two modes' steps closer than training shows
// them, and the wide MLP at 1 Gbit/s rehearsed at 1.006-1.22 times per-step sharing's step
// where it trained 1.45-1.59 times as long with local steps (docs/performance.md, "The
// rehearsal").
// One worker's message of a step under per-step sharing, at per_step_density.
double step_message_bytes(const TrainingSpec& training, int64_t num_params);
// The bytes of one node's message in a round of local steps if `values` were its
// pseudo-gradient: the levels at tau, tau/2, ... on what the earlier ones left, each sparse (4
// bytes an element) up to a sixteenth of the elements and a bitmap (2 bits an element) above,
// as the codec sends them (core/codec/message.h). The goodput is measured with a message this
// large.
double round_message_bytes(const LocalStepsSpec& local, const float* values, int64_t n);
// The same for a model of n parameters, weighed on a normal sample of up to kRoundSample
// elements and scaled to n: a pseudo-gradient sums H steps' updates, so its elements are
// close to normal, far less peaked than one step's gradient (weighed on that, a round of the
// example MLP came out at a fraction of what the wire carried; docs/performance.md,
// "Choosing the sync").
constexpr int64_t kRoundSample = int64_t(1) << 20;
double pseudo_gradient_round_bytes(const LocalStepsSpec& local, int64_t n);
// The share of the parameters a step's message carries under per-step sharing: the target
// where the threshold aims at one, else the top of its band, where the adaptive threshold
// settles (the example MLP's messages held 0.73% of its parameters against a band of
// 0.01-1%), also taken for a fixed threshold.
double per_step_density(const ThresholdSpec& t);
// The choice made for a job without measuring: one node, or node-local shards (which local
// steps cannot take over), share every step.
SyncChoice per_step_choice(const std::string& why);
// training.sync from `auto` to what was chosen (local steps with the spec's defaults but H), and
// a `mode: auto` to the mode chosen.
void apply_sync_choice(TrainingSpec& training, const SyncChoice& choice);
bool sync_is_auto(const TrainingSpec& training);

}  // namespace dtrain::core
