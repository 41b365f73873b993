#pragma once
// dtrain-submit's exit codes, stable for scripts.
namespace dtrain::submit {
constexpr int kExitSuccess = 0;
constexpr int kExitJobFailed = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitNoController = 3;
}  // namespace dtrain::submit
