// Reads the `model:` section (nlohmann::ordered_json) by key with aliases: a field may be written
// under its HF config.json name or a MindFormers alias (docs/models.md "Keys"). Both given with
// different values is a problem naming both keys; null counts as absent (HF writes
// "q_lora_rank": null). Problems are collected, never thrown, so one reading reports every bad
// key of the section; a key with a problem reads as absent. Every key looked up is remembered so
// the leftovers can be reported once.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/dtype.h"
#include "loom/core/error.h"

namespace loom::models {

// One problem of a model section: the dotted path of the key it is about ("model.hidden_size";
// the section itself when no key is to blame), used to point at the file position, and the whole
// message, which names that key ("model.hidden_size must be an integer, got \"64\"").
struct ModelIssue {
  std::string path;
  std::string message;
  bool operator==(const ModelIssue&) const = default;
};

class KeyReader {
 public:
  using Json = nlohmann::ordered_json;
  // Problems go to `issues`. A section that is not a mapping is one problem and reads as empty.
  KeyReader(const Json& section, std::string prefix, std::vector<ModelIssue>& issues);

  // The value under the first present name (canonical first). Marks every name as known.
  const Json* find(std::initializer_list<const char*> names, std::string* key = nullptr);
  bool has(std::initializer_list<const char*> names) { return find(names) != nullptr; }

  // The getters report a value of the wrong type and return nullopt; `key` gets the name found.
  std::optional<int64_t> get_int(std::initializer_list<const char*> names, std::string* key = nullptr);
  std::optional<double> get_double(std::initializer_list<const char*> names, std::string* key = nullptr);
  std::optional<bool> get_bool(std::initializer_list<const char*> names, std::string* key = nullptr);
  std::optional<std::string> get_string(std::initializer_list<const char*> names, std::string* key = nullptr);
  std::optional<DType> get_dtype(std::initializer_list<const char*> names, std::string* key = nullptr);
  // A string or a list of strings / a number or a list of numbers.
  std::optional<std::vector<std::string>> get_strings(std::initializer_list<const char*> names, std::string* key = nullptr);
  std::optional<std::vector<double>> get_doubles(std::initializer_list<const char*> names, std::string* key = nullptr);
  std::optional<std::vector<int64_t>> get_ints(std::initializer_list<const char*> names, std::string* key = nullptr);

  // Marks keys as known without reading them (accepted and ignored).
  void accept(std::initializer_list<const char*> names);
  // Keys of the section never looked up, in file order.
  std::vector<std::string> unknown_keys() const;
  // Every name looked up or accepted so far.
  const std::set<std::string>& known_keys() const { return known_; }
  // "model.<key>" for messages; the section's own path for "".
  std::string path(const std::string& key) const { return key.empty() ? prefix_ : prefix_ + "." + key; }

  // Records a problem of `key` ("" for the section) unless `ok`; the message is the parts
  // concatenated. Returns ok.
  template <typename... Parts>
  bool check(bool ok, const std::string& key, const Parts&... parts) {
    if (!ok) issues_.push_back({path(key), ::loom::detail::concat(parts...)});
    return ok;
  }

 private:
  const Json& section_;
  std::string prefix_;
  std::vector<ModelIssue>& issues_;
  std::set<std::string> known_;
};

}  // namespace loom::models
