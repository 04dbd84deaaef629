// Reads the `model:` section (nlohmann::ordered_json) by key with aliases: a field may be written
// under its HF config.json name or a MindFormers alias (semantics.md §4). Both given with
// different values is a ConfigError naming both keys; null counts as absent (HF writes
// "q_lora_rank": null). Every key read is remembered so the leftovers can be reported once.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/dtype.h"

namespace loom::models {

class KeyReader {
 public:
  using Json = nlohmann::ordered_json;
  KeyReader(const Json& section, std::string prefix);

  // The value under the first present name (canonical first). Marks every name as known.
  const Json* find(std::initializer_list<const char*> names, std::string* key = nullptr);
  bool has(std::initializer_list<const char*> names) { return find(names) != nullptr; }

  std::optional<int64_t> get_int(std::initializer_list<const char*> names);
  std::optional<double> get_double(std::initializer_list<const char*> names);
  std::optional<bool> get_bool(std::initializer_list<const char*> names);
  std::optional<std::string> get_string(std::initializer_list<const char*> names);
  std::optional<DType> get_dtype(std::initializer_list<const char*> names);
  // A string or a list of strings / a number or a list of numbers.
  std::optional<std::vector<std::string>> get_strings(std::initializer_list<const char*> names);
  std::optional<std::vector<double>> get_doubles(std::initializer_list<const char*> names);
  std::optional<std::vector<int64_t>> get_ints(std::initializer_list<const char*> names);

  // Marks keys as known without reading them (accepted and ignored).
  void accept(std::initializer_list<const char*> names);
  // Keys of the section never looked up, in file order.
  std::vector<std::string> unknown_keys() const;
  // "model.<key>" for messages.
  std::string path(const std::string& key) const { return prefix_ + "." + key; }

 private:
  const Json& section_;
  std::string prefix_;
  std::set<std::string> known_;
};

}  // namespace loom::models
