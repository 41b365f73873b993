// `dtrain-submit fetch JOB [-o FILE]`: copies a finished job's model from a node that holds it,
// through the controller (docs/architecture/daemon.md, "Fetching a model"), chunk by chunk from one
// node, into FILE.part, checks the whole file against the SHA-256 that node reported with its
// result and that it reads back as a model, and only then renames it to FILE. The user never needs
// to know which node's data directory holds the model.
#include <sodium.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/io/model_file.h"
#include "daemon/protocol/model_fetch.h"
#include "submit/cluster_commands.h"
#include "submit/controller_client.h"
#include "submit/exit_codes.h"

namespace dtrain::submit {

using daemon::Json;
namespace fs = std::filesystem;

namespace {

constexpr int kGoOn = -1;  // a phase's "no exit code yet"

// One chunk of job `id`'s model from `offset` (from `node`; "" lets the controller choose).
Json request_chunk(const ClusterArgs& a, uint64_t id, uint64_t offset, uint64_t length,
                   const std::string& node, std::vector<uint8_t>& data) {
  daemon::ClientRequest chunk = daemon::client_request(daemon::RequestKind::Fetch, id);
  chunk.offset = offset;
  chunk.length = uint32_t(std::min<uint64_t>(length, UINT32_MAX));  // the controller caps it
  chunk.node = node;
  return call(a, chunk, &data, std::chrono::seconds(120));
}

// What the first chunk's answer says of the copy: where it comes from and what it must be.
struct Copy {
  std::string node, sha256, path, part;
  uint64_t total = 0;
};

// The file name only: whatever the controller says, nothing is written outside here.
std::string local_path(const Json& first, const std::string& output) {
  std::string name = fs::path(first.value("file", std::string())).filename().string();
  if (name.empty() || name == "." || name == "..") name = "model.dtm";
  return output.empty() ? name : output;
}

// Writes the first chunk and the rest (from the same node: another node's file is another
// file) into copy.part.
int copy_chunks(const ClusterArgs& a, uint64_t id, uint64_t length, const Copy& copy,
                std::vector<uint8_t>& data, std::ofstream& out) {
  uint64_t offset = 0;
  for (;;) {
    if (data.empty() && offset < copy.total) {
      std::fprintf(stderr, "error: %s sent no bytes at offset %llu of %llu\n", copy.node.c_str(),
                   (unsigned long long)offset, (unsigned long long)copy.total);
      return kExitJobFailed;
    }
    out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
    offset += data.size();
    if (offset >= copy.total) return kGoOn;
    const Json next = request_chunk(a, id, offset, length, copy.node, data);
    if (next.value("total", uint64_t(0)) != copy.total) {
      std::fprintf(stderr, "error: the model on %s changed size while it was copied\n  fix: "
                           "fetch again\n", copy.node.c_str());
      return kExitJobFailed;
    }
  }
}

// The copy must match the checksum the node reported and read back whole as a model.
int check_copy(const std::string& job, const Copy& copy) {
  const std::string got = daemon::file_sha256(copy.part);
  if (got != copy.sha256) {
    std::fprintf(stderr, "error: the copy of job %s's model from %s does not match the checksum "
                         "the node reported when the job ended (%s, copy %s): the file was "
                         "replaced since, by a later job with the same output.model?\n  fix: "
                         "left as %s; rerun the job or copy the file you want by hand\n",
                 job.c_str(), copy.node.c_str(), copy.sha256.c_str(), got.c_str(),
                 copy.part.c_str());
    return kExitJobFailed;
  }
  try {
    core::read_model_file(copy.part);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: the fetched file is not a model: %s\n  fix: left as %s; check "
                         "the node's copy\n", e.what(), copy.part.c_str());
    return kExitJobFailed;
  }
  return kGoOn;
}

// Copies into copy.part; a failure removes it.
int write_part(const ClusterArgs& a, uint64_t id, uint64_t length, const Copy& copy,
               std::vector<uint8_t>& data) {
  std::ofstream out(copy.part, std::ios::binary | std::ios::trunc);
  if (!out) {
    std::fprintf(stderr, "error: cannot write %s\n  fix: choose a writable place with -o FILE\n",
                 copy.part.c_str());
    return kExitBadInput;
  }
  int code;
  try {
    code = copy_chunks(a, id, length, copy, data, out);
  } catch (const std::exception& e) {
    code = report_error(e);
  }
  out.close();
  if (code == kGoOn && !out) {
    std::fprintf(stderr, "error: cannot write %s (disk full?)\n", copy.part.c_str());
    code = kExitBadInput;
  }
  if (code != kGoOn) fs::remove(copy.part);
  return code;
}

}  // namespace

int run_cluster_fetch(const ClusterArgs& a, const std::string& job, const std::string& output,
                      uint32_t chunk_kb, std::FILE* report) {
  const uint64_t length = uint64_t(chunk_kb) << 10;
  uint64_t id = 0;
  if (!job_id_arg(job, id)) return kExitBadInput;
  std::vector<uint8_t> data;
  Json first;
  try {
    first = request_chunk(a, id, 0, length, "", data);
  } catch (const std::exception& e) {
    return report_error(e);
  }
  Copy copy{first.value("node", ""), first.value("sha256", ""), local_path(first, output), "",
            first.value("total", uint64_t(0))};
  if (copy.sha256.empty()) {
    std::fprintf(stderr, "error: the controller sent no checksum for job %s's model\n  fix: run "
                         "the same dtrain release here and on the cluster\n", job.c_str());
    return kExitJobFailed;
  }
  copy.part = copy.path + ".part";
  if (int code = write_part(a, id, length, copy, data); code != kGoOn) return code;
  if (int code = check_copy(job, copy); code != kGoOn) return code;
  std::error_code ec;
  fs::rename(copy.part, copy.path, ec);
  if (ec) {
    std::fprintf(stderr, "error: cannot rename %s to %s: %s\n", copy.part.c_str(),
                 copy.path.c_str(), ec.message().c_str());
    return kExitBadInput;
  }
  std::fprintf(report, "fetched job %s's model from %s: %s (%llu bytes, sha256 %s)\n",
               job.c_str(), copy.node.c_str(), copy.path.c_str(), (unsigned long long)copy.total,
               copy.sha256.substr(0, 16).c_str());
  return kExitSuccess;
}

}  // namespace dtrain::submit
