// `dtrain-submit fetch JOB [-o FILE]`: copies a finished job's model from a node that holds it,
// through the controller (daemon/README.md, "Fetching a model"), chunk by chunk from one node,
// into FILE.part, checks the whole file against the SHA-256 that node reported with its result
// and that it reads back as a model, and only then renames it to FILE. The user never needs to
// know which node's data directory holds the model.
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

int run_cluster_fetch(const ClusterArgs& a, const std::string& job, const std::string& output,
                      uint32_t chunk_kb, std::FILE* report) {
  const uint64_t length = uint64_t(chunk_kb) << 10;
  uint64_t id = 0;
  if (!job_id_arg(job, id)) return kExitBadInput;
  std::vector<uint8_t> data;
  Json first;
  try {
    daemon::ClientRequest chunk = daemon::client_request(daemon::RequestKind::Fetch, id);
    chunk.length = uint32_t(std::min<uint64_t>(length, UINT32_MAX));  // the controller caps it
    first = call(a, chunk, &data, std::chrono::seconds(120));
  } catch (const std::exception& e) {
    return report_error(e);
  }
  const std::string node = first.value("node", "");
  const std::string sha256 = first.value("sha256", "");
  const uint64_t total = first.value("total", uint64_t(0));
  if (sha256.empty()) {
    std::fprintf(stderr, "error: the controller sent no checksum for job %s's model\n  fix: run "
                         "the same dtrain release here and on the cluster\n", job.c_str());
    return kExitJobFailed;
  }
  // The file name only: whatever the controller says, nothing is written outside here.
  std::string name = fs::path(first.value("file", std::string())).filename().string();
  if (name.empty() || name == "." || name == "..") name = "model.dtm";
  const std::string path = output.empty() ? name : output;
  const std::string part = path + ".part";
  std::ofstream out(part, std::ios::binary | std::ios::trunc);
  if (!out) {
    std::fprintf(stderr, "error: cannot write %s\n  fix: choose a writable place with -o FILE\n",
                 part.c_str());
    return kExitBadInput;
  }
  uint64_t offset = 0;
  for (;;) {
    if (data.empty() && offset < total) {
      std::fprintf(stderr, "error: %s sent no bytes at offset %llu of %llu\n", node.c_str(),
                   (unsigned long long)offset, (unsigned long long)total);
      fs::remove(part);
      return kExitJobFailed;
    }
    out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
    offset += data.size();
    if (offset >= total) break;
    try {  // the rest from the same node: another node's file is another file
      daemon::ClientRequest rest = daemon::client_request(daemon::RequestKind::Fetch, id);
      rest.offset = offset;
      rest.length = uint32_t(std::min<uint64_t>(length, UINT32_MAX));
      rest.node = node;
      const Json next = call(a, rest, &data, std::chrono::seconds(120));
      if (next.value("total", uint64_t(0)) != total) {
        std::fprintf(stderr, "error: the model on %s changed size while it was copied\n  fix: "
                             "fetch again\n", node.c_str());
        fs::remove(part);
        return kExitJobFailed;
      }
    } catch (const std::exception& e) {
      fs::remove(part);
      return report_error(e);
    }
  }
  out.close();
  if (!out) {
    std::fprintf(stderr, "error: cannot write %s (disk full?)\n", part.c_str());
    fs::remove(part);
    return kExitBadInput;
  }
  const std::string got = daemon::file_sha256(part);
  if (got != sha256) {
    std::fprintf(stderr, "error: the copy of job %s's model from %s does not match the checksum "
                         "the node reported when the job ended (%s, copy %s): the file was "
                         "replaced since, by a later job with the same output.model?\n  fix: "
                         "left as %s; rerun the job or copy the file you want by hand\n",
                 job.c_str(), node.c_str(), sha256.c_str(), got.c_str(), part.c_str());
    return kExitJobFailed;
  }
  try {
    core::read_model_file(part);  // it reads back whole as a model
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: the fetched file is not a model: %s\n  fix: left as %s; check "
                         "the node's copy\n", e.what(), part.c_str());
    return kExitJobFailed;
  }
  std::error_code ec;
  fs::rename(part, path, ec);
  if (ec) {
    std::fprintf(stderr, "error: cannot rename %s to %s: %s\n", part.c_str(), path.c_str(),
                 ec.message().c_str());
    return kExitBadInput;
  }
  std::fprintf(report, "fetched job %s's model from %s: %s (%llu bytes, sha256 %s)\n", job.c_str(),
              node.c_str(), path.c_str(), (unsigned long long)total, sha256.substr(0, 16).c_str());
  return kExitSuccess;
}

}  // namespace dtrain::submit
