#include "loom/train/callbacks.h"

#include "loom/core/error.h"

namespace loom::train {

CallbackRegistry& CallbackRegistry::instance() {
  static CallbackRegistry registry;
  return registry;
}

void CallbackRegistry::add(const std::string& type, CallbackFactory factory) { factories_[type] = std::move(factory); }

bool CallbackRegistry::contains(const std::string& type) const { return factories_.count(type) > 0; }

std::vector<std::string> CallbackRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [n, f] : factories_) out.push_back(n);
  return out;
}

std::unique_ptr<Callback> CallbackRegistry::create(const std::string& type, const nlohmann::ordered_json& kwargs,
                                                   const std::string& field) const {
  auto it = factories_.find(type);
  if (it == factories_.end()) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    LOOM_THROW(ConfigError, field, ".type: unknown callback type '", type, "'; registered callbacks are: ", known);
  }
  return it->second(kwargs);
}

int64_t positive_int_kwarg(const nlohmann::ordered_json& kwargs, const std::string& key, int64_t fallback,
                           const std::string& field) {
  if (!kwargs.contains(key)) return fallback;
  const auto& v = kwargs[key];
  LOOM_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, ConfigError, field, ".", key,
             ": must be a positive integer, got ", v.dump());
  return v.get<int64_t>();
}

void check_kwargs(const nlohmann::ordered_json& kwargs, const std::vector<std::string>& allowed,
                  const std::string& type, const std::string& field) {
  for (auto& [k, v] : kwargs.items()) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == k;
    if (ok) continue;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    LOOM_THROW(ConfigError, field, ".", k, ": ", type, " has no argument '", k, "'",
               allowed.empty() ? std::string(" (it takes none)") : "; it accepts: " + list);
  }
}

}  // namespace loom::train
