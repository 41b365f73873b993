#include "daemon/protocol/shard_list.h"

#include <filesystem>

namespace dtrain::daemon {
namespace {

constexpr size_t kMaxFiles = 1 << 20;
constexpr int64_t kMaxExamples = int64_t(1) << 40;

bool count_in(const Json& j, const char* key, int64_t& out) {
  if (!j.contains(key) || !j[key].is_number_integer()) return false;
  out = j[key].get<int64_t>();
  return out >= 0 && out <= kMaxExamples;
}

}  // namespace

std::string ShardFile::name() const { return std::filesystem::path(path).filename().string(); }

bool check_shard_file(const ShardFile& f, std::string& error) {
  if (f.examples < 0 || f.examples > kMaxExamples || f.total < 0 || f.total > kMaxExamples) {
    error = "a file entry with counts out of range";
    return false;
  }
  if (f.path.empty() || f.path.size() > 4096 || f.name().empty()) {
    error = "a file entry with an impossible path";
    return false;
  }
  return true;
}

bool read_shard_list(const Json& body, std::vector<ShardFile>& out, std::string& error) {
  const Json* files = body.contains("files") ? &body["files"] : nullptr;
  if (!files || !files->is_array() || files->size() > kMaxFiles) {
    error = "no list of files";
    return false;
  }
  for (const Json& f : *files) {
    ShardFile s;
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() ||
        !count_in(f, "examples", s.examples) || !count_in(f, "total", s.total) ||
        !f.contains("export") || !f["export"].is_number_unsigned() ||
        f["export"].get<uint64_t>() > UINT32_MAX) {
      error = "a file entry without path, examples, total and export";
      return false;
    }
    s.path = f["path"].get<std::string>();
    s.export_id = uint32_t(f["export"].get<uint64_t>());
    if (!check_shard_file(s, error)) return false;
    out.push_back(std::move(s));
  }
  return true;
}

Json shard_list_json(const std::vector<ShardFile>& files) {
  Json list = Json::array();
  for (const ShardFile& f : files)
    list.push_back({{"path", f.path}, {"examples", f.examples}, {"total", f.total},
                    {"export", f.export_id}});
  return {{"files", list}};
}

}  // namespace dtrain::daemon
