// Typed reads from a pass-through config section (`optimizer:`, `lr_scheduler:`), which reaches
// this layer as nlohmann::ordered_json. Errors name `<section>.<key>`, the value found and what
// is accepted; the reader remembers which keys were read so leftovers can be reported.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::optim {

class OptionReader {
 public:
  // `section` may be null (treated as empty) or an object; anything else is a ConfigError.
  OptionReader(const nlohmann::ordered_json& section, std::string section_name);

  // Present with a non-null value.
  bool has(const std::string& key) const;
  std::string path(const std::string& key) const { return section_name_ + "." + key; }

  // Numbers accept YAML ints and floats alike (`weight_decay: 0` is a valid float).
  double number(const std::string& key, double fallback);
  std::optional<double> optional_number(const std::string& key);
  // Integers reject floats (`warmup_steps: 10.5`), naming the key.
  int64_t integer(const std::string& key, int64_t fallback);
  std::optional<int64_t> optional_integer(const std::string& key);
  bool boolean(const std::string& key, bool fallback);
  std::string string(const std::string& key, const std::string& fallback);
  // A list of strings; a single string is accepted as a one-element list.
  std::optional<std::vector<std::string>> optional_string_list(const std::string& key);
  // A list of numbers of exactly `length` entries (length < 0: any length).
  std::optional<std::vector<double>> optional_number_list(const std::string& key, int length);
  // The raw value (marks the key as read); nullptr when absent or null.
  const nlohmann::ordered_json* raw(const std::string& key);
  void mark_read(const std::string& key) { read_.insert(key); }

  // Keys present in the section (non-null) that nothing read, in file order.
  std::vector<std::string> unread_keys() const;
  // Logs one warning listing the unread keys (if any), e.g. "optimizer: ignoring unknown keys
  // [foo, bar] for AdamW (accepted: ...)". Returns the keys.
  std::vector<std::string> warn_unread(const std::string& what, const std::string& accepted);

 private:
  const nlohmann::ordered_json* find(const std::string& key) const;

  nlohmann::ordered_json section_;
  std::string section_name_;
  std::set<std::string> read_;
};

// "a, b, c"
std::string join_names(const std::vector<std::string>& names);

}  // namespace loom::optim
