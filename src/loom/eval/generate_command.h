// `loom generate`: text from a trained model, with a KV cache (runtime/generation.h), on one
// process.
//
//   loom generate --load PATH [--tokenizer PATH] (--prompt TEXT ... | --prompts F.jsonl)
//                 [--chat] [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]
//                 [--seed S] [--stop STR ...] [--speculative mtp] [--json] [--config C.yaml]
//                 [--set model.k=v]
//
// PATH is a Loom checkpoint (a save directory or an iteration_* folder, saved under any layout)
// or a Hugging Face folder. The model is the checkpoint's (its model_config.json), the folder's
// (config.json; stored in bf16, it runs in bf16), or --config's model section. The tokenizer is --tokenizer, else the HF folder's
// own; token-id prompts need none. --prompts lines are {"prompt": "..."}, {"messages": [...]} (the
// chat template with the generation prompt) or {"prompt_ids": [...]}; --chat sends --prompt text
// through the chat template as a user message. A row stops at the tokenizer's end token (and the
// folder's generation_config.json eos ids), a --stop string, --max-new-tokens or the model's
// positions. --speculative mtp drafts with a DeepSeek-V3 model's MTP layers and checks the drafts
// in one forward (greedy only; the tokens are plain greedy's), and the summary gives the drafts
// kept and the tokens per forward.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "loom/runtime/generation.h"
#include "loom/runtime/sampling.h"

namespace loom::eval {

struct GenerateOptions {
  std::string load_path;
  std::string tokenizer_path;
  std::string config_path;
  std::vector<std::string> model_overrides;  // --set model.key=value
  std::vector<std::string> prompts;          // --prompt
  std::string prompts_path;                  // --prompts
  bool chat = false;
  int64_t max_new_tokens = 64;
  runtime::SamplingOptions sampling;
  std::vector<std::string> stops;
  runtime::Speculative speculative = runtime::Speculative::none;
  bool json = false;
};

const char* generate_usage();
// ConfigError naming the flag for a bad argument (e.g. --top-p outside (0, 1]).
GenerateOptions parse_generate_args(const std::vector<std::string>& args);
// Generates and writes to `out` (text, streamed for a single prompt, or one JSON line per prompt)
// and a summary (tokens, tokens/s, cache bytes) to `log`.
void run_generate(const GenerateOptions& options, std::ostream& out, std::ostream& log);

}  // namespace loom::eval
