// Where the controller makes jobs' NCCL ids (daemon/controller/nccl_ids.h): each in a helper
// process that lives until the job is released, here helpers written as shell scripts.
#include "daemon/controller/nccl_ids.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <fstream>
#include <memory>

#include "tests/test_util.h"

namespace dtrain::daemon {
namespace {

using namespace std::chrono_literals;

// A helper program: `body` as a shell script (run as `program nccl-id`).
std::string helper(const std::string& body) {
  static int count = 0;
  const std::string path = testing::temp_dir() + "/helper-" + std::to_string(++count) + ".sh";
  std::ofstream(path) << "#!/bin/sh\n[ \"$1\" = nccl-id ] || exit 9\n" << body << "\n";
  ::chmod(path.c_str(), 0700);
  return path;
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// Answers after a line of NCCL's own output, then waits for its stdin to end, as dtraind does.
const char* kServes = "echo 'NCCL INFO bootstrap'\necho 'id 00ff7e'\ncat > /dev/null";

TEST_CASE("an id comes from a helper that lives until its job is released") {
  auto owned = std::make_unique<NcclIdProcesses>(helper(kServes));
  NcclIdProcesses& ids = *owned;
  std::string why;
  CHECK(ids.make(7, &why) == std::vector<uint8_t>{0x00, 0xff, 0x7e});
  const std::optional<pid_t> first = ids.helper_of(7);
  REQUIRE(first);
  CHECK(alive(*first));
  // A fresh id for the same job (a resume) ends the first helper.
  CHECK(ids.make(7, &why).size() == 3);
  const std::optional<pid_t> second = ids.helper_of(7);
  REQUIRE(second);
  CHECK(*second != *first);
  CHECK_FALSE(alive(*first));  // reaped: no process of that id is left
  CHECK(ids.make(8, &why).size() == 3);
  ids.release(7);
  CHECK_FALSE(ids.helper_of(7));
  CHECK_FALSE(alive(*second));
  ids.release(7);  // again: nothing
  const pid_t other = *ids.helper_of(8);
  CHECK(alive(other));
  owned.reset();  // the controller ends: every helper with it
  CHECK_FALSE(alive(other));
}

TEST_CASE("a helper that cannot make an id says why, and is not kept") {
  std::string why;
  NcclIdProcesses refuses(helper("echo 'error NCCL is not installed here'\nexit 1"));
  CHECK(refuses.make(1, &why).empty());
  CHECK(why == "NCCL is not installed here");
  CHECK_FALSE(refuses.helper_of(1));

  NcclIdProcesses silent_exit(helper("exit 0"));
  CHECK(silent_exit.make(1, &why).empty());
  CHECK(why == "its helper process ended without an id");

  NcclIdProcesses garbled(helper("echo 'id 0g'\ncat > /dev/null"));
  CHECK(garbled.make(1, &why).empty());
  CHECK(why == "its helper process answered an id that is not hexadecimal");
  CHECK_FALSE(garbled.helper_of(1));

  NcclIdProcesses missing(testing::temp_dir() + "/no-such-program");
  CHECK(missing.make(1, &why).empty());
  CHECK_THAT(why, Catch::Contains("cannot start") && Catch::Contains("no-such-program"));
}

TEST_CASE("a helper takes signals, though dtraind blocks them on its threads, and holds none of "
          "its files") {
  sigset_t blocked, before;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGHUP);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &blocked, &before) == 0);
  // A descriptor of the controller's that is not close-on-exec (as some sockets are not).
  // (Numbered high: a low number would be reused by the helper's own listing of its files.)
  const int opened = ::open("/dev/null", O_RDONLY);
  const int leaked = ::fcntl(opened, F_DUPFD, 200);
  ::close(opened);
  REQUIRE(leaked >= 200);
  ::setenv("LEAKED_FD", std::to_string(leaked).c_str(), 1);
  // Python, not sh: dash clears its signal mask as it starts. It answers with its own mask and
  // whether it holds the descriptor.
  const std::string program = testing::temp_dir() + "/mask-helper.py";
  std::ofstream(program) << "#!/usr/bin/python3\n"
                            "import sys\n"
                            "mask = [l.split()[1] for l in open('/proc/self/status')\n"
                            "        if l.startswith('SigBlk:')][0]\n"
                            "import os\n"
                            "held = os.environ['LEAKED_FD'] in os.listdir('/proc/self/fd')\n"
                            "print('error holds the descriptor' if held else\n"
                            "      'id 01' if int(mask, 16) == 0 else 'error blocked ' + mask)\n"
                            "sys.stdout.flush()\n"
                            "sys.stdin.read()\n";
  ::chmod(program.c_str(), 0700);
  NcclIdProcesses ids(program);
  std::string why;
  const std::vector<uint8_t> id = ids.make(1, &why);
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  ::close(leaked);
  CHECK(why == "");
  CHECK(id == std::vector<uint8_t>{1});
}

TEST_CASE("a helper that answers nothing is given up after the wait, and ended") {
  const std::string program = helper("echo $$ > \"$0.pid\"\nexec sleep 60");
  NcclIdProcesses ids(program, 300ms);
  std::string why;
  const auto start = std::chrono::steady_clock::now();
  CHECK(ids.make(3, &why).empty());
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(why == "its helper process gave no id within 300 ms");
  CHECK_FALSE(ids.helper_of(3));
  pid_t pid = 0;
  std::ifstream(program + ".pid") >> pid;
  REQUIRE(pid > 0);
  CHECK_FALSE(alive(pid));  // killed and reaped, not left sleeping
}

}  // namespace
}  // namespace dtrain::daemon
