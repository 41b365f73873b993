#include "core/train/checkpoints.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/util/error.h"

namespace dtrain::core {
namespace fs = std::filesystem;
namespace {

constexpr const char* kMarker = ".ckpt-";

// "<stem>" of "<dir>/<stem>.dtm" (the extension, whatever it is, dropped).
std::string stem_of(const std::string& model_path) { return fs::path(model_path).stem().string(); }

// The iteration in a checkpoint's file name, or -1 when `name` is not one of `stem`'s.
int64_t iteration_in(const std::string& name, const std::string& stem) {
  const std::string prefix = stem + kMarker;
  if (name.rfind(prefix, 0) != 0 || name.size() < prefix.size() + 5) return -1;
  if (name.compare(name.size() - 4, 4, ".dtm") != 0) return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 4);
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

// The first of `candidates` (newest first) that reads back whole and that `wanted` accepts, in
// `point`; those that do not read back are named in point.skipped. False when none is found.
template <class Wanted>
bool first_whole(const std::vector<Checkpoint>& candidates, Wanted&& wanted,
                 ResumePoint& point) {
  for (const Checkpoint& c : candidates) {
    try {
      ModelFile f = read_model_file(c.path);
      if (!wanted(f)) continue;
      point.model = std::move(f);
      point.path = c.path;
      return true;
    } catch (const UserError& e) {
      point.skipped.push_back(c.path + ": " + e.what_happened());
    }
  }
  return false;
}

}  // namespace

std::string checkpoint_path(const std::string& model_path, int64_t iteration) {
  const fs::path model(model_path);
  return (model.parent_path() / (stem_of(model_path) + kMarker + std::to_string(iteration) +
                                 ".dtm"))
      .string();
}

std::string model_of_checkpoint(const std::string& path) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  const size_t at = name.rfind(kMarker);
  if (at == std::string::npos || iteration_in(name, name.substr(0, at)) < 0) return "";
  return (p.parent_path() / (name.substr(0, at) + ".dtm")).string();
}

std::vector<Checkpoint> list_checkpoints(const std::string& model_path) {
  std::vector<Checkpoint> found;
  const fs::path dir = fs::path(model_path).parent_path().empty()
                           ? fs::path(".")
                           : fs::path(model_path).parent_path();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int64_t it = iteration_in(entry.path().filename().string(), stem_of(model_path));
    if (it >= 0) found.push_back({it, checkpoint_path(model_path, it)});
  }
  std::sort(found.begin(), found.end(),
            [](const Checkpoint& a, const Checkpoint& b) { return a.iteration > b.iteration; });
  return found;
}

void write_checkpoint(const std::string& model_path, const ModelFile& model, int64_t keep) {
  write_model_file(checkpoint_path(model_path, model.iteration), model);
  const std::vector<Checkpoint> all = list_checkpoints(model_path);
  for (size_t i = size_t(std::max<int64_t>(keep, 1)); i < all.size(); ++i) {
    std::error_code ec;
    fs::remove(all[i].path, ec);  // a leftover costs disk only: the newest are what count
  }
}

void remove_checkpoints(const std::string& model_path) {
  for (const Checkpoint& c : list_checkpoints(model_path)) {
    std::error_code ec;
    fs::remove(c.path, ec);
  }
}

ResumePoint find_resume_point(const std::string& from) {
  ResumePoint point;
  // The candidates, newest first: the named checkpoint and the older ones of its model, or
  // every checkpoint of a named model file.
  std::string model = model_of_checkpoint(from);
  std::vector<Checkpoint> candidates;
  if (!model.empty()) {
    const int64_t named = iteration_in(fs::path(from).filename().string(), stem_of(model));
    for (const Checkpoint& c : list_checkpoints(model))
      if (c.iteration <= named) candidates.push_back(c);
    if (candidates.empty() || candidates.front().iteration != named)
      candidates.insert(candidates.begin(), {named, from});
  } else {
    model = from;
    candidates = list_checkpoints(model);
  }
  if (first_whole(candidates, [](const ModelFile&) { return true; }, point)) return point;
  std::string tried;
  for (const std::string& s : point.skipped) tried += "\n  skipped " + s;
  throw UserError("no checkpoint of " + model + " to resume from" +
                      (point.skipped.empty() ? " (none on disk)" : tried),
                  "resume from a checkpoint file (" + checkpoint_path(model, 1000) +
                      ", say), written when output.checkpoint_every is set");
}

ResumePoint find_epoch_checkpoint(const std::string& model_path, int64_t epochs_done) {
  ResumePoint point;
  if (first_whole(list_checkpoints(model_path),
                  [&](const ModelFile& f) { return f.epoch == epochs_done; }, point))
    return point;
  throw UserError("no whole checkpoint of " + model_path + " with " +
                      std::to_string(epochs_done) + " epochs done on this node",
                  "submit the job again with model.init_from: a checkpoint of another node");
}

}  // namespace dtrain::core
