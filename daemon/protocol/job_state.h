#pragma once
// Where a job is (docs/architecture/daemon.md, "The controller"): an enum inside the daemons and
// dtrain-submit, a word in job records, `status --json` and the dashboard.
#include <optional>
#include <string>

namespace dtrain::daemon {

enum class JobState { kQueued, kRunning, kSucceeded, kFailed, kCancelled };

// "queued", "running", "succeeded", "failed", "cancelled".
const char* job_state_name(JobState state);
// The state a word names; nullopt for any other word.
std::optional<JobState> parse_job_state(const std::string& word);
inline bool job_ended(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

}  // namespace dtrain::daemon
