#include "loom/optim/param_groups.h"

#include <fnmatch.h>

namespace loom::optim {

bool rule_matches(const std::string& rule, const std::string& name) {
  if (rule == name || name.find(rule) != std::string::npos) return true;
  // No FNM_PATHNAME/FNM_PERIOD: like Python's fnmatch, `*` matches any characters.
  return fnmatch(rule.c_str(), name.c_str(), 0) == 0;
}

bool matches_any(const std::vector<std::string>& rules, const std::string& name) {
  for (const auto& rule : rules)
    if (rule_matches(rule, name)) return true;
  return false;
}

static bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool applies_weight_decay(const std::string& name, const Shape& shape, const WeightDecayRules& rules) {
  if (matches_any(rules.include, name)) return true;
  if (matches_any(rules.exclude, name)) return false;
  if (shape.ndim() == 1 || ends_with(name, ".bias")) return false;
  for (const auto& n : rules.no_decay_names)
    if (n == name) return false;
  for (const auto& k : rules.no_decay_keywords)
    if (name.find(k) != std::string::npos) return false;
  return true;
}

std::vector<ParamGroup> build_param_groups(const NamedParams& params, double weight_decay,
                                           const WeightDecayRules& rules) {
  std::vector<ParamGroup> groups(2);
  groups[0].weight_decay = weight_decay;
  groups[1].weight_decay = 0.0;
  for (const auto& p : params)
    groups[applies_weight_decay(p.name, p.param.shape(), rules) ? 0 : 1].params.push_back(p);
  return groups;
}

}  // namespace loom::optim
