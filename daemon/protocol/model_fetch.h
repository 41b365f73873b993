#pragma once
// `dtrain-submit fetch JOB` (docs/architecture/daemon.md, "Fetching a model"): the client asks the
// controller for the job's model chunk by chunk; the controller asks a node that finished the
// job (FetchModel) and passes its answer (ModelChunk) back. The client checks the whole file
// against the SHA-256 the node reported with its result, so a file replaced since (a later job
// with the same output.model) or cut short is never taken for the job's model.
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/protocol/control_generated.h"

namespace dtrain::daemon {

// A chunk is at most this long (a control frame holds 64 MiB).
constexpr uint32_t kMaxModelChunk = 8u << 20;

struct FetchMessage {
  uint64_t request = 0;
  std::string path;  // relative to the job's folder on the node, data_dir/jobs/<job id>/
  uint64_t offset = 0;
  uint32_t length = 0;
};
struct ChunkMessage {
  uint64_t request = 0;
  uint64_t offset = 0, total = 0;
  std::vector<uint8_t> data;
  std::string error;  // the node could not read it (then no data)
};

std::vector<uint8_t> fetch_frame(uint64_t job_id, const FetchMessage& fetch);
std::vector<uint8_t> chunk_frame(uint64_t job_id, const ChunkMessage& chunk);
// False for a table no real peer sends (no path, a length or chunk above kMaxModelChunk).
bool read_fetch(const control::FetchModel& in, FetchMessage& out);
bool read_chunk(const control::ModelChunk& in, ChunkMessage& out);

// A node's answer: the chunk of <models_dir>/<fetch.path>, or the error why not.
ChunkMessage read_model_chunk(const std::string& models_dir, const FetchMessage& fetch);
// The SHA-256 of a file's content in hex; "" when it cannot be read.
std::string file_sha256(const std::string& path);
// The SHA-256 of `n` floats' bytes, in hex: a replica's parameters told apart bit for bit (a
// resumed job's start against the checkpoint it read).
std::string floats_sha256(const float* values, size_t n);

}  // namespace dtrain::daemon
