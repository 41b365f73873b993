#include "daemon/node/data_channel.h"

namespace dtrain::daemon {

DataChannel::DataChannel(const transport::EndpointConfig& config) : endpoint_(config) {
  endpoint_.start(
      [this](transport::Delivery&& d) {
        // Handlers run on the endpoint's I/O thread; the lock only guards the job table
        // (attach/detach), so holding it while the mesh handles the delivery is short.
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = jobs_.find(d.job_id);
        if (it != jobs_.end()) it->second->handle_delivery(std::move(d));
      },
      [this](uint32_t peer) {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& [job, mesh] : jobs_) mesh->handle_peer_lost(peer);
      });
}

DataChannel::~DataChannel() { endpoint_.stop(); }

void DataChannel::attach(uint64_t job_id, transport::MeshNode* mesh) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_[job_id] = mesh;
  }
  endpoint_.add_job(job_id);
}

void DataChannel::detach(uint64_t job_id) {
  endpoint_.remove_job(job_id);
  std::lock_guard<std::mutex> lock(mutex_);
  jobs_.erase(job_id);
}

}  // namespace dtrain::daemon
