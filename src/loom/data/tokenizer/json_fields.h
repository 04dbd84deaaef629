// Reading tokenizer.json components with errors that name the file and the field.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "loom/core/error.h"

namespace loom::data {

// Where a component sits: "tokenizer.json: pre_tokenizer.pretokenizers[1]".
struct JsonPlace {
  std::string file;
  std::string field;
  JsonPlace child(const std::string& name) const { return {file, field.empty() ? name : field + "." + name}; }
  JsonPlace item(size_t i) const { return {file, field + "[" + std::to_string(i) + "]"}; }
  std::string str() const { return file + ": " + field; }
};

inline const nlohmann::json& json_field(const nlohmann::json& object, const std::string& key, const JsonPlace& at) {
  LOOM_CHECK(object.is_object(), DataError, at.str(), " must be a JSON object");
  const auto it = object.find(key);
  LOOM_CHECK(it != object.end(), DataError, at.str(), " has no \"", key,
             "\"; the file is not a complete tokenizer.json (save it again with the tokenizers library)");
  return *it;
}

inline std::string json_string(const nlohmann::json& object, const std::string& key, const JsonPlace& at) {
  const auto& v = json_field(object, key, at);
  LOOM_CHECK(v.is_string(), DataError, at.child(key).str(), " must be a string, got ", v.dump());
  return v.get<std::string>();
}

// A flag that may be absent (then `fallback`) or null.
inline bool json_bool(const nlohmann::json& object, const std::string& key, bool fallback, const JsonPlace& at) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  LOOM_CHECK(it->is_boolean(), DataError, at.child(key).str(), " must be true or false, got ", it->dump());
  return it->get<bool>();
}

// The "type" of a component, for the error that names an unsupported one.
inline std::string json_type(const nlohmann::json& component, const JsonPlace& at) {
  return json_string(component, "type", at);
}

[[noreturn]] inline void unsupported_component(const JsonPlace& at, const std::string& type,
                                               const std::string& supported) {
  LOOM_THROW(DataError, at.str(), " is a \"", type, "\", which Loom does not implement (it implements ", supported,
             "); encoding without it would give different ids than Hugging Face tokenizers, so Loom stops");
}

}  // namespace loom::data
