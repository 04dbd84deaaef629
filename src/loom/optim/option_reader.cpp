#include "loom/optim/option_reader.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/core/text.h"

namespace loom::optim {

using json = nlohmann::ordered_json;

std::string describe_json(const json& v) {
  if (v.is_string()) return "'" + v.get<std::string>() + "'";
  if (v.is_number_float()) return format_float(v.get<double>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return v.dump();
}

std::string json_type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "bool";
  if (v.is_number_integer()) return "int";
  if (v.is_number_float()) return "float";
  if (v.is_string()) return "str";
  if (v.is_array()) return "list";
  return "map";
}

// ---- OptionProblems ---------------------------------------------------------------------------

void OptionProblems::error(std::string path, std::string message) {
  all_.push_back({OptionProblem::Severity::error, std::move(path), std::move(message), false});
}

void OptionProblems::warn(std::string path, std::string message) {
  all_.push_back({OptionProblem::Severity::warning, std::move(path), std::move(message), false});
}

void OptionProblems::key_warn(std::string path, std::string message) {
  all_.push_back({OptionProblem::Severity::warning, std::move(path), std::move(message), true});
}

bool OptionProblems::has_errors() const {
  for (const auto& p : all_)
    if (p.severity == OptionProblem::Severity::error) return true;
  return false;
}

std::vector<std::string> OptionProblems::errors() const {
  std::vector<std::string> out;
  for (const auto& p : all_)
    if (p.severity == OptionProblem::Severity::error) out.push_back(p.text());
  return out;
}

std::vector<std::string> OptionProblems::warnings() const {
  std::vector<std::string> out;
  for (const auto& p : all_)
    if (p.severity == OptionProblem::Severity::warning) out.push_back(p.text());
  return out;
}

void OptionProblems::throw_if_errors() const {
  const std::vector<std::string> lines = errors();
  if (lines.empty()) return;
  std::string all;
  for (size_t i = 0; i < lines.size(); ++i) all += (i ? "\n" : "") + lines[i];
  throw ConfigError(all);
}

// ---- OptionReader -----------------------------------------------------------------------------

OptionReader::OptionReader(const json& section, std::string section_name, OptionProblems& problems)
    : section_(section.is_object() ? section : json::object()), section_name_(std::move(section_name)),
      problems_(problems) {
  if (!section.is_null() && !section.is_object())
    problems_.error(section_name_, "expected a mapping of options, got " + describe_json(section));
}

const json* OptionReader::find(const std::string& key) const {
  auto it = section_.find(key);
  if (it == section_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool OptionReader::has(const std::string& key) const { return find(key) != nullptr; }

void OptionReader::mark_read(const std::string& key) {
  if (std::find(read_.begin(), read_.end(), key) == read_.end()) read_.push_back(key);
}

const json* OptionReader::raw(const std::string& key) {
  mark_read(key);
  return find(key);
}

void OptionReader::type_mismatch(const std::string& key, const std::string& expected, const json& value) {
  std::string message = "expected " + expected + ", got " + json_type_name(value) + " " + describe_json(value);
  if (value.is_boolean() && (expected == "int" || expected == "float")) message += "; a bool is not a number here";
  if (value.is_number_float() && expected == "int" && std::isfinite(value.get<double>()) &&
      value.get<double>() == std::floor(value.get<double>()))
    message += "; write it without a decimal point";
  error(key, message);
}

std::optional<double> OptionReader::number(const std::string& key) {
  const json* v = raw(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) {  // nlohmann's booleans are not numbers
    type_mismatch(key, "float", *v);
    return std::nullopt;
  }
  return v->get<double>();
}

std::optional<int64_t> OptionReader::integer(const std::string& key) {
  const json* v = raw(key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) {
    type_mismatch(key, "int", *v);
    return std::nullopt;
  }
  return v->get<int64_t>();
}

std::optional<bool> OptionReader::boolean(const std::string& key) {
  const json* v = raw(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    type_mismatch(key, "bool", *v);
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::string> OptionReader::string(const std::string& key) {
  const json* v = raw(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    type_mismatch(key, "str", *v);
    return std::nullopt;
  }
  return v->get<std::string>();
}

bool OptionReader::is_list_of(const std::string& key, const json& value, const std::string& item_type) {
  if (!value.is_array()) {
    type_mismatch(key, "List[" + item_type + "]", value);
    return false;
  }
  bool all = true;
  for (size_t i = 0; i < value.size(); ++i) {
    const json& item = value[i];
    const bool ok = item_type == "str" ? item.is_string() : item.is_number();
    if (!ok) type_mismatch(key + "[" + std::to_string(i) + "]", item_type, item);
    all &= ok;
  }
  return all;
}

std::optional<std::vector<std::string>> OptionReader::string_list(const std::string& key) {
  const json* v = raw(key);
  if (!v || !is_list_of(key, *v, "str")) return std::nullopt;
  return v->get<std::vector<std::string>>();
}

std::optional<std::vector<double>> OptionReader::number_list(const std::string& key) {
  const json* v = raw(key);
  if (!v || !is_list_of(key, *v, "float")) return std::nullopt;
  return v->get<std::vector<double>>();
}

void OptionReader::reject_null(const std::string& key, const std::string& type, const std::string& default_text) {
  auto it = section_.find(key);
  if (it != section_.end() && it->is_null())
    error(key, "expected " + type + ", got null; this field cannot be None: delete the key to use the default (" +
                   default_text + ")");
}

void OptionReader::warn_unread(const std::string& consumer) {
  for (auto it = section_.begin(); it != section_.end(); ++it) {
    if (std::find(read_.begin(), read_.end(), it.key()) != read_.end()) continue;
    problems_.key_warn(path(it.key()),
                       "is not a parameter of " + consumer + " and is ignored" + did_you_mean(it.key(), read_));
  }
}

}  // namespace loom::optim
