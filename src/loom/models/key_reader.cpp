#include "loom/models/key_reader.h"

#include <cmath>

namespace loom::models {

namespace {

bool same_value(const KeyReader::Json& a, const KeyReader::Json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

const KeyReader::Json& empty_section() {
  static const KeyReader::Json empty = KeyReader::Json::object();
  return empty;
}

}  // namespace

KeyReader::KeyReader(const Json& section, std::string prefix, std::vector<ModelIssue>& issues)
    : section_(section.is_object() ? section : empty_section()), prefix_(std::move(prefix)), issues_(issues) {
  check(section.is_object(), "", prefix_, " must be a mapping of model fields, got ", section.dump());
}

const KeyReader::Json* KeyReader::find(std::initializer_list<const char*> names, std::string* key) {
  const Json* found = nullptr;
  std::string found_key;
  for (const char* name : names) {
    known_.insert(name);
    auto it = section_.find(name);
    if (it == section_.end() || it->is_null()) continue;
    if (!found) {
      found = &*it;
      found_key = name;
    } else {
      check(same_value(*found, *it), name, path(found_key), " = ", found->dump(), " and ", path(name), " = ",
            it->dump(), " name the same setting with different values; keep one of them");
    }
  }
  if (key) *key = found_key;
  return found;
}

std::optional<int64_t> KeyReader::get_int(std::initializer_list<const char*> names, std::string* found) {
  std::string key;
  const Json* v = find(names, &key);
  if (found) *found = key;
  if (!v) return std::nullopt;
  // HF writers sometimes store integral sizes as 4096.0; a fractional size is an error.
  if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()) return static_cast<int64_t>(v->get<double>());
  if (!check(v->is_number_integer(), key, path(key), " must be an integer, got ", v->dump())) return std::nullopt;
  return v->get<int64_t>();
}

std::optional<double> KeyReader::get_double(std::initializer_list<const char*> names, std::string* found) {
  std::string key;
  const Json* v = find(names, &key);
  if (found) *found = key;
  if (!v) return std::nullopt;
  if (!check(v->is_number(), key, path(key), " must be a number, got ", v->dump())) return std::nullopt;
  return v->get<double>();
}

std::optional<bool> KeyReader::get_bool(std::initializer_list<const char*> names, std::string* found) {
  std::string key;
  const Json* v = find(names, &key);
  if (found) *found = key;
  if (!v) return std::nullopt;
  if (!check(v->is_boolean(), key, path(key), " must be true or false, got ", v->dump())) return std::nullopt;
  return v->get<bool>();
}

std::optional<std::string> KeyReader::get_string(std::initializer_list<const char*> names, std::string* found) {
  std::string key;
  const Json* v = find(names, &key);
  if (found) *found = key;
  if (!v) return std::nullopt;
  if (!check(v->is_string(), key, path(key), " must be a string, got ", v->dump())) return std::nullopt;
  return v->get<std::string>();
}

std::optional<DType> KeyReader::get_dtype(std::initializer_list<const char*> names, std::string* found) {
  std::string key;
  const Json* v = find(names, &key);
  if (found) *found = key;
  if (!v) return std::nullopt;
  if (!check(v->is_string(), key, path(key), " must be a dtype name such as \"float32\" or \"bfloat16\", got ",
             v->dump()))
    return std::nullopt;
  const std::string name = v->get<std::string>();
  DType d;
  try {
    d = dtype_from_name(name);
  } catch (const Error&) {
    check(false, key, path(key), " = \"", name, "\" is not a dtype; use float32, bfloat16, float16 or float64");
    return std::nullopt;
  }
  if (!check(is_floating(d), key, path(key), " = \"", name,
             "\" is not a floating dtype; use float32, bfloat16, float16 or float64"))
    return std::nullopt;
  return d;
}

std::optional<std::vector<std::string>> KeyReader::get_strings(std::initializer_list<const char*> names, std::string* found) {
  std::string key;
  const Json* v = find(names, &key);
  if (found) *found = key;
  if (!v) return std::nullopt;
  if (v->is_string()) return std::vector<std::string>{v->get<std::string>()};
  bool ok = v->is_array();
  if (ok)
    for (const auto& e : *v) ok &= e.is_string();
  if (!check(ok, key, path(key), " must be a string or a list of strings, got ", v->dump())) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& e : *v) out.push_back(e.get<std::string>());
  return out;
}

std::optional<std::vector<double>> KeyReader::get_doubles(std::initializer_list<const char*> names, std::string* found) {
  std::string key;
  const Json* v = find(names, &key);
  if (found) *found = key;
  if (!v) return std::nullopt;
  if (v->is_number()) return std::vector<double>{v->get<double>()};
  bool ok = v->is_array();
  if (ok)
    for (const auto& e : *v) ok &= e.is_number();
  if (!check(ok, key, path(key), " must be a number or a list of numbers, got ", v->dump())) return std::nullopt;
  std::vector<double> out;
  for (const auto& e : *v) out.push_back(e.get<double>());
  return out;
}

std::optional<std::vector<int64_t>> KeyReader::get_ints(std::initializer_list<const char*> names, std::string* found) {
  std::string key;
  const Json* v = find(names, &key);
  if (found) *found = key;
  if (!v) return std::nullopt;
  bool ok = v->is_array();
  if (ok)
    for (const auto& e : *v) ok &= e.is_number_integer();
  if (!check(ok, key, path(key), " must be a list of integers, got ", v->dump())) return std::nullopt;
  std::vector<int64_t> out;
  for (const auto& e : *v) out.push_back(e.get<int64_t>());
  return out;
}

void KeyReader::accept(std::initializer_list<const char*> names) {
  for (const char* n : names) known_.insert(n);
}

std::vector<std::string> KeyReader::unknown_keys() const {
  std::vector<std::string> out;
  for (auto it = section_.begin(); it != section_.end(); ++it)
    if (!known_.count(it.key())) out.push_back(it.key());
  return out;
}

}  // namespace loom::models
