#include "daemon/controller/nccl_ids.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "kernels/node_collective.h"

extern char** environ;

namespace dtrain::daemon {
namespace {

constexpr size_t kMaxAnswerBytes = 64 * 1024;  // NCCL_DEBUG may print before the answer

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) out += {digits[b >> 4], digits[b & 15]};
  return out;
}

bool from_hex(const std::string& text, std::vector<uint8_t>& out) {
  auto value = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  if (text.empty() || text.size() % 2 != 0) return false;
  out.clear();
  for (size_t i = 0; i < text.size(); i += 2) {
    const int hi = value(text[i]), lo = value(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(uint8_t(hi * 16 + lo));
  }
  return true;
}

// The helper's answer line ("id HEX" or "error WHY"), read until `deadline`; other lines are
// skipped. Empty: none came (the helper ended or stayed silent; `why` says which).
std::string read_answer(int fd, std::chrono::milliseconds wait, std::string* why) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::string text;
  for (;;) {
    for (size_t end = text.find('\n'); end != std::string::npos; end = text.find('\n')) {
      std::string line = text.substr(0, end);
      text.erase(0, end + 1);
      if (line.rfind("id ", 0) == 0 || line.rfind("error ", 0) == 0) return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, int(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      *why = "its helper process gave no id within " + std::to_string(wait.count()) + " ms";
      return "";
    }
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || text.size() + size_t(n) > kMaxAnswerBytes) {
      *why = n <= 0 ? "its helper process ended without an id" : "its helper process said too much";
      return "";
    }
    text.append(buf, size_t(n));
  }
}

// `program nccl-id` with `in` as its stdin and `out` as its stdout; 0 or posix_spawn's error.
int spawn_helper(const std::string& program, int in, int out, pid_t* pid) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in, 0);
  posix_spawn_file_actions_adddup2(&actions, out, 1);
  // Nothing of dtraind's but stdin, stdout and stderr: its sockets are not all close-on-exec,
  // and a helper holding them would keep the controller's listeners and connections open.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  // dtraind blocks SIGTERM, SIGINT and SIGHUP on every thread (its main thread takes them with
  // sigwait), and a child inherits that: the helper gets them back, so that they end it.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  char* argv[] = {const_cast<char*>(program.c_str()), const_cast<char*>("nccl-id"), nullptr};
  const int spawned = ::posix_spawn(pid, program.c_str(), &actions, &attributes, argv, environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  return spawned;
}

}  // namespace

NcclIdProcesses::NcclIdProcesses(std::string program, std::chrono::milliseconds wait)
    : program_(std::move(program)), wait_(wait) {}

NcclIdProcesses::~NcclIdProcesses() {
  for (auto& [job, helper] : helpers_) end(helper);
}

void NcclIdProcesses::end(Helper& h) {
  if (h.keep_fd >= 0) ::close(h.keep_fd);
  if (h.pid > 0) {
    ::kill(h.pid, SIGKILL);  // it would end at its stdin's end too; this is at once
    while (::waitpid(h.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  h = Helper{};
}

void NcclIdProcesses::release(uint64_t job) {
  auto it = helpers_.find(job);
  if (it == helpers_.end()) return;
  end(it->second);
  helpers_.erase(it);
}

std::optional<pid_t> NcclIdProcesses::helper_of(uint64_t job) const {
  auto it = helpers_.find(job);
  if (it == helpers_.end()) return std::nullopt;
  return it->second.pid;
}

std::vector<uint8_t> NcclIdProcesses::make(uint64_t job, std::string* why) {
  release(job);
  std::string problem;
  if (!why) why = &problem;
  if (program_.empty()) return kernels::make_node_collective_id(why);
  int answer[2], keep[2];
  if (::pipe2(answer, O_CLOEXEC) != 0) {
    *why = std::string("no pipe for its helper process: ") + std::strerror(errno);
    return {};
  }
  if (::pipe2(keep, O_CLOEXEC) != 0) {
    *why = std::string("no pipe for its helper process: ") + std::strerror(errno);
    ::close(answer[0]);
    ::close(answer[1]);
    return {};
  }
  Helper h;
  const int spawned = spawn_helper(program_, keep[0], answer[1], &h.pid);
  ::close(keep[0]);
  ::close(answer[1]);
  h.keep_fd = keep[1];
  if (spawned != 0) {
    *why = "cannot start " + program_ + " nccl-id: " + std::strerror(spawned);
    h.pid = -1;
    end(h);
    ::close(answer[0]);
    return {};
  }
  const std::string line = read_answer(answer[0], wait_, why);
  ::close(answer[0]);
  std::vector<uint8_t> id;
  if (line.rfind("id ", 0) == 0 && !from_hex(line.substr(3), id)) {
    *why = "its helper process answered an id that is not hexadecimal";
    id.clear();
  } else if (line.rfind("error ", 0) == 0) {
    *why = line.substr(6);
  }
  if (id.empty()) {
    end(h);
    return {};
  }
  helpers_[job] = h;
  return id;
}

int run_nccl_id_helper() {
  std::string why;
  const std::vector<uint8_t> id = kernels::make_node_collective_id(&why);
  if (id.empty())
    std::printf("error %s\n", why.c_str());
  else
    std::printf("id %s\n", to_hex(id).c_str());
  std::fflush(stdout);
  if (id.empty()) return 1;
  // The controller stops reading once it has the answer: what NCCL prints from here on
  // (NCCL_DEBUG) goes to stderr, not to a pipe whose reader is gone (SIGPIPE would end us).
  ::signal(SIGPIPE, SIG_IGN);
  ::dup2(2, 1);
  // NCCL's bootstrap runs on its own thread; it ends with this process. _exit: NCCL's and
  // CUDA's exit handlers are not waited for (they held the exit for a second or more here).
  char buf[256];
  for (;;) {
    const ssize_t n = ::read(0, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EINTR)) ::_exit(0);
  }
}

}  // namespace dtrain::daemon
