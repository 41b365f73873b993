#include "daemon/node/data_channel.h"

namespace dtrain::daemon {

DataChannel::DataChannel(const transport::EndpointConfig& config) : endpoint_(config) {
  endpoint_.start(
      [this](transport::Delivery&& d) {
        // Handlers run on the endpoint's I/O threads (one per lane); the lock guards the job
        // table (attach/detach) and, held while the mesh handles the delivery, serializes the
        // lanes' deliveries. That part is short (the mesh relays by reference and the exchange
        // copies under its own lock); MeshNode is thread-safe, so a shared lock could let lanes
        // deliver at once if a multi-core profile ever shows this lock.
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = jobs_.find(d.job_id);
        if (it != jobs_.end()) {
          it->second->handle_delivery(std::move(d));
          return;
        }
        it = jobs_.find(transport::direct_job_id(d.job_id));
        if (it != jobs_.end()) it->second->handle_direct(std::move(d));
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
  endpoint_.add_job(transport::direct_job_id(job_id));
}

void DataChannel::detach(uint64_t job_id) {
  endpoint_.remove_job(transport::direct_job_id(job_id));
  endpoint_.remove_job(job_id);
  std::lock_guard<std::mutex> lock(mutex_);
  jobs_.erase(job_id);
}

}  // namespace dtrain::daemon
