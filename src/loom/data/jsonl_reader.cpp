#include "loom/data/jsonl_reader.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "loom/core/error.h"

namespace loom::data {

JsonlReader::JsonlReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
  LOOM_CHECK(in_.good(), IOError, "cannot open ", path, ": ", std::strerror(errno));
  std::error_code ec;
  file_size_ = static_cast<int64_t>(std::filesystem::file_size(path, ec));
}

bool JsonlReader::next(std::string& line, int64_t& line_number) {
  while (std::getline(in_, line)) {
    ++line_number_;
    bytes_read_ += static_cast<int64_t>(line.size()) + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    line_number = line_number_;
    return true;
  }
  LOOM_CHECK(!in_.bad(), IOError, "error reading ", path_, " after line ", line_number_);
  return false;
}

nlohmann::json parse_json_line(const std::string& line, const std::string& path, int64_t line_number) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    const auto pos = what.find("parse error");
    LOOM_THROW(DataError, path, ":", line_number, ": invalid JSON (",
               pos == std::string::npos ? what : what.substr(pos),
               "); every line must be one JSON object like {\"text\": \"...\"}");
  }
  LOOM_CHECK(j.is_object(), DataError, path, ":", line_number, ": expected a JSON object like "
             "{\"text\": \"...\"}, found ", j.type_name());
  return j;
}

std::vector<std::string> json_texts(const nlohmann::json& record, const std::string& key,
                                    const std::string& path, int64_t line_number) {
  auto it = record.find(key);
  LOOM_CHECK(it != record.end(), DataError, path, ":", line_number, ": no key \"", key,
             "\" (choose the text field with --json-keys)");
  if (it->is_string()) return {it->get<std::string>()};
  if (it->is_array()) {
    std::vector<std::string> out;
    for (const auto& e : *it) {
      LOOM_CHECK(e.is_string(), DataError, path, ":", line_number, ": \"", key,
                 "\" is a list holding a ", e.type_name(), "; expected strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  LOOM_THROW(DataError, path, ":", line_number, ": \"", key, "\" is a ", it->type_name(),
             "; expected a string or a list of strings");
}

}  // namespace loom::data
