// Which parameters get weight decay (MindFormers' trainer/utils.py get_param_groups). Per trainable
// parameter: an include-rule hit turns decay on; else an exclude-rule hit turns it off; else it is
// off for 1-D parameters, names ending ".bias", names the model lists as no-decay, or names
// containing a model no-decay keyword; otherwise on. A rule matches a name exactly, as a substring,
// or as an fnmatch glob ("*norm*").
#pragma once

#include <string>
#include <vector>

#include "loom/optim/named_param.h"

namespace loom::optim {

struct WeightDecayRules {
  std::vector<std::string> include;             // optimizer.weight_decay_include
  std::vector<std::string> exclude;             // optimizer.weight_decay_exclude
  std::vector<std::string> no_decay_names;      // model.no_weight_decay(): exact names
  std::vector<std::string> no_decay_keywords;   // model.no_weight_decay_keywords(): substrings
};

// Exact name, substring, or fnmatch glob (`*`, `?`, `[seq]`, `[!seq]`; `*` crosses dots).
bool rule_matches(const std::string& rule, const std::string& name);
bool matches_any(const std::vector<std::string>& rules, const std::string& name);

bool applies_weight_decay(const std::string& name, const Shape& shape, const WeightDecayRules& rules);

// The two groups of the reference: decayed parameters (weight_decay = `weight_decay`) and the
// rest (weight_decay = 0), each in the order given.
struct ParamGroup {
  double weight_decay = 0.0;
  NamedParams params;
};
std::vector<ParamGroup> build_param_groups(const NamedParams& params, double weight_decay,
                                           const WeightDecayRules& rules);

}  // namespace loom::optim
