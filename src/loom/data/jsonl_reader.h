// JSON-lines input for tokenizer training and preprocessing. Errors name file:line.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::data {

class JsonlReader {
 public:
  explicit JsonlReader(const std::string& path);  // IOError when unreadable
  // The next non-blank line and its 1-based number; false at the end of the file.
  bool next(std::string& line, int64_t& line_number);
  // Bytes read so far (for progress reports) and the file size.
  int64_t bytes_read() const { return bytes_read_; }
  int64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ifstream in_;
  int64_t line_number_ = 0;
  int64_t bytes_read_ = 0;
  int64_t file_size_ = 0;
};

// Parses one line; DataError "path:line: invalid JSON: ..." or "... is not a JSON object".
nlohmann::json parse_json_line(const std::string& line, const std::string& path, int64_t line_number);
// Megatron's reading of a key: a string is one sentence, a list of strings is several.
// DataError naming path:line when the key is missing or holds anything else.
std::vector<std::string> json_texts(const nlohmann::json& record, const std::string& key,
                                    const std::string& path, int64_t line_number);

}  // namespace loom::data
