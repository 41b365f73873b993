#include "daemon/controller/task_results.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/util/error.h"
#include "core/util/nofollow_folder.h"
#include "daemon/controller/result_checks.h"
#include "daemon/protocol/part_scores.h"

namespace dtrain::daemon {

std::string part_file(const std::string& output_dir, uint32_t part) {
  return output_dir + "/" + part_file_name(part);
}

std::string check_part_done(TaskKind task, const Json& body, uint32_t part,
                            const std::string& output_dir, bool roc) {
  const Json& examples = body.contains("examples") ? body["examples"] : Json();
  if (!examples.is_number_integer() || examples.get<int64_t>() < 0)
    return "no example count";
  if (task == TaskKind::Infer)
    return body.value("file", "") == part_file(output_dir, part) ? "" : "not its own part file";
  const std::optional<core::Evaluation> e = evaluation_part(body);
  if (!e) return "malformed counts";
  if (e->count() != examples.get<int64_t>()) return "counts that do not add up to its examples";
  if (roc && !e->is_regression() && !body.contains("roc")) return "no ROC scores";
  if (body.contains("roc") &&
      (e->is_regression() || !decode_part_scores(body["roc"], e->count(), e->num_classes())))
    return "malformed ROC scores";
  return "";
}

namespace {

// One line of `in` with its newline ("" at the end or on an error).
std::string read_line(std::FILE* in) {
  std::string line;
  for (int c; (c = std::fgetc(in)) != EOF;) {
    line += char(c);
    if (c == '\n') break;
  }
  return line;
}

// `content` as the file `name` in `folder`: a new temporary file renamed over it.
void write_new(core::NoFollowFolder& folder, const std::string& name, const std::string& content) {
  std::string temporary;
  std::FILE* out = folder.create_temporary(name, temporary);
  const bool written = std::fwrite(content.data(), 1, content.size(), out) == content.size() &&
                       std::fflush(out) == 0;
  std::fclose(out);
  if (!written) {
    folder.remove(temporary);
    throw core::UserError("cannot write '" + folder.path() + "/" + name + "'",
                          "check the space in that folder");
  }
  folder.rename(temporary, name);
}

// The parts' ROC scores merged, in part order, into result; the curves to the request's file.
void merge_roc(const std::map<uint32_t, Json>& parts, const core::Evaluation& merged,
               const Json& request, Json& result) {
  core::RocOneVsAll roc(merged.num_classes());
  for (const auto& [part, body] : parts) {
    const auto scores = body.contains("roc")
                            ? decode_part_scores(body["roc"], body.value("examples", int64_t(-1)),
                                                 merged.num_classes())
                            : std::nullopt;
    if (!scores)
      throw core::UserError("part " + std::to_string(part) + " came without its ROC scores",
                            "run the same dtrain release on every node");
    roc.merge(*scores);
  }
  Json auc = Json::array();
  for (int64_t c = 0; c < roc.classes(); ++c) {
    const double a = roc.of(c).auc();
    auc.push_back(std::isnan(a) ? Json(nullptr) : Json(a));
  }
  result["auc"] = auc;
  result["macro_auc"] = std::isnan(roc.macro_auc()) ? Json(nullptr) : Json(roc.macro_auc());
  const std::string csv = request.value("roc_csv", "");
  if (csv.empty()) return;
  // Through the folder's descriptor, no link followed (core/util/nofollow_folder.h).
  const std::filesystem::path where(csv);
  core::NoFollowFolder folder(where.parent_path().string());
  write_new(folder, where.filename().string(),
            roc.curves_csv(request.value("roc_classes", std::vector<std::string>{})));
  result["roc_csv"] = csv;
}

}  // namespace

Json merge_eval_parts(const std::map<uint32_t, Json>& parts, const Json& request) {
  std::optional<core::Evaluation> merged;
  for (const auto& [part, body] : parts) {
    std::optional<core::Evaluation> e = evaluation_part(body, merged ? &*merged : nullptr);
    if (!e)
      throw core::UserError("the evaluation parts are of different kinds or shapes",
                            "run the same dtrain release on every node");
    if (merged) merged->merge(*e);
    else merged = std::move(e);
  }
  Json result = Json::object();
  if (!merged) return result;
  put_evaluation(*merged, result);
  result["loss_sum"] = merged->loss_sum();
  if (merged->is_regression()) result["regression_sums"] = merged->regression_metrics().sums();
  else result["counts"] = merged->counts();
  if (!merged->is_regression() && parts.begin()->second.contains("roc"))
    merge_roc(parts, *merged, request, result);
  return result;
}

Json merge_infer_parts(const std::map<uint32_t, Json>& parts, const std::string& output_dir,
                       bool keep_parts) {
  int64_t rows = 0;
  Json files = Json::array();
  for (const auto& [part, body] : parts) {
    rows += body.value("examples", int64_t(0));
    files.push_back(part_file(output_dir, part));
  }
  if (keep_parts) return {{"rows", rows}, {"files", files}, {"folder", output_dir}};
  core::NoFollowFolder folder(output_dir);
  std::string temporary;
  std::FILE* out = folder.create_temporary("predictions.csv", temporary);
  std::string header;
  bool written = true;
  for (const auto& [part, body] : parts) {
    const std::string name = part_file_name(part);
    std::FILE* in = folder.open_read(name);
    const std::string first = in ? read_line(in) : "";
    if (first.empty()) {
      if (in) std::fclose(in);
      std::fclose(out);
      folder.remove(temporary);
      throw core::UserError("cannot read the part file '" + output_dir + "/" + name + "'",
                            "make --output a folder every node and the controller share");
    }
    if (header.empty()) {
      header = first;
      written = std::fputs(header.c_str(), out) >= 0 && written;
    } else if (first != header) {
      std::fclose(in);
      std::fclose(out);
      folder.remove(temporary);
      throw core::UserError("'" + name + "' has another header than the first part",
                            "run the same dtrain release on every node");
    }
    char buffer[1 << 16];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, in)) > 0;)
      written = std::fwrite(buffer, 1, n, out) == n && written;
    std::fclose(in);
  }
  written = std::fflush(out) == 0 && written;
  std::fclose(out);
  if (!written) {
    folder.remove(temporary);
    throw core::UserError("cannot write '" + output_dir + "/predictions.csv'",
                          "check the space in --output");
  }
  folder.rename(temporary, "predictions.csv");
  remove_part_files(parts, output_dir);
  return {{"rows", rows}, {"output", output_dir + "/predictions.csv"}};
}

void remove_part_files(const std::map<uint32_t, Json>& parts, const std::string& output_dir) {
  try {
    core::NoFollowFolder folder(output_dir);
    for (const auto& [part, body] : parts) folder.remove(part_file_name(part));
  } catch (const core::UserError&) {
    // The folder is gone or was replaced by a link: nothing of ours to remove there.
  }
}

}  // namespace dtrain::daemon
