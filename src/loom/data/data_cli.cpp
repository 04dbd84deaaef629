#include "loom/data/data_cli.h"

#include <cstdio>

#include "loom/core/error.h"
#include "loom/data/cli_args.h"
#include "loom/data/preprocess.h"

namespace loom::data {

namespace {

using namespace cli;

constexpr const char* kPreprocessUsage =
    "usage: loom preprocess --input FILE.jsonl --output-prefix OUT --tokenizer PATH\n"
    "                       [--json-keys text [more ...]] [--append-eod] [--workers N]\n"
    "\n"
    "Tokenizes one JSON object per line into Megatron indexed datasets\n"
    "OUT_<key>_document.bin/.idx (uint16 tokens below 65500 vocabulary entries, else int32).\n"
    "  --tokenizer    a tokenizer.json, a SentencePiece .model, or a model folder holding one\n"
    "                 (--tokenizer-model is the same flag)\n"
    "  --append-eod   end every non-empty document with the tokenizer's eod (eos) id\n"
    "  --workers N    encoding threads (default: one per core)\n";

}  // namespace

int run_preprocess_command(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("%s", kPreprocessUsage);
      return 0;
    }
  }
  Parsed p = parse(args, {"--input", "--output-prefix", "--tokenizer", "--tokenizer-model", "--workers", "--log-interval"},
                   {"--json-keys"}, {"--append-eod", "--quiet"}, kPreprocessUsage);
  // --tokenizer-model is the flag's older name, from when only SentencePiece models were read.
  if (p.values.count("--tokenizer-model")) {
    LOOM_CHECK(!p.values.count("--tokenizer"), ConfigError, "give --tokenizer or --tokenizer-model, not both\n",
               kPreprocessUsage);
    p.values["--tokenizer"] = p.values["--tokenizer-model"];
  }
  PreprocessOptions o;
  o.input = required(p, "--input", kPreprocessUsage);
  o.output_prefix = required(p, "--output-prefix", kPreprocessUsage);
  o.tokenizer = required(p, "--tokenizer", kPreprocessUsage);
  if (auto it = p.values.find("--json-keys"); it != p.values.end()) o.json_keys = it->second;
  o.append_eod = p.switches.count("--append-eod") == 1;
  o.workers = integer(p, "--workers", 0, kPreprocessUsage);
  o.progress = p.switches.count("--quiet") == 0;
  const PreprocessResult r = preprocess_jsonl(o);
  for (size_t k = 0; k < r.output_prefixes.size(); ++k) {
    std::printf("wrote %s.bin/.idx: %lld documents, %lld tokens\n", r.output_prefixes[k].c_str(),
                static_cast<long long>(r.documents), static_cast<long long>(r.tokens[k]));
  }
  return 0;
}

}  // namespace loom::data
