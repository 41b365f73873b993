#include "daemon/node/task_runner.h"

#include <cstdlib>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/data/packed_file.h"
#include "core/data/part_range.h"
#include "core/eval/evaluate.h"
#include "core/infer/keyed_examples.h"
#include "core/infer/prediction_writer.h"
#include "core/io/saved_model.h"
#include "core/train/data_memory.h"
#include "core/train/training_data.h"
#include "core/util/error.h"
#include "core/util/nofollow_folder.h"
#include "daemon/node/local_shards.h"
#include "daemon/protocol/part_scores.h"

namespace dtrain::daemon {

// What run() loads once: the model and, as the task says, labelled data or keyed inputs.
struct TaskRunner::Loaded {
  core::SavedModel saved;
  core::Dataset data;          // eval
  core::KeyedExamples inputs;  // infer
  int64_t examples = 0;
};

TaskRunner::TaskRunner(const DaemonConfig& config, uint64_t job_id, TaskMessage task,
                       Report report)
    : config_(config), job_id_(job_id), task_(std::move(task)), report_(std::move(report)) {
  queue_parts(task_.parts, task_.part_files);
  task_.parts.clear();
  task_.part_files.clear();
  thread_ = std::thread([this] { run(); });
}

TaskRunner::~TaskRunner() {
  cancel();
  if (thread_.joinable()) thread_.join();
}

void TaskRunner::add_parts(const TaskMessage& more) {
  std::optional<ShardsReport> listed_again;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (task_.part_count == 0) task_.part_count = more.part_count;  // the node-local plan
    if (more.part_count == 0) listed_again = shard_report_;
  }
  // Asked for its list again (the report may have died with a session): it is sent again.
  if (listed_again) report_(*listed_again);
  queue_parts(more.parts, more.part_files);
}

void TaskRunner::queue_parts(const std::vector<uint32_t>& parts,
                             const std::vector<std::string>& files) {
  // Finished parts asked for again: their report may have been lost.
  std::vector<PartDoneReport> again;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < parts.size(); ++i) {
      const uint32_t p = parts[i];
      if (p >= task_.part_count) continue;
      if (i < files.size()) part_files_[p] = files[i];
      if (auto done = finished_.find(p); done != finished_.end()) again.push_back(done->second);
      else if (seen_.insert(p).second) parts_.push_back(p);
    }
    wake_.notify_all();
  }
  for (const PartDoneReport& report : again) report_(report);
}

void TaskRunner::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  wake_.notify_all();
}

Json TaskRunner::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {{"id", job_id_text(job_id_)},
          {"task", task_kind_word(task_.kind)},
          {"parts_done", int64_t(finished_.size())},
          {"parts_queued", parts_.size()}};
}

// A test holds this node's parts back until a file exists (DTRAIN_TEST_HOLD_PARTS=PATH;
// tests/cluster/cluster_eval_test: a node whose parts come last, or wait through a cancel,
// while its heartbeats go on). At most two minutes. Unset, as always outside such a test: none.
void TaskRunner::hold_while_asked(std::unique_lock<std::mutex>& lock) {
  const char* path = std::getenv("DTRAIN_TEST_HOLD_PARTS");
  if (!path || !*path) return;
  const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (!cancelled_ && !std::filesystem::exists(path) && std::chrono::steady_clock::now() < end)
    wake_.wait_for(lock, std::chrono::milliseconds(50));
}

bool TaskRunner::next_part(uint32_t& part) {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [&] { return cancelled_ || !parts_.empty(); });
  hold_while_asked(lock);
  if (cancelled_) return false;
  part = parts_.front();
  parts_.pop_front();
  return true;
}

// The node's data_roots where they confine (null where they do not: a run on one machine).
std::shared_ptr<const core::DataRoots> TaskRunner::confining_roots() const {
  core::DataRoots roots = config_.input_roots();
  if (!roots.confines()) return nullptr;
  return std::make_shared<const core::DataRoots>(std::move(roots));
}

