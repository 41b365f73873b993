// `dtrain-submit stats JOB [--csv | --json] [--node N]`: the job's stats history as the
// controller stores it (docs/architecture/daemon.md, "Stats history"): one row per recorded step
// per worker, then one per epoch per node. The default is an aligned table for people; --csv is
// for spreadsheets and scripts (a header line, then the steps; the epochs, then the links,
// each follow after an empty line with their own header); --json is the controller's answer.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "submit/cluster_commands.h"
#include "submit/controller_client.h"
#include "submit/exit_codes.h"

namespace dtrain::submit {

using daemon::Json;

namespace {

std::string cell(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  const double x = v.get<double>();
  char text[32];
  // Whole numbers, and large ones such as start_ms (Unix milliseconds), in full: %.6g would
  // print a timestamp as 1.79574e+12, which says nothing to the millisecond.
  const bool whole = x == std::floor(x) || std::fabs(x) >= 1e6;
  if (whole && std::fabs(x) < 1e15) std::snprintf(text, sizeof text, "%.0f", x);
  else std::snprintf(text, sizeof text, "%.6g", x);
  return text;
}

void print_csv(const Json& columns, const Json& rows) {
  std::string line;
  for (const auto& c : columns) line += (line.empty() ? "" : ",") + c.get<std::string>();
  std::printf("%s\n", line.c_str());
  for (const auto& row : rows) {
    line.clear();
    for (size_t i = 0; i < row.size(); ++i) line += (i ? "," : "") + cell(row[i]);
    std::printf("%s\n", line.c_str());
  }
}

void print_table(const char* title, const Json& columns, const Json& rows) {
  std::printf("%s (%zu rows)\n", title, rows.size());
  std::vector<std::vector<std::string>> lines(1);
  for (const auto& c : columns) lines[0].push_back(c.get<std::string>());
  for (const auto& row : rows) {
    lines.emplace_back();
    for (const auto& v : row) lines.back().push_back(cell(v));
  }
  // Each column as wide as its name or its widest cell, and one space apart: names such as
  // samples_per_sec are longer than the numbers below them.
  std::vector<size_t> width(lines[0].size(), 10);
  for (const auto& line : lines)
    for (size_t i = 0; i < line.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], line[i].size());
  for (const auto& cells : lines) {
    std::string text;
    for (size_t i = 0; i < cells.size(); ++i) {
      const size_t w = i < width.size() ? width[i] : cells[i].size();
      text += (i ? " " : "") + std::string(w - std::min(w, cells[i].size()), ' ') + cells[i];
    }
    std::printf("%s\n", text.c_str());
  }
}

}  // namespace

int run_cluster_stats(const ClusterArgs& a, const std::string& job, const StatsFormat& format) {
  uint64_t id = 0;
  if (!job_id_arg(job, id)) return kExitBadInput;
  Json r;
  try {
    daemon::ClientRequest stats = daemon::client_request(daemon::RequestKind::Stats, id);
    stats.node = format.node;
    r = call(a, stats, nullptr, std::chrono::seconds(120));
  } catch (const std::exception& e) {
    return report_error(e);
  }
  if (format.json) {
    std::printf("%s\n", r.dump().c_str());
  } else if (format.csv) {
    print_csv(r["step_columns"], r["steps"]);
    std::printf("\n");
    print_csv(r["epoch_columns"], r["epochs"]);
    std::printf("\n");
    print_csv(r["link_columns"], r["links"]);
  } else {
    print_table("steps", r["step_columns"], r["steps"]);
    std::printf("\n");
    print_table("epochs", r["epoch_columns"], r["epochs"]);
    std::printf("\n");
    print_table("links (cumulative, a sample a second)", r["link_columns"], r["links"]);
  }
  if (r["steps"].empty() && !format.json && !format.csv)
    std::printf("(no steps recorded: the job has not trained yet, or ran before the stats "
                "history existed)\n");
  return kExitSuccess;
}

}  // namespace dtrain::submit
