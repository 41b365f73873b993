#include "daemon/controller/model_fetches.h"

#include "daemon/controller/job_access.h"

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

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

// Why the job has no model to fetch (not finished, not a success), or "" when it has one.
std::vector<uint8_t> refusal(const JobRecord& job) {
  const std::string id = job_id_text(job.id);
  if (!job.finished())
    return reply_error("job " + id + " is " + job_state_name(job.state) +
                           "; its model is written when it ends",
                       "wait for it (dtrain-submit status " + id + "), then fetch");
  if (job.state != JobState::kSucceeded)
    return reply_error("job " + id + " " + job_state_name(job.state) + " and wrote no final model",
                       job.resume_hint().empty() ? "submit the job again" : job.resume_hint());
  return {};
}

}  // namespace

ModelFetches::ModelFetches(std::mutex& mutex, JobStore& store, Membership& members,
                           const bool& stopping)
    : mutex_(mutex), store_(store), members_(members), stopping_(stopping) {
  randombytes_buf(&next_fetch_, sizeof next_fetch_);
}

std::vector<uint8_t> ModelFetches::serve(const ClientRequest& request) {
  std::unique_lock<std::mutex> lock(mutex_);
  return serve_locked(lock, request);
}

std::vector<uint8_t> ModelFetches::serve_locked(std::unique_lock<std::mutex>& lock,
                                                const ClientRequest& request) {
  const JobRecord* found = store_.find(request.job_id);
  if (!found)
    return reply_error("no job " + job_id_text(request.job_id) + " on this controller",
                       "list the jobs with `dtrain-submit status`");
  const JobRecord& job = *found;  // the store never loses a record: valid while unlocked too
  if (auto no = access_refusal(job, request.who, "fetch the model of"))
    return reply_error(no->what_happened(), no->fix());
  if (std::vector<uint8_t> no = refusal(job); !no.empty()) return no;
  const std::string id = job_id_text(job.id);
  std::vector<std::string> holders = model_holders(job);
  if (const std::string& pinned = request.node; !pinned.empty()) {
    if (!listed(holders, pinned))
      return reply_error("node " + pinned + " holds no model of job " + id,
                         "fetch without naming a node");
    holders = {pinned};
  }
  if (holders.empty())
    return reply_error("no node of job " + id + " reported the checksum of its model (a job "
                       "from an older release?)",
                       "copy it from the first node's data_dir/jobs/" + id +
                           "/ (status shows the path)");
  std::string model;
  try {
    model = job.spec().output.model;
  } catch (const core::UserError& e) {
    return reply_error("job " + id + "'s spec no longer parses: " + e.what_happened(), e.fix());
  }
  if (pending_.size() >= kMaxFetches)
    return reply_error("the controller is serving " + std::to_string(kMaxFetches) +
                           " fetches already", "try again in a moment");
  return fetch_from(lock, job, holders, model, request.offset,
                    std::min<uint32_t>(request.length, kMaxModelChunk));
}

// Asks the holders in turn for the chunk; the first answer without an error is the reply.
std::vector<uint8_t> ModelFetches::fetch_from(std::unique_lock<std::mutex>& lock,
                                              const JobRecord& job,
                                              const std::vector<std::string>& holders,
                                              const std::string& model, uint64_t offset,
                                              uint32_t length) {
  std::string tried;
  for (const std::string& n : holders) {
    const Json sha = job.results.at(n).at("model_sha256");
    std::optional<Pending> answer;
    // Twice at most: a node that registered again meanwhile lost the request with its session.
    for (int attempt = 0; attempt < 2 && !answer; ++attempt) {
      if (!members_.alive(n)) break;
      answer = ask(lock, n, {next_fetch_++, model, offset, length}, job.id);
      if (!answer && stopping_) break;
    }
    if (!answer) {
      tried += "; " + n + (members_.alive(n) ? " did not answer" : " is not registered");
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
  return reply_error("cannot fetch job " + job_id_text(job.id) + "'s model" + tried,
                     "start dtraind again on one of those nodes, or copy the file from its "
                     "data_dir/jobs/" + job_id_text(job.id) + "/");
}

// Sends `fetch` to node `n` and waits (unlocked) until it answers, its session ends (a
// registration clears what it had not sent yet), the deadline passes or the controller stops.
std::optional<ModelFetches::Pending> ModelFetches::ask(std::unique_lock<std::mutex>& lock,
                                                       const std::string& n,
                                                       const FetchMessage& fetch,
                                                       uint64_t job_id) {
  Member& m = members_.entry(n);
  const uint64_t session = m.session;
  pending_[fetch.request] = {n, session, job_id, fetch.offset};
  m.send(fetch_frame(job_id, fetch));
  fetched_.wait_for(lock, kChunkDeadline, [&] {
    const Member& now = members_.entry(n);
    return pending_[fetch.request].answered || stopping_ || !now.alive ||
           now.session != session;
  });
  Pending p = std::move(pending_[fetch.request]);
  pending_.erase(fetch.request);
  if (!p.answered) return std::nullopt;
  return p;
}

void ModelFetches::on_chunk(const Member& m, const JobMessageIn& in) {
  auto it = pending_.find(in.chunk.request);
  if (it == pending_.end() || it->second.node != m.name || it->second.answered ||
      it->second.job_id != in.job_id || it->second.offset != in.chunk.offset)
    return;
  it->second.chunk = in.chunk;
  it->second.answered = true;
  fetched_.notify_all();
}

}  // namespace dtrain::daemon
