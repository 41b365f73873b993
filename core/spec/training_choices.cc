#include "core/spec/training_choices.h"

#include "core/spec/job_spec.h"

namespace dtrain::core {

const char* mode_name(TrainingMode mode) {
  switch (mode) {
    case TrainingMode::kParameterAveraging: return "parameter_averaging";
    case TrainingMode::kAllreduce: return "allreduce";
    case TrainingMode::kAuto: return "auto";
    case TrainingMode::kGradientSharing: break;
  }
  return "gradient_sharing";
}

const char* device_name(Device device) {
  switch (device) {
    case Device::kCpu: return "cpu";
    case Device::kGpu: return "gpu";
    case Device::kAuto: break;
  }
  return "auto";
}

bool steps_locally(const TrainingSpec& training) {
  return training.mode == TrainingMode::kGradientSharing && training.sync.mode == "local";
}

bool reduces_every_step(const TrainingSpec& training) {
  return training.mode == TrainingMode::kAllreduce;
}

bool mode_is_auto(const TrainingSpec& training) { return training.mode == TrainingMode::kAuto; }

bool shares_every_step(const TrainingSpec& training) {
  return training.mode == TrainingMode::kGradientSharing && !steps_locally(training);
}

std::optional<TrainingMode> parse_mode(const std::string& word) {
  if (word == "gradient_sharing") return TrainingMode::kGradientSharing;
  if (word == "parameter_averaging") return TrainingMode::kParameterAveraging;
  if (word == "allreduce") return TrainingMode::kAllreduce;
  if (word == "auto") return TrainingMode::kAuto;
  return std::nullopt;
}

std::optional<Device> parse_device(const std::string& word) {
  if (word == "auto") return Device::kAuto;
  if (word == "cpu") return Device::kCpu;
  if (word == "gpu") return Device::kGpu;
  return std::nullopt;
}

}  // namespace dtrain::core
