// Reading an option section (`optimizer:`, `lr_scheduler:`), which reaches this layer as
// nlohmann::ordered_json in file order. The reader collects every problem with its dotted path
// instead of stopping at the first: `loom check-config` reports them all at their lines (config
// hands them to its Diagnostics) and a build throws them together. Both read the section through
// the same code, so a rule and its message exist once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::optim {

struct OptionProblem {
  enum class Severity { error, warning };
  Severity severity = Severity::error;
  std::string path;        // "optimizer.betas[1]", or the section itself: "lr_scheduler"
  std::string message;     // what is wrong and the fix: "must be in [0, 1), got 1.0"
  bool about_key = false;  // about the key itself (not a parameter), not its value

  std::string text() const { return path + ": " + message; }
};

class OptionProblems {
 public:
  void error(std::string path, std::string message);
  void warn(std::string path, std::string message);
  void key_warn(std::string path, std::string message);

  const std::vector<OptionProblem>& all() const { return all_; }
  bool has_errors() const;
  // "path: message" of each error / warning, in the order found.
  std::vector<std::string> errors() const;
  std::vector<std::string> warnings() const;
  // ConfigError listing every error, one per line; nothing when there is none. Warnings are not
  // printed here: the configuration loader reports them, with their positions in the file.
  void throw_if_errors() const;

 private:
  std::vector<OptionProblem> all_;
};

class OptionReader {
 public:
  // `section` may be null (read as empty) or a mapping; anything else is an error at
  // `section_name`.
  OptionReader(const nlohmann::ordered_json& section, std::string section_name, OptionProblems& problems);

  // Present with a non-null value.
  bool has(const std::string& key) const;
  std::string path(const std::string& key) const { return section_name_ + "." + key; }
  const std::string& section_name() const { return section_name_; }
  OptionProblems& problems() { return problems_; }

  // Typed reads. Absent or null gives nullopt; a value of the wrong type is an error ("expected
  // int, got float 1.5") and gives nullopt too, so the caller keeps its default and the rest of
  // the section is still checked.
  std::optional<double> number(const std::string& key);  // an int is a valid float
  std::optional<int64_t> integer(const std::string& key);
  std::optional<bool> boolean(const std::string& key);
  std::optional<std::string> string(const std::string& key);
  std::optional<std::vector<std::string>> string_list(const std::string& key);
  std::optional<std::vector<double>> number_list(const std::string& key);
  // The raw value (the key counts as read); nullptr when absent or null.
  const nlohmann::ordered_json* raw(const std::string& key);
  void mark_read(const std::string& key);

  // A field of the reference's dataclasses (OptimizerConfig, LrSchedulerConfig) cannot be None:
  // null is an error there, not "use the default".
  void reject_null(const std::string& key, const std::string& type, const std::string& default_text);

  void error(const std::string& key, std::string message) { problems_.error(path(key), std::move(message)); }
  void warn(const std::string& key, std::string message) { problems_.warn(path(key), std::move(message)); }

  // Warns about every key nothing read: "<section>.<key>: is not a parameter of <consumer> and
  // is ignored", with the read key it most resembles.
  void warn_unread(const std::string& consumer);

 private:
  const nlohmann::ordered_json* find(const std::string& key) const;
  // "expected <type>, got <type> <value>" at path(key); `key` may carry an index ("betas[1]").
  void type_mismatch(const std::string& key, const std::string& expected, const nlohmann::ordered_json& value);
  bool is_list_of(const std::string& key, const nlohmann::ordered_json& value, const std::string& item_type);

  nlohmann::ordered_json section_;
  std::string section_name_;
  OptionProblems& problems_;
  std::vector<std::string> read_;  // in the order read: the candidates of a did-you-mean
};

// A JSON value in messages: 'abc', 3, 0.5, true, [..].
std::string describe_json(const nlohmann::ordered_json& value);
// "bool", "int", "float", "str", "list", "map", "null".
std::string json_type_name(const nlohmann::ordered_json& value);

}  // namespace loom::optim
