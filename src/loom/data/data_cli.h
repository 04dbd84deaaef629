// The `loom preprocess` (data_cli.cpp) and `loom tokenizer` (tokenizer_cli.cpp) commands; apps/loom/cmd_*.cpp
// are thin wrappers.
// Each returns the process exit code; bad arguments throw ConfigError with the usage hint.
#pragma once

#include <string>
#include <vector>

namespace loom::data {

int run_preprocess_command(const std::vector<std::string>& args);
int run_tokenizer_command(const std::vector<std::string>& args);

}  // namespace loom::data
