#include "daemon/controller/task_results.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/util/error.h"
#include "daemon/controller/result_checks.h"
#include "daemon/protocol/part_scores.h"

namespace dtrain::daemon {

std::string part_file(const std::string& output_dir, uint32_t part) {
  char name[32];
  std::snprintf(name, sizeof name, "/part-%05u.csv", part);
  return output_dir + name;
}

std::string check_part_done(const std::string& task, const Json& body, uint32_t part,
                            const std::string& output_dir, bool roc) {
  const Json& examples = body.contains("examples") ? body["examples"] : Json();
  if (!examples.is_number_integer() || examples.get<int64_t>() < 0)
    return "no example count";
  if (task == "infer")
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
  const std::string temporary = csv + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary);
    out << roc.curves_csv(request.value("roc_classes", std::vector<std::string>{}));
    if (!out)
      throw core::UserError("cannot write the ROC curves to '" + csv + "'",
                            "give --roc-csv a file in a folder the controller's node can write");
  }
  std::filesystem::rename(temporary, csv);
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
  if (keep_parts) return {{"rows", rows}, {"files", files}};
  const std::string output = output_dir + "/predictions.csv", temporary = output + ".tmp";
  std::ofstream out(temporary, std::ios::binary);
  if (!out)
    throw core::UserError("cannot write '" + temporary + "'",
                          "make --output a folder the controller's node can write");
  std::string header, line;
  for (const Json& f : files) {
    const std::string path = f.get<std::string>();
    std::ifstream in(path, std::ios::binary);
    if (!in || !std::getline(in, line))
      throw core::UserError("cannot read the part file '" + path + "'",
                            "make --output a folder every node and the controller share");
    if (header.empty()) {
      header = line;
      out << header << '\n';
    } else if (line != header) {
      throw core::UserError("'" + path + "' has another header than the first part",
                            "run the same dtrain release on every node");
    }
    // Streamed; an empty rest (a part of no examples) would set out's failbit.
    if (in.peek() != std::ifstream::traits_type::eof()) out << in.rdbuf();
  }
  out.close();
  if (!out) throw core::UserError("cannot write '" + output + "'", "check the space in --output");
  std::filesystem::rename(temporary, output);
  remove_part_files(parts, output_dir);
  return {{"rows", rows}, {"output", output}};
}

void remove_part_files(const std::map<uint32_t, Json>& parts, const std::string& output_dir) {
  std::error_code ignored;  // already gone is fine
  for (const auto& [part, body] : parts) std::filesystem::remove(part_file(output_dir, part), ignored);
}

}  // namespace dtrain::daemon
