// loom generate --load PATH [--tokenizer PATH] --prompt TEXT ... [--threads N]
// The logic is loom/eval/generate_command.h's; here the process picks its threads and runs it.
#include <cstdio>
#include <iostream>

#include "args.h"
#include "command.h"
#include "process_threads.h"
#include "loom/core/error.h"
#include "loom/eval/generate_command.h"

namespace {

int run_generate_command(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  int threads = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::printf("%s", loom::eval::generate_usage());
      return 0;
    }
    if (args[i] == "--threads") {
      if (i + 1 >= args.size() || !loom::app::parse_positive(args[i + 1], &threads)) {
        std::fprintf(stderr, "error: --threads needs a positive integer\n%s", loom::eval::generate_usage());
        return 2;
      }
      ++i;
      continue;
    }
    rest.push_back(args[i]);
  }
  loom::eval::GenerateOptions options;
  try {
    options = loom::eval::parse_generate_args(rest);
  } catch (const loom::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  loom::app::use_process_threads(threads, 1);
  loom::eval::run_generate(options, std::cout, std::cerr);
  return 0;
}

}  // namespace

LOOM_COMMAND("generate", "text from a checkpoint or Hugging Face folder, with a KV cache", run_generate_command);
