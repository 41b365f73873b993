// `dtrain-submit fetch JOB` (daemon/README.md, "Fetching a model"): the client asks for the
// finished job's model one chunk at a time; the controller asks a node that reported the model
// with its result (the lowest rank first, or the node the client names to stay on one file) over
// that node's session, waits for its answer without holding the controller's lock, and passes
// the chunk back with the SHA-256 the node reported, which the client checks the whole file
// against.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "daemon/controller/controller.h"

namespace dtrain::daemon {
namespace {

constexpr size_t kMaxFetches = 16;  // fetches in flight at once (each holds one chunk)
constexpr auto kChunkDeadline = std::chrono::seconds(30);

// The finished job's nodes that reported a model, lowest rank first.
std::vector<std::string> model_holders(const JobRecord& job) {
  std::vector<std::pair<int64_t, std::string>> ranked;
  for (const auto& [n, r] : job.results)
    if (r.contains("model_sha256") && r["model_sha256"].is_string() &&
        !r["model_sha256"].get<std::string>().empty())
      ranked.push_back({r.contains("rank") && r["rank"].is_number_integer()
                            ? r["rank"].get<int64_t>()
                            : int64_t(1) << 40,
                        n});
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  for (auto& [rank, n] : ranked) out.push_back(n);
  return out;
}

}  // namespace

std::vector<uint8_t> Controller::fetch_request(const ClientRequest& request) {
  const uint64_t job_id = request.job_id;
  const uint64_t offset = request.offset;
  const uint32_t length = std::min<uint32_t>(request.length, kMaxModelChunk);
  const std::string& pinned = request.node;
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end())
    return reply_error("no job " + job_id_text(job_id) + " on this controller",
                       "list the jobs with `dtrain-submit status`");
  const JobRecord& job = it->second;  // jobs_ never loses an entry: valid while unlocked too
  const std::string id = job_id_text(job_id);
  if (!job.finished())
    return reply_error("job " + id + " is " + job_state_name(job.state) +
                           "; its model is written when it ends",
                       "wait for it (dtrain-submit status " + id + "), then fetch");
  if (job.state != JobState::kSucceeded)
    return reply_error("job " + id + " " + job_state_name(job.state) + " and wrote no final model",
                       job.resume_hint().empty() ? "submit the job again" : job.resume_hint());
  std::vector<std::string> holders = model_holders(job);
  if (!pinned.empty()) {
    if (!listed(holders, pinned))
      return reply_error("node " + pinned + " holds no model of job " + id,
                         "fetch without naming a node");
    holders = {pinned};
  }
  if (holders.empty())
    return reply_error("no node of job " + id + " reported the checksum of its model (a job "
                       "from an older release?)",
                       "copy it from the first node's data_dir/models/ (status shows the path)");
  std::string model;
  try {
    model = job.spec().output.model;
  } catch (const core::UserError& e) {
    return reply_error("job " + id + "'s spec no longer parses: " + e.what_happened(), e.fix());
  }
  if (fetches_.size() >= kMaxFetches)
    return reply_error("the controller is serving " + std::to_string(kMaxFetches) +
                           " fetches already", "try again in a moment");
  std::string tried;
  for (const std::string& n : holders) {
    const Json sha = job.results.at(n).at("model_sha256");
    std::optional<PendingFetch> answer;
    // Twice at most: a node that registered again meanwhile lost the request with its session.
    for (int attempt = 0; attempt < 2 && !answer; ++attempt) {
      if (!members_.count(n) || !members_[n].alive) break;
      answer = ask_for_chunk(lock, n, {next_fetch_++, model, offset, length}, job_id);
      if (!answer && stopping_) break;
    }
    if (!answer) {
      tried += "; " + n + (members_.count(n) && members_[n].alive ? " did not answer"
                                                                  : " is not registered");
      continue;
    }
    if (!answer->chunk.error.empty()) {
      tried += "; " + n + ": " + answer->chunk.error;
      continue;
    }
    return reply_ok({{"node", n},
                     {"file", std::filesystem::path(model).filename().string()},
                     {"offset", offset},
                     {"total", answer->chunk.total},
                     {"sha256", sha}},
                    answer->chunk.data);
  }
  return reply_error("cannot fetch job " + id + "'s model" + tried,
                     "start dtraind again on one of those nodes, or copy the file from its "
                     "data_dir/models/");
}

// Sends `fetch` to node `n` and waits (unlocked) until it answers, its session ends (a
// registration clears what it had not sent yet), the deadline passes or the controller stops.
std::optional<Controller::PendingFetch> Controller::ask_for_chunk(
    std::unique_lock<std::mutex>& lock, const std::string& n, const FetchMessage& fetch,
    uint64_t job_id) {
  Member& m = members_[n];
  const uint64_t session = m.session;
  fetches_[fetch.request] = {n, session, job_id, fetch.offset};
  m.outbox.push_back(fetch_frame(job_id, fetch));
  fetched_.wait_for(lock, kChunkDeadline, [&] {
    return fetches_[fetch.request].answered || stopping_ || !members_[n].alive ||
           members_[n].session != session;
  });
  PendingFetch p = std::move(fetches_[fetch.request]);
  fetches_.erase(fetch.request);
  if (!p.answered) return std::nullopt;
  return p;
}

// A node's answer to a FetchModel: taken only for a request still waiting, from the node asked.
void Controller::on_model_chunk(Member& m, const JobMessageIn& in) {
  auto it = fetches_.find(in.chunk.request);
  if (it == fetches_.end() || it->second.node != m.name || it->second.answered ||
      it->second.job_id != in.job_id || it->second.offset != in.chunk.offset)
    return;
  it->second.chunk = in.chunk;
  it->second.answered = true;
  fetched_.notify_all();
}

}  // namespace dtrain::daemon
