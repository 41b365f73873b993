#include "daemon/controller/task_request.h"

#include <algorithm>
#include <filesystem>

#include "core/util/error.h"

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

// Reads the request's fields by type; a missing field takes its default.
class Fields {
 public:
  explicit Fields(const Json& body) : body_(body) {
    if (!body.is_object()) refuse("not a JSON object", "use dtrain-submit eval|infer --cluster");
  }
  std::string text(const char* key, size_t max, const std::string& fallback = "") const {
    if (!body_.contains(key)) return fallback;
    const Json& v = body_[key];
    if (!v.is_string() || v.get_ref<const std::string&>().size() > max ||
        !printable(v.get_ref<const std::string&>()))
      refuse(std::string(key) + " is not a text of at most " + std::to_string(max) +
                 " printable characters",
             "use dtrain-submit eval|infer --cluster");
    return v.get<std::string>();
  }
  int64_t integer(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    if (!body_.contains(key)) return fallback;
    const Json& v = body_[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      refuse(std::string(key) + " is not a whole number from " + std::to_string(lo) + " to " +
                 std::to_string(hi),
             std::string("give ") + key + " in that range");
    return v.get<int64_t>();
  }
  bool boolean(const char* key) const {
    if (!body_.contains(key)) return false;
    if (!body_[key].is_boolean()) refuse(std::string(key) + " is not true or false", "use dtrain-submit");
    return body_[key].get<bool>();
  }
  std::vector<std::string> texts(const char* key, size_t max_items, size_t max) const {
    std::vector<std::string> out;
    if (!body_.contains(key)) return out;
    const Json& v = body_[key];
    if (!v.is_array() || v.size() > max_items)
      refuse(std::string(key) + " is not a list of at most " + std::to_string(max_items) + " texts",
             "use dtrain-submit");
    for (const Json& item : v) {
      if (!item.is_string() || item.get_ref<const std::string&>().size() > max ||
          !printable(item.get_ref<const std::string&>()))
        refuse(std::string(key) + " holds something other than a short printable text", "use dtrain-submit");
      out.push_back(item.get<std::string>());
    }
    return out;
  }

 private:
  const Json& body_;
};

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

std::string data_path(const Fields& f, const char* key) {
  const std::string p = f.text(key, kMaxPath);
  if (p.empty() || p[0] != '/')
    refuse(std::string(key) + " '" + p + "' is not absolute",
           "every node reads the data at the same path: give an absolute one");
  return p;
}

}  // namespace

Json checked_task_request(const Json& body, const TaskLimits& limits) {
  const Fields f(body);
  Json r = Json::object();
  const std::string task = f.text("task", 16);
  if (task != "eval" && task != "infer")
    refuse("unknown task '" + task + "'", "use dtrain-submit eval|infer --cluster");
  r["task"] = task;
  r["name"] = f.text("name", kMaxName, task);
  // Node-local (eval only): each node lists the packed files `shards` matches there.
  const bool node_local = body.contains("shards");
  if (node_local && task != "eval")
    refuse("shards is for evaluations", "give infer one --input every node reads");
  if (node_local) r["shards"] = data_path(f, "shards");
  else r["path"] = data_path(f, "path");
  r["header"] = f.boolean("header");
  r["batch_size"] = f.integer("batch_size", 256, 1, kMaxBatch);
  const int64_t nodes = f.integer("nodes", 0, 0, 4096);
  if (size_t(nodes) > limits.alive_nodes)
    refuse("it asks for " + std::to_string(nodes) + " nodes, " +
               std::to_string(limits.alive_nodes) + " are registered",
           "ask for at most that many (--nodes), or start more nodes");
  r["nodes"] = nodes;
  if (task == "infer") {
    r["key_column"] = f.integer("key_column", -1, -1, 1 << 20);
    r["output_dir"] = output_place("the output folder", f.text("output_dir", kMaxPath), true, limits);
    r["keep_parts"] = f.boolean("keep_parts");
    return r;
  }
  const std::string format = f.text("format", 16);
  if (format != "idx" && format != "csv" && format != "images" && format != "packed")
    refuse("unknown data format '" + format + "'", "use idx, csv, images or packed");
  if (node_local && format != "packed")
    refuse("shards with the format '" + format + "'", "shards names packed files: format packed");
  r["format"] = format;
  if (format == "idx") r["labels"] = data_path(f, "labels");
  r["label_column"] = f.integer("label_column", -1, -1, 1 << 20);
  r["top_n"] = f.integer("top_n", 1, 1, 1 << 20);
  const std::vector<std::string> metrics = f.texts("metrics", 3, 16);
  for (const std::string& m : metrics)
    if (m != "classification" && m != "roc" && m != "regression")
      refuse("unknown metric '" + m + "'", "use classification, roc or regression");
  r["metrics"] = metrics;
  const std::string roc_csv = f.text("roc_csv", kMaxPath);
  if (!roc_csv.empty()) {
    if (std::find(metrics.begin(), metrics.end(), "roc") == metrics.end())
      refuse("roc_csv without the roc metric", "add roc to --metrics");
    r["roc_csv"] = output_place("the ROC curves' file", roc_csv, false, limits);
    r["roc_classes"] = f.texts("roc_classes", kMaxClasses, kMaxClassName);
  }
  return r;
}

TaskMessage task_fields(const Json& r) {
  TaskMessage t;
  t.kind = r.value("task", "");
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
