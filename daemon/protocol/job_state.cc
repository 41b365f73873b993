#include "daemon/protocol/job_state.h"

namespace dtrain::daemon {

namespace {
constexpr JobState kStates[] = {JobState::kQueued, JobState::kRunning, JobState::kSucceeded,
                                JobState::kFailed, JobState::kCancelled};
}  // namespace

const char* job_state_name(JobState state) {
  switch (state) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "failed";  // unreachable: every enumerator is named above
}

std::optional<JobState> parse_job_state(const std::string& word) {
  for (JobState s : kStates)
    if (word == job_state_name(s)) return s;
  return std::nullopt;
}

}  // namespace dtrain::daemon
