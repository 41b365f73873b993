#include "daemon/protocol/job_stats.h"

#include <cmath>

namespace dtrain::daemon {
namespace {

template <size_t N>
Json rows_json(const std::vector<std::array<double, N>>& rows) {
  Json out = Json::array();
  for (const auto& r : rows) out.push_back(r);
  return out;
}

// Rows of N numbers each; a non-finite figure (a diverged loss) is kept as NaN.
template <size_t N>
bool read_rows(const Json& in, std::vector<std::array<double, N>>& out) {
  if (!in.is_array() || in.size() > kMaxStatsRows) return false;
  out.reserve(in.size());
  for (const Json& row : in) {
    if (!row.is_array() || row.size() != N) return false;
    std::array<double, N> r{};
    for (size_t i = 0; i < N; ++i) {
      if (row[i].is_number()) r[i] = row[i].get<double>();
      else if (row[i].is_null()) r[i] = std::nan("");
      else return false;
    }
    out.push_back(r);
  }
  return true;
}

}  // namespace

Json stats_report(const StatsReport& report) {
  return {{"steps", rows_json(report.steps)},
          {"epochs", rows_json(report.epochs)},
          {"links", rows_json(report.links)}};
}

bool read_stats_report(const Json& body, StatsReport& out) {
  StatsReport r;
  if (!body.is_object() || !read_rows(body.value("steps", Json::array()), r.steps) ||
      !read_rows(body.value("epochs", Json::array()), r.epochs) ||
      !read_rows(body.value("links", Json::array()), r.links))
    return false;
  // Worker, iteration and epoch are whole numbers a job can have.
  for (const auto& s : r.steps)
    if (!(s[0] >= 0 && s[0] < 4096 && s[1] >= 0 && s[1] < 1e15 && s[2] >= 0 && s[2] < 1e9))
      return false;
  out = std::move(r);
  return true;
}

}  // namespace dtrain::daemon
