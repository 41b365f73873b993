#include "daemon/controller/task_request.h"

#include <algorithm>
#include <filesystem>

#include "core/util/error.h"
#include "core/util/nofollow_folder.h"

namespace dtrain::daemon {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxPath = 4096, kMaxName = 200, kMaxClassName = 256, kMaxClasses = 100000;
constexpr int64_t kMaxBatch = 8192;

[[noreturn]] void refuse(const std::string& what, const std::string& fix) {
  throw core::UserError("the task request: " + what, fix);
}

bool printable(const std::string& s) {
  return std::none_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// A text of the request: at most `max` printable characters, or refused naming the field.
const std::string& text(const char* key, const std::string& value, size_t max) {
  if (value.size() > max || !printable(value))
    refuse(std::string(key) + " is not a text of at most " + std::to_string(max) +
               " printable characters",
           "use dtrain-submit eval|infer --cluster");
  return value;
}

int64_t integer(const char* key, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi)
    refuse(std::string(key) + " is not a whole number from " + std::to_string(lo) + " to " +
               std::to_string(hi),
           std::string("give ") + key + " in that range");
  return value;
}

const std::vector<std::string>& texts(const char* key, const std::vector<std::string>& value,
                                      size_t max_items, size_t max) {
  if (value.size() > max_items)
    refuse(std::string(key) + " is not a list of at most " + std::to_string(max_items) + " texts",
           "use dtrain-submit");
  for (const std::string& item : value) text(key, item, max);
  return value;
}

bool has_dot_dot(const fs::path& p) {
  return std::any_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".."; });
}

bool inside(const fs::path& path, const fs::path& root) {
  const fs::path rel = path.lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

// `path` (a folder, or a file whose folder exists) canonical, inside an output root and
// outside the data directory, or refused naming the setting.
std::string output_place(const std::string& what, const std::string& path, bool folder,
                         const TaskLimits& limits) {
  std::string roots;
  for (const std::string& root : limits.output_roots) roots += (roots.empty() ? "" : ", ") + root;
  const std::string fix =
      limits.output_roots.empty()
          ? "the controller has no task_outputs: set one in its dtraind.yaml (a folder shared "
            "with every node)"
          : "write into a folder under one of the controller's task_outputs (" + roots +
                "), shared with every node";
  if (path.empty() || path[0] != '/' || has_dot_dot(path))
    refuse(what + " '" + path + "' is not an absolute path without '..'", fix);
  std::error_code ec;
  const fs::path place = fs::weakly_canonical(path, ec);  // symbolic links resolved
  const fs::path folder_of = folder ? place : place.parent_path();
  if (ec || !fs::is_directory(folder_of, ec))
    refuse(what + " '" + path + "': the folder " + folder_of.string() +
               " does not exist on the controller's machine",
           fix);
  if (!folder && (fs::is_directory(place, ec) || place.filename().empty()))
    refuse(what + " '" + path + "' is a folder", "name a file in the folder");
  bool allowed = false;
  for (const std::string& root : limits.output_roots) {
    const fs::path r = fs::weakly_canonical(root, ec);
    // A file must lie below the root, not be it.
    if (!ec && inside(place, r) && (folder || place.lexically_relative(r) != ".")) allowed = true;
  }
  const fs::path data = fs::weakly_canonical(limits.data_dir, ec);
  if (ec) refuse("the controller's data_dir cannot be resolved", "check dtraind.yaml's data_dir");
  if (!allowed || inside(place, data))
    refuse(what + " '" + path + "' is not inside a task_outputs folder of the controller", fix);
  return place.string();
}

std::string data_path(const char* key, const std::string& value) {
  const std::string& p = text(key, value, kMaxPath);
  if (p.empty() || p[0] != '/')
    refuse(std::string(key) + " '" + p + "' is not absolute",
           "every node reads the data at the same path: give an absolute one");
  return p;
}

}  // namespace

