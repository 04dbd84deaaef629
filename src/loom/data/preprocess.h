// JSON lines -> Megatron indexed dataset, as Megatron's tools/preprocess_data.py:
// one document per line, one output pair `{output_prefix}_{key}_document.bin/.idx` per JSON key,
// token dtype uint16 below 65500 vocabulary entries else int32, and with --append-eod the
// tokenizer's eod id appended to every non-empty document.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::data {

struct PreprocessOptions {
  std::string input;                          // JSON lines
  std::vector<std::string> json_keys = {"text"};
  std::string output_prefix;
  std::string tokenizer;                      // tokenizer.json, SentencePiece .model, or a model folder
  bool append_eod = false;
  int64_t workers = 0;                        // encoding threads; 0: one per core
  bool progress = true;                       // progress lines on stderr every few seconds
};

struct PreprocessResult {
  int64_t documents = 0;                      // JSON lines read
  std::vector<std::string> output_prefixes;   // one per key, in --json-keys order
  std::vector<int64_t> tokens;                // tokens written per key
};

// `{output_prefix}_{key}_document`
std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key);

// Outputs appear only when the whole input succeeded (written under temporary names, renamed at
// the end). Bad lines raise DataError naming file:line.
PreprocessResult preprocess_jsonl(const PreprocessOptions& options);

}  // namespace loom::data
