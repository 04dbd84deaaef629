// `loom eval`: a trained model's loss on a split of the configuration's data, or its accuracy on
// multiple-choice questions, in whatever layout the configuration names (run under `loom launch`
// like `loom train`).
//
//   loom eval --config C.yaml --load PATH [--split valid|test|train] [--iters K] [--json]
//   loom eval --config C.yaml --load PATH --choices FILE.jsonl [--tokenizer PATH] [--json]
//
// PATH is a Loom checkpoint (a save directory, meaning its latest iteration, or one iteration_*
// folder, saved under any layout) or a Hugging Face folder (config.json + safetensors) of the
// configuration's model. The loss is runtime/evaluation.h's token-weighted mean over the first K
// global batches of the split (K: --iters, else training.eval_iters; -1 the whole split); the
// multiple-choice scores are multiple_choice.h's.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/dist/process_group.h"

namespace loom::eval {

struct EvalCommandOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set key=value, and --device
  std::string load_path;
  std::string split = "valid";
  std::optional<int64_t> iters;
  std::string choices_path;            // multiple choice instead of the split's loss
  std::string tokenizer_path;          // for text choices
  bool json = false;
};

const char* eval_usage();

// Parses the arguments after `loom eval`; ConfigError naming the flag and the usage.
EvalCommandOptions parse_eval_args(const std::vector<std::string>& args);

// Runs the evaluation on `world` (every rank calls it); rank 0 writes the result to `out`.
void run_eval(const EvalCommandOptions& options, const std::shared_ptr<dist::ProcessGroup>& world, std::ostream& out);

}  // namespace loom::eval