Json checked_task_request(const TaskRequest& q, const TaskLimits& limits) {
  Json r = Json::object();
  const std::string task = task_kind_word(q.task);
  if (task.empty())
    refuse("unknown task (" + std::to_string(int(q.task)) + "), neither eval nor infer",
           "use dtrain-submit eval|infer --cluster of this release");
  r["task"] = task;
  r["name"] = q.name.empty() ? task : text("name", q.name, kMaxName);
  // Node-local (eval only): each node lists the packed files `shards` matches there.
  const bool node_local = !q.shards.empty();
  if (node_local && q.task != TaskKind::Eval)
    refuse("shards is for evaluations", "give infer one --input every node reads");
  if (node_local) r["shards"] = data_path("shards", q.shards);
  else r["path"] = data_path("path", q.path);
  r["header"] = q.header;
  r["batch_size"] = integer("batch_size", q.batch_size, 1, kMaxBatch);
  const int64_t nodes = integer("nodes", q.nodes, 0, 4096);
  if (size_t(nodes) > limits.alive_nodes)
    refuse("it asks for " + std::to_string(nodes) + " nodes, " +
               std::to_string(limits.alive_nodes) + " are registered",
           "ask for at most that many (--nodes), or start more nodes");
  r["nodes"] = nodes;
  if (q.task == TaskKind::Infer) {
    r["key_column"] = integer("key_column", q.key_column, -1, 1 << 20);
    r["output_dir"] = output_place("the output folder", text("output_dir", q.output_dir, kMaxPath),
                                   true, limits);
    r["keep_parts"] = q.keep_parts;
    return r;
  }
  const std::string& format = text("format", q.format, 16);
  if (format != "idx" && format != "csv" && format != "images" && format != "packed")
    refuse("unknown data format '" + format + "'", "use idx, csv, images or packed");
  if (node_local && format != "packed")
    refuse("shards with the format '" + format + "'", "shards names packed files: format packed");
  r["format"] = format;
  if (format == "idx") r["labels"] = data_path("labels", q.labels);
  r["label_column"] = integer("label_column", q.label_column, -1, 1 << 20);
  r["top_n"] = integer("top_n", q.top_n, 1, 1 << 20);
  const std::vector<std::string>& metrics = texts("metrics", q.metrics, 3, 16);
  for (const std::string& m : metrics)
    if (m != "classification" && m != "roc" && m != "regression")
      refuse("unknown metric '" + m + "'", "use classification, roc or regression");
  r["metrics"] = metrics;
  const std::string& roc_csv = text("roc_csv", q.roc_csv, kMaxPath);
  if (!roc_csv.empty()) {
    if (std::find(metrics.begin(), metrics.end(), "roc") == metrics.end())
      refuse("roc_csv without the roc metric", "add roc to --metrics");
    r["roc_csv"] = output_place("the ROC curves' file", roc_csv, false, limits);
    r["roc_classes"] = texts("roc_classes", q.roc_classes, kMaxClasses, kMaxClassName);
  }
  return r;
}

Json with_task_folder(const Json& checked, const std::string& job_folder_name) {
  Json r = checked;
  auto fresh = [&](const std::string& parent) {
    core::NoFollowFolder(parent).make_folder(job_folder_name);  // links not followed
    return parent + "/" + job_folder_name;
  };
  if (r.contains("output_dir")) r["output_dir"] = fresh(r["output_dir"].get<std::string>());
  if (r.contains("roc_csv")) {
    const fs::path csv(r["roc_csv"].get<std::string>());
    r["roc_csv"] = fresh(csv.parent_path().string()) + "/" + csv.filename().string();
  }
  return r;
}

TaskMessage task_fields(const Json& r) {
  TaskMessage t;
  t.kind = parse_task_kind(r.value("task", ""));
  t.format = r.value("format", "");
  t.path = r.value("path", "");
  t.shards = r.value("shards", "");
  t.labels = r.value("labels", "");
  t.label_column = r.value("label_column", int64_t(-1));
  t.key_column = r.value("key_column", int64_t(-1));
  t.header = r.value("header", false);
  t.metrics = r.value("metrics", std::vector<std::string>{});
  t.top_n = r.value("top_n", int64_t(1));
  t.batch_size = r.value("batch_size", int64_t(256));
  t.output_dir = r.value("output_dir", "");
  return t;
}

}  // namespace dtrain::daemon
