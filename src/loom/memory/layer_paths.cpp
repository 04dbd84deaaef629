#include "loom/memory/layer_paths.h"

#include <algorithm>

namespace loom::memory {

LayerPaths collect_layer_paths(nn::Module& layer) {
  LayerPaths out;
  for (auto& [path, module] : layer.named_modules()) {
    if (!path.empty()) out.modules.push_back(path);
    for (const auto& op : module->operation_names())
      out.operations.push_back(path.empty() ? op : path + "." + op);
  }
  return out;
}

std::regex compile_pattern(const std::string& pattern, const std::string& field) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    LOOM_THROW(ConfigError, field, ": '", pattern, "' is not a valid regular expression (", e.what(),
               "); write e.g. '.*mlp' or 'self_attention'");
  }
}

bool is_under(const std::string& path, const std::string& ancestor) {
  return path == ancestor ||
         (path.size() > ancestor.size() && path.compare(0, ancestor.size(), ancestor) == 0 &&
          path[ancestor.size()] == '.');
}

std::vector<std::string> match_outermost(const std::regex& pattern, const std::vector<std::string>& candidates,
                                         const std::set<std::string>& covered) {
  std::vector<std::string> matched;
  for (const auto& c : candidates)
    if (std::regex_match(c, pattern)) matched.push_back(c);
  // Shallowest first, so parents claim their subtree before children are considered.
  std::stable_sort(matched.begin(), matched.end(), [](const std::string& a, const std::string& b) {
    return std::count(a.begin(), a.end(), '.') < std::count(b.begin(), b.end(), '.');
  });
  std::vector<std::string> kept;
  for (const auto& m : matched) {
    bool under = false;
    for (const auto& c : covered) under = under || is_under(m, c);
    for (const auto& k : kept) under = under || is_under(m, k);
    if (!under) kept.push_back(m);
  }
  return kept;
}

}  // namespace loom::memory
