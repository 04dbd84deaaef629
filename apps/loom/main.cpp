// The `loom` program: `loom <command> [args]`. Every failure ends with one line that says what
// went wrong and what to do, and a non-zero exit code.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "command.h"
#include "loom/core/error.h"

namespace loom::app {

std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

bool register_command(Command command) {
  registry().push_back(std::move(command));
  return true;
}

const std::vector<Command>& commands() { return registry(); }

}  // namespace loom::app

static void print_usage() {
  std::printf("usage: loom <command> [options]\n\ncommands:\n");
  for (const auto& c : loom::app::commands()) std::printf("  %-14s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf("\n`loom <command> --help` describes a command's options.\n");
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  if (std::string(argv[1]) == "--version") {
    std::printf("loom 0.1.0\n");
    return 0;
  }
  std::string name = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : loom::app::commands()) {
    if (c.name != name) continue;
    try {
      return c.run(args);
    } catch (const loom::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "error: unknown command '%s'. Run `loom --help` for the list.\n", name.c_str());
  return 2;
}
