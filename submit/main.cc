// dtrain-submit: the command line users and ops scripts call (submit/command_line.h lists its
// commands).
#include "submit/command_line.h"
#include "submit/exit_codes.h"

int main(int argc, char** argv) {
  using namespace dtrain::submit;
  CommandLine cli;
  try {
    cli.app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = cli.app.exit(e);
    return code == 0 ? kExitSuccess : kExitBadInput;
  }
  for (const CommandLine::Command& c : cli.commands)
    if (*c.app) return c.run();
  return run_training(cli);
}
