#pragma once
// The job spec's choices that the code acts on, as enums (words only in YAML, JSON and records):
// training.mode and training.device. training.precision is kernels::Precision.
#include <optional>
#include <string>

#include "kernels/precision.h"

namespace dtrain::core {

// How the job's workers combine their work (docs/architecture/core.md, "Sharing").
// kAuto (`mode: auto`) is the spec's word only: a cluster's nodes replace it with allreduce or
// gradient sharing before training (core/train/sync_choice.h); nothing trains in it.
enum class TrainingMode { kGradientSharing, kParameterAveraging, kAllreduce, kAuto };
// Where its workers run: the CPU, GPUs (every node of the job needs one), or GPUs where a node
// has them and the CPU elsewhere.
enum class Device { kAuto, kCpu, kGpu };

// "gradient_sharing", "parameter_averaging", "allreduce", "auto".
const char* mode_name(TrainingMode mode);
// Gradient sharing that exchanges every step (not `sync: {local: ...}`, which exchanges one
// pseudo-gradient per round of local steps and steps each replica on its own in between).
struct TrainingSpec;
bool shares_every_step(const TrainingSpec& training);
// `sync: {local: ...}`: local steps with an outer optimizer.
bool steps_locally(const TrainingSpec& training);
// `mode: allreduce`: every step's gradients summed densely over the job's workers, one updater
// step on every replica alike (docs/architecture/core.md, "Dense all-reduce").
bool reduces_every_step(const TrainingSpec& training);
// `mode: auto`: allreduce or gradient sharing, chosen from the link before training.
bool mode_is_auto(const TrainingSpec& training);

// "auto", "cpu", "gpu".
const char* device_name(Device device);
// The value a word names; nullopt for any other word.
std::optional<TrainingMode> parse_mode(const std::string& word);
std::optional<Device> parse_device(const std::string& word);

}  // namespace dtrain::core
