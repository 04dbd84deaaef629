// Subcommands of the `loom` program. Each cmd_*.cpp registers itself with LOOM_COMMAND; main()
// looks the first argument up here. A command returns the process exit code.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace loom::app {

struct Command {
  std::string name;     // "check-config"
  std::string summary;  // one line for `loom --help`
  std::function<int(const std::vector<std::string>& args)> run;
};

bool register_command(Command command);
const std::vector<Command>& commands();

}  // namespace loom::app

#define LOOM_COMMAND_CONCAT2(a, b) a##b
#define LOOM_COMMAND_CONCAT(a, b) LOOM_COMMAND_CONCAT2(a, b)
#define LOOM_COMMAND(NAME, SUMMARY, FN) \
  static const bool LOOM_COMMAND_CONCAT(loom_command_registered_, __LINE__) = \
      ::loom::app::register_command({NAME, SUMMARY, FN})
