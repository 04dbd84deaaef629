#include "loom/optim/option_reader.h"

#include <cmath>

#include "loom/core/error.h"
#include "loom/core/log.h"

namespace loom::optim {

using json = nlohmann::ordered_json;

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

OptionReader::OptionReader(const json& section, std::string section_name)
    : section_(section.is_null() ? json::object() : section), section_name_(std::move(section_name)) {
  LOOM_CHECK(section_.is_object(), ConfigError, section_name_, " must be a mapping of options, got ",
             section.dump());
}

const json* OptionReader::find(const std::string& key) const {
  auto it = section_.find(key);
  if (it == section_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool OptionReader::has(const std::string& key) const { return find(key) != nullptr; }

const json* OptionReader::raw(const std::string& key) {
  read_.insert(key);
  return find(key);
}

std::optional<double> OptionReader::optional_number(const std::string& key) {
  const json* v = raw(key);
  if (!v) return std::nullopt;
  LOOM_CHECK(v->is_number(), ConfigError, path(key), " must be a number, got ", v->dump());
  return v->get<double>();
}

double OptionReader::number(const std::string& key, double fallback) {
  return optional_number(key).value_or(fallback);
}

std::optional<int64_t> OptionReader::optional_integer(const std::string& key) {
  const json* v = raw(key);
  if (!v) return std::nullopt;
  LOOM_CHECK(v->is_number_integer() || v->is_number_unsigned(), ConfigError, path(key),
             " must be an integer, got ", v->dump(), "; write it without a decimal point");
  return v->get<int64_t>();
}

int64_t OptionReader::integer(const std::string& key, int64_t fallback) {
  return optional_integer(key).value_or(fallback);
}

bool OptionReader::boolean(const std::string& key, bool fallback) {
  const json* v = raw(key);
  if (!v) return fallback;
  LOOM_CHECK(v->is_boolean(), ConfigError, path(key), " must be true or false, got ", v->dump());
  return v->get<bool>();
}

std::string OptionReader::string(const std::string& key, const std::string& fallback) {
  const json* v = raw(key);
  if (!v) return fallback;
  LOOM_CHECK(v->is_string(), ConfigError, path(key), " must be a string, got ", v->dump());
  return v->get<std::string>();
}

std::optional<std::vector<std::string>> OptionReader::optional_string_list(const std::string& key) {
  const json* v = raw(key);
  if (!v) return std::nullopt;
  if (v->is_string()) return std::vector<std::string>{v->get<std::string>()};
  LOOM_CHECK(v->is_array(), ConfigError, path(key),
             " must be a list of parameter-name rules (strings), got ", v->dump());
  std::vector<std::string> out;
  for (const auto& item : *v) {
    LOOM_CHECK(item.is_string(), ConfigError, path(key), " entries must be strings, got ",
               item.dump(), " in ", v->dump());
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::optional<std::vector<double>> OptionReader::optional_number_list(const std::string& key,
                                                                      int length) {
  const json* v = raw(key);
  if (!v) return std::nullopt;
  const bool length_ok = v->is_array() && (length < 0 || static_cast<int>(v->size()) == length);
  LOOM_CHECK(length_ok, ConfigError, path(key), " must be a list of ",
             length < 0 ? std::string("numbers") : std::to_string(length) + " numbers", ", got ",
             v->dump());
  std::vector<double> out;
  for (const auto& item : *v) {
    LOOM_CHECK(item.is_number(), ConfigError, path(key), " entries must be numbers, got ",
               item.dump(), " in ", v->dump());
    out.push_back(item.get<double>());
  }
  return out;
}

std::vector<std::string> OptionReader::unread_keys() const {
  std::vector<std::string> out;
  for (auto it = section_.begin(); it != section_.end(); ++it)
    if (!it->is_null() && !read_.count(it.key())) out.push_back(it.key());
  return out;
}

std::vector<std::string> OptionReader::warn_unread(const std::string& what,
                                                   const std::string& accepted) {
  std::vector<std::string> unread = unread_keys();
  if (!unread.empty())
    log::warn(section_name_, ": ignoring unknown key", unread.size() > 1 ? "s" : "", " [",
              join_names(unread), "] for ", what, " (accepted keys: ", accepted,
              "); remove ", unread.size() > 1 ? "them" : "it", " or check the spelling");
  return unread;
}

}  // namespace loom::optim
