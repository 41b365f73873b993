#include "daemon/protocol/model_fetch.h"

#include <sodium.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/util/relative_path.h"
#include "daemon/protocol/control_messages.h"
#include "daemon/protocol/control_frames.h"

namespace dtrain::daemon {

namespace fs = std::filesystem;
using namespace transport;

std::vector<uint8_t> fetch_frame(uint64_t job_id, const FetchMessage& fetch) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto f = control::CreateFetchModel(fbb, fetch.request, fbb.CreateString(fetch.path),
                                           fetch.offset, fetch.length);
  control::JobMessageBuilder m(fbb);
  m.add_job_id(job_id);
  m.add_kind(JobKind::FetchModel);
  m.add_fetch(f);
  return control_frame_bytes(fbb, control::ControlBody::JobMessage, m.Finish().Union());
}

std::vector<uint8_t> chunk_frame(uint64_t job_id, const ChunkMessage& chunk) {
  flatbuffers::FlatBufferBuilder fbb(1024 + chunk.data.size());
  const auto c = control::CreateModelChunk(fbb, chunk.request, chunk.offset, chunk.total,
                                           fbb.CreateVector(chunk.data),
                                           fbb.CreateString(chunk.error));
  control::JobMessageBuilder m(fbb);
  m.add_job_id(job_id);
  m.add_kind(JobKind::ModelChunk);
  m.add_chunk(c);
  return control_frame_bytes(fbb, control::ControlBody::JobMessage, m.Finish().Union());
}

bool read_fetch(const control::FetchModel& in, FetchMessage& out) {
  if (!in.path() || in.path()->size() == 0 || in.path()->size() > 4096 ||
      in.length() > kMaxModelChunk)
    return false;
  out = {in.request(), in.path()->str(), in.offset(), in.length()};
  return true;
}

bool read_chunk(const control::ModelChunk& in, ChunkMessage& out) {
  if (in.data() && in.data()->size() > kMaxModelChunk) return false;
  out.request = in.request();
  out.offset = in.offset();
  out.total = in.total();
  out.data.clear();
  if (in.data()) out.data.assign(in.data()->begin(), in.data()->end());
  out.error = in.error() ? in.error()->str().substr(0, 1024) : "";
  return true;
}

ChunkMessage read_model_chunk(const std::string& models_dir, const FetchMessage& fetch) {
  ChunkMessage out;
  out.request = fetch.request;
  out.offset = fetch.offset;
  if (!core::stays_inside(fetch.path)) {
    out.error = "the model path '" + fetch.path + "' leaves the models folder";
    return out;
  }
  const std::string path = models_dir + "/" + fetch.path;
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (!in || ec) {
    out.error = "cannot read " + path + ": " + (ec ? ec.message() : std::strerror(errno));
    return out;
  }
  out.total = size;
  if (fetch.offset > size) {
    out.error = "offset " + std::to_string(fetch.offset) + " is past the end of " + path;
    return out;
  }
  const uint64_t n = std::min<uint64_t>({fetch.length, kMaxModelChunk, size - fetch.offset});
  out.data.resize(n);
  in.seekg(std::streamoff(fetch.offset));
  if (!in.read(reinterpret_cast<char*>(out.data.data()), std::streamsize(n))) {
    out.data.clear();
    out.error = "cannot read " + path + " at offset " + std::to_string(fetch.offset);
  }
  return out;
}

namespace {

std::string hex_of(crypto_hash_sha256_state& state) {
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&state, digest);
  char hex[2 * crypto_hash_sha256_BYTES + 1];
  sodium_bin2hex(hex, sizeof hex, digest, sizeof digest);
  return hex;
}

}  // namespace

std::string floats_sha256(const float* values, size_t n) {
  if (sodium_init() < 0) return "";
  crypto_hash_sha256_state state;
  crypto_hash_sha256_init(&state);
  crypto_hash_sha256_update(&state, reinterpret_cast<const unsigned char*>(values),
                            n * sizeof(float));
  return hex_of(state);
}

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in || sodium_init() < 0) return "";
  crypto_hash_sha256_state state;
  crypto_hash_sha256_init(&state);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    crypto_hash_sha256_update(&state, reinterpret_cast<const unsigned char*>(buf.data()),
                              size_t(in.gcount()));
  }
  if (in.bad()) return "";
  return hex_of(state);
}

}  // namespace dtrain::daemon
