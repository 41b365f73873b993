#pragma once
// An elected controller's job records in etcd (docs/architecture/daemon.md, "Standby
// controllers"): one key per job, PREFIX/jobs/<16 hex digits>, its value the record's JSON as a
// single controller keeps it on disk. Every write is fenced twice: by the leader's own count of
// its lease (checked first, no request), and in etcd by a transaction that puts the record only
// while the leader key is still under this leader's lease. A write either lands while this
// controller leads or throws FencedOut; etcd unreachable is FencedOut too (leadership cannot be
// confirmed). The records outlive the leader (no lease): the next one reads them all.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/controller/job_records.h"
#include "daemon/election/etcd_client.h"

namespace dtrain::daemon {

// What a write checks before it may land.
struct LeaderFence {
  std::function<bool()> acts;  // the leader's own count of its lease has not run out
  std::string leader_key;      // the election's key
  int64_t lease = 0;           // this term's lease
};

class EtcdJobRecords : public JobRecords {
 public:
  // The record's JSON is cut to this size (its oldest log lines go first): etcd refuses a
  // request over 1.5 MiB, and a refusal must not look like a lost leadership; base64 makes it
  // 1 MiB, so that a page of a listing (etcd_client.cc) stays under the 4 MiB some etcd 3.4
  // gateways answer at most.
  static constexpr size_t kMostRecordBytes = 768 << 10;

  EtcdJobRecords(EtcdClient& etcd, std::string prefix, LeaderFence fence);
  // The same, owning its client (a term's own: nothing shared with an earlier term's threads).
  EtcdJobRecords(std::unique_ptr<EtcdClient> etcd, std::string prefix, LeaderFence fence)
      : EtcdJobRecords(*etcd, std::move(prefix), std::move(fence)) {
    owned_ = std::move(etcd);
  }
  void save(const JobRecord& job) override;
  // Throws EtcdError when etcd cannot be read.
  std::vector<JobRecord> load() override;

 private:
  std::unique_ptr<EtcdClient> owned_;
  EtcdClient& etcd_;
  std::string prefix_;  // ".../jobs/"
  LeaderFence fence_;
};

// The record's JSON text, its oldest log lines dropped until it fits in `most` bytes.
std::string record_text_within(const JobRecord& job, size_t most);

}  // namespace dtrain::daemon
