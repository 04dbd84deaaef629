// Helpers shared by the data tests: small datasets on disk and the numpy reference scripts.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "loom/data/indexed_dataset.h"
#include "loom/data/indexed_dataset_builder.h"
#include "testing/temp_dir.h"

namespace loom::data::testing_util {

// document -> sequences -> tokens
using Documents = std::vector<std::vector<std::vector<int64_t>>>;

inline void write_dataset(const std::string& prefix, TokenDType dtype, const Documents& documents) {
  IndexedDatasetBuilder builder(data_file_path(prefix), dtype);
  for (const auto& doc : documents) {
    std::vector<int64_t> tokens;
    std::vector<int32_t> lengths;
    for (const auto& seq : doc) {
      tokens.insert(tokens.end(), seq.begin(), seq.end());
      lengths.push_back(static_cast<int32_t>(seq.size()));
    }
    builder.add_document(tokens, lengths);
  }
  builder.finalize(index_file_path(prefix));
}

// One sequence per document, of the given lengths; token t of document d is 1000*d + t + 1
// (never 0, so padding stands out), or an EOD-terminated document when eod >= 0.
inline Documents numbered_documents(const std::vector<int64_t>& lengths, int64_t eod = -1) {
  Documents docs;
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int64_t> seq;
    for (int64_t t = 0; t < lengths[d]; ++t) {
      seq.push_back(eod >= 0 && t == lengths[d] - 1 ? eod : static_cast<int64_t>(1000 * d + t + 1));
    }
    docs.push_back({seq});
  }
  return docs;
}

// LOOM_PYTHON: the python3 that imports numpy, found at configure time (cmake/LoomPython.cmake);
// "" when there is none, and the tests that need it skip with this reason.
inline bool have_python() { return LOOM_PYTHON[0] != '\0' && ::access(LOOM_PYTHON, X_OK) == 0; }
inline constexpr const char* kNoPython = "no python3 that imports numpy (LOOM_PYTHON is \"" LOOM_PYTHON "\")";

inline std::string script_path(const std::string& name) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/data/" + name;
}

// Runs LOOM_PYTHON SCRIPT ARGS through std::system; returns the exit code, output in *out.
inline int run_python(const std::string& script, const std::string& args, const std::string& scratch_dir,
                      std::string* out) {
  const std::string log = scratch_dir + "/python-output.txt";
  const std::string command = std::string(LOOM_PYTHON) + " " + script_path(script) + " " + args + " > " + log + " 2>&1";
  const int status = std::system(command.c_str());
  *out = loom::testing::read_file(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace loom::data::testing_util
