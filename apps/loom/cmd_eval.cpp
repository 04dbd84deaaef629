// loom eval --config FILE --load PATH [--split S] [--iters K] [--choices FILE] [--json] [--threads N]
// The logic is loom/eval/eval_command.h's; here the process starts (MPI under a launcher), picks
// its threads and runs it, every rank ending together when one fails.
#include <cstdio>
#include <iostream>

#include "args.h"
#include "command.h"
#include "process_threads.h"
#include "loom/core/error.h"
#include "loom/dist/runtime.h"
#include "loom/eval/eval_command.h"

namespace {

int run_eval_command(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  int threads = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::printf("%s", loom::eval::eval_usage());
      return 0;
    }
    if (args[i] == "--threads") {
      if (i + 1 >= args.size() || !loom::app::parse_positive(args[i + 1], &threads)) {
        std::fprintf(stderr, "error: --threads needs a positive integer\n%s", loom::eval::eval_usage());
        return 2;
      }
      ++i;
      continue;
    }
    rest.push_back(args[i]);
  }
  loom::eval::EvalCommandOptions options;
  try {
    options = loom::eval::parse_eval_args(rest);
  } catch (const loom::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  loom::dist::Runtime& rt = loom::dist::Runtime::init();
  loom::app::use_process_threads(threads, rt.world_size());
  auto body = [&] {
    loom::eval::run_eval(options, rt.world(), std::cout);
    return 0;
  };
  return rt.world_size() == 1 ? body() : loom::dist::run_guarded(body);
}

}  // namespace

LOOM_COMMAND("eval", "a model's loss on a data split, or its multiple-choice accuracy", run_eval_command);