// Inputs only from the node's data_roots, refused before anything looks at them: the paths,
// each packed file a pattern matches (one may be a link leading out), no wildcard in a folder.
void TaskRunner::check_inputs() const {
  const core::DataRoots roots = config_.input_roots();
  const bool packed = task_.format == "packed" && task_.shards.empty();
  std::vector<std::string> inputs{task_.labels};
  if (!task_.shards.empty()) inputs.push_back(core::pattern_folder(task_.shards));
  if (!packed) inputs.push_back(task_.path);
  if (packed) inputs.push_back(core::pattern_folder(task_.path));
  roots.require(inputs);
  if (packed) roots.require(core::packed_files(task_.path));  // their folder is allowed
}

void TaskRunner::load(Loaded& l) {
  check_inputs();
  // The model arrives as bytes; the reader takes a file: a private one, removed at once.
  const std::string dir = config_.data_dir + "/tasks";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + job_id_text(job_id_) + ".dtm";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(task_.model.data(), 1, task_.model.size(), f) != task_.model.size()) {
      if (f) std::fclose(f);
      throw core::UserError("cannot write the shipped model to " + path,
                            "check that the daemon's data_dir has room and is writable");
    }
    std::fclose(f);
  }
  try {
    l.saved = core::load_saved_model(path);
  } catch (...) {
    std::filesystem::remove(path);
    throw;
  }
  std::filesystem::remove(path);
  task_.model = {};  // loaded: the bytes are not needed any more
  if (!task_.shards.empty()) return;  // node-local: each part reads its own file
  const std::shared_ptr<const core::DataRoots> roots = confining_roots();
  if (task_.kind == TaskKind::Infer) {
    core::check_memory(
        core::keyed_memory_bytes(task_.path, task_.header, l.saved.model->input_shape(), roots),
        config_.job_memory_bytes(), "the data " + task_.path);
    l.inputs = core::read_keyed_examples({task_.path, task_.key_column, task_.header, roots},
                                         l.saved.model->input_shape());
    l.saved.normalizer.apply(l.inputs.features);
    l.examples = l.inputs.size();
    return;
  }
  core::DataSourceSpec source;
  source.format = task_.format;
  source.path = task_.path;
  source.images = task_.path;
  source.labels = task_.labels;
  source.label_column = task_.label_column;
  source.header = task_.header;
  source.regression = l.saved.spec.regression();
  source.roots = roots;  // every file checked as it is opened; an image folder's links refused
  core::check_memory(core::source_memory_bytes(source, l.saved.model->num_outputs(),
                                               l.saved.model->input_shape()),
                     config_.job_memory_bytes(), "the data " + task_.path);
  l.data = core::load_source(source, l.saved.model->num_outputs(), l.saved.model->input_shape(),
                             task_.path);
  l.saved.normalizer.apply(l.data.features);
  l.examples = l.data.size();
}

void TaskRunner::list_shards() {
  const std::vector<ShardFile> files =
      list_local_shards(task_.shards, config_.name, config_.input_roots());
  const ShardsReport report{files};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const ShardFile& f : files) listed_[f.path] = f;
    shard_report_ = report;
  }
  report_(LogReport{"holds " + std::to_string(files.size()) + " of the files " + task_.shards +
                    " matches"});
  report_(report);
}

core::Dataset TaskRunner::shard_data(Loaded& l, uint32_t part) const {
  ShardFile listed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = part_files_.find(part);
    if (it == part_files_.end() || !listed_.count(it->second))
      throw core::UserError("the controller gave part " + std::to_string(part + 1) +
                                " a file this node did not list",
                            "run the same dtrain release on every node");
    listed = listed_.at(it->second);
  }
  const std::string& file = listed.path;
  const std::shared_ptr<const core::DataRoots> roots = confining_roots();
  const core::PackedHeader now = core::read_packed_header(file, roots.get());
  if (now.export_id != listed.export_id || now.records != listed.examples)
    throw core::UserError("'" + file + "' changed since this node listed it",
                          "leave the --shards files as they are while an evaluation runs, and "
                          "submit again");
  core::Dataset d = core::load_packed({file}, core::PackedCoverage::kPart,
                                      l.saved.model->num_outputs(), l.saved.spec.regression(),
                                      l.saved.model->input_shape(), file, roots.get());
  l.saved.normalizer.apply(d.features);
  return d;
}

