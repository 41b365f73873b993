#include "daemon/protocol/job_stats.h"

namespace dtrain::daemon {

bool stats_rows_plausible(const StatsReport& report) {
  for (const auto& s : report.steps)
    if (!(s[0] >= 0 && s[0] < 4096 && s[1] >= 0 && s[1] < 1e15 && s[2] >= 0 && s[2] < 1e9))
      return false;
  return true;
}

}  // namespace dtrain::daemon
