// A controller candidate that only takes part in the election (daemon/election), for
// etcd_election_test: it steps LeaderElection against a real etcd and prints, with the wall
// clock in milliseconds, every change of role and every renewal's end of acting:
//   1733500000123 leader c1 acts-until 1733500002123
//   1733500000789 renewed c1 acts-until 1733500002789
//   1733500004000 standby c2 leader-is c1 (error: ...)
// Until SIGTERM, when a leader resigns. Arguments: ENDPOINT NAME LEASE_S.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "daemon/election/leader_election.h"

namespace {

using dtrain::daemon::LeaderElection;
volatile sig_atomic_t stop = 0;

long long wall_ms(LeaderElection::Clock::time_point t) {
  const auto steady_now = LeaderElection::Clock::now();
  const auto wall_now = std::chrono::system_clock::now();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             (wall_now + (t - steady_now)).time_since_epoch())
      .count();
}

void report(const char* what, const LeaderElection& e, const std::string& name,
            LeaderElection::Clock::time_point now) {
  std::printf("%lld %s %s", wall_ms(now), what, name.c_str());
  if (e.role() == LeaderElection::Role::kLeader)
    std::printf(" acts-until %lld", wall_ms(e.acts_until()));
  else
    std::printf(" leader-is %s", e.leader().empty() ? "-" : e.leader().c_str());
  if (!e.last_error().empty()) std::printf(" (error: %s)", e.last_error().c_str());
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: election_probe http://HOST:PORT NAME LEASE_S\n");
    return 2;
  }
  signal(SIGTERM, [](int) { stop = 1; });
  const std::string name = argv[2];
  dtrain::daemon::EtcdHttpClient etcd({dtrain::daemon::parse_etcd_endpoint(argv[1])},
                                      std::chrono::milliseconds(500));
  LeaderElection election(etcd, {"/dtrain/controller/leader", name, std::stoi(argv[3])});
  auto role = LeaderElection::Role::kStandby;
  bool first = true;
  while (!stop) {
    const auto now = LeaderElection::Clock::now();
    if (now >= election.next_step()) {
      const auto was_until = election.acts_until();
      election.step(now);
      // Stamped when the step returned: a leader acts from then on, not from when it asked.
      const auto known = LeaderElection::Clock::now();
      const bool leads = election.role() == LeaderElection::Role::kLeader;
      if (first || election.role() != role)
        report(dtrain::daemon::role_name(election.role()), election, name, known);
      else if (leads && election.acts_until() != was_until)
        report("renewed", election, name, known);
      role = election.role();
      first = false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  election.resign();
  report("resigned", election, name, LeaderElection::Clock::now());
  return 0;
}