PartDoneReport TaskRunner::run_part(Loaded& l, uint32_t part) {
  if (!task_.shards.empty()) {  // node-local: the part is one whole file
    const core::Dataset data = shard_data(l, part);
    PartDoneReport done{part, data.size(), 0, "", std::nullopt, std::nullopt};
    evaluate_part(l, data, {0, data.size()}, part, done);
    return done;
  }
  const core::ExampleRange r = core::part_range(l.examples, task_.batch_size, part, task_.part_count);
  PartDoneReport done{part, r.size(), r.begin, "", std::nullopt, std::nullopt};
  if (task_.kind == TaskKind::Infer) {
    const std::string name = part_file_name(part);
    // A new file of this runner's own, in the folder opened without following links
    // (core/util/nofollow_folder.h): a node the job dropped may still be writing the same part
    // (the same bytes) beside its new holder.
    core::NoFollowFolder folder(task_.output_dir);
    std::string temporary;
    std::FILE* out = folder.create_temporary(name, temporary);
    const core::PredictionWriter writer(l.saved);
    std::fputs(writer.header().c_str(), out);
    writer.write(*l.saved.model, l.inputs, r.begin, r.end, task_.batch_size, out);
    const bool written = std::fflush(out) == 0 && !std::ferror(out);
    std::fclose(out);
    if (!written) {
      folder.remove(temporary);
      throw core::UserError("cannot write '" + task_.output_dir + "/" + name + "'",
                            "check the space in --output's folder");
    }
    folder.rename(temporary, name);
    done.file = task_.output_dir + "/" + name;
    return done;
  }
  evaluate_part(l, l.data, r, part, done);
  return done;
}

void TaskRunner::evaluate_part(Loaded& l, const core::Dataset& data, core::ExampleRange r,
                               uint32_t part, PartDoneReport& done) const {
  // The same pass gives the ROC scores when asked for (classification only).
  const bool roc = !l.saved.spec.regression() &&
                   std::find(task_.metrics.begin(), task_.metrics.end(), "roc") != task_.metrics.end();
  if (roc && uint64_t(r.size()) * uint64_t(l.saved.model->num_outputs()) * sizeof(float) >
                 kMaxPartScoreBytes)
    throw core::UserError("part " + std::to_string(part) + "'s ROC scores (" +
                              std::to_string(r.size()) + " examples x " +
                              std::to_string(l.saved.model->num_outputs()) +
                              " classes) exceed 16 MiB",
                          task_.shards.empty()
                              ? "use more nodes (smaller parts), or evaluate the ROC on one machine"
                              : "export the test set into more, smaller files (--test-files), or "
                                "evaluate the ROC on one machine");
  core::RocOneVsAll per_class;
  const core::Evaluation e = core::evaluate(*l.saved.model, data, task_.top_n,
                                            task_.batch_size, r.begin, r.end,
                                            roc ? &per_class : nullptr);
  if (roc) done.roc = part_scores(per_class);
  done.counts = evaluation_counts(e);
}

void TaskRunner::run() {
  try {
    Loaded loaded;
    load(loaded);
    if (task_.shards.empty())
      report_(LogReport{"loaded the model and " + std::to_string(loaded.examples) + " examples"});
    else
      list_shards();
    uint32_t part = 0;
    while (next_part(part)) {
      const PartDoneReport done = run_part(loaded, part);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        finished_[part] = done;
      }
      report_(done);
    }
  } catch (const core::UserError& e) {
    report_(FailedReport{-1, e.what_happened(), e.fix(), false});
  } catch (const std::exception& e) {
    report_(FailedReport{-1, e.what(), "", false});
  }
  done_ = true;
}

}  // namespace dtrain::daemon
