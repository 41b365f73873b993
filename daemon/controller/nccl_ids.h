#pragma once
// Where the controller makes a job's NCCL id (docs/architecture/daemon.md, "NCCL between nodes").
// NCCL's ncclGetUniqueId starts a bootstrap listener (a thread and a socket) in the process that
// calls it, which lives until every rank has joined: in the controller it would stay for good
// when a job's communicator never forms. So each id is made by a helper process of its own
// (`dtraind nccl-id`), which serves the bootstrap until the job ends: release() ends it, and so
// does the controller's exit (the helper reads its stdin, a pipe only the controller writes).
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::daemon {

class NcclIds {
 public:
  virtual ~NcclIds() = default;
  // A fresh id for `job`, its earlier one released first; empty, with `why`, when none can be.
  virtual std::vector<uint8_t> make(uint64_t job, std::string* why) = 0;
  // The job ended: its id's bootstrap is no longer served. Nothing when it has none.
  virtual void release(uint64_t job) = 0;
};

class NcclIdProcesses : public NcclIds {
 public:
  // `program`: run as `program nccl-id` (dtraind's own binary). Empty: the id is made in this
  // process instead (test binaries, which have no NCCL). `wait`: for the helper's answer, under
  // the controller's lock (NCCL answers in well under a second; the default peer timeout is 10 s).
  explicit NcclIdProcesses(std::string program,
                           std::chrono::milliseconds wait = std::chrono::seconds(5));
  ~NcclIdProcesses() override;  // releases every job's
  NcclIdProcesses(const NcclIdProcesses&) = delete;
  NcclIdProcesses& operator=(const NcclIdProcesses&) = delete;

  std::vector<uint8_t> make(uint64_t job, std::string* why) override;
  void release(uint64_t job) override;
  // The helper serving `job`'s id, for tests.
  std::optional<pid_t> helper_of(uint64_t job) const;

 private:
  struct Helper {
    pid_t pid = -1;
    int keep_fd = -1;  // its stdin's write end: closed, the helper exits
  };
  static void end(Helper& h);

  const std::string program_;
  const std::chrono::milliseconds wait_;
  std::map<uint64_t, Helper> helpers_;
};

// `dtraind nccl-id`: makes an id, prints "id HEX" (or "error WHY") on stdout, then serves NCCL's
// bootstrap until stdin ends. Returns the exit status.
int run_nccl_id_helper();

}  // namespace dtrain::daemon
