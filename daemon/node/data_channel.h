#pragma once
// The node's UDP data channel (docs/architecture/daemon.md, "Roles, ports and config";
// docs/architecture/transport.md, "The data channel"): one endpoint on the data port carrying every
// job, told apart by job id. Each running job has a MeshNode on it; deliveries go to the mesh of
// their job (its point-to-point ones, under transport::direct_job_id, to be handed up without
// relaying), and a lost peer is reported to every job's mesh.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "transport/endpoint/endpoint.h"
#include "transport/mesh/mesh_node.h"

namespace dtrain::daemon {

class DataChannel {
 public:
  // Binds the port (throws TransportError naming the fix when it is taken).
  explicit DataChannel(const transport::EndpointConfig& config);
  ~DataChannel();

  transport::Endpoint& endpoint() { return endpoint_; }
  // The job's mesh receives its deliveries from now on; detach before destroying it.
  void attach(uint64_t job_id, transport::MeshNode* mesh);
  void detach(uint64_t job_id);

 private:
  transport::Endpoint endpoint_;
  std::mutex mutex_;
  std::map<uint64_t, transport::MeshNode*> jobs_;
};

}  // namespace dtrain::daemon
