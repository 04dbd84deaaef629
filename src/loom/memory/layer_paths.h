// The paths inside one transformer layer that memory policies select with regular expressions:
// every submodule path ("self_attention", "self_attention.linear_q", "mlp") and every named
// operation path ("self_attention.linear_q.all_gather"). A pattern must match a whole path
// (std::regex_match, like the reference's fullmatch); a selected parent covers its children.
#pragma once

#include <cstdint>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "loom/nn/module.h"

namespace loom::memory {

// A transformer layer as policies address it: index (MTP layer i is num_layers + i) and module.
struct LayerRef {
  int64_t index;
  std::string path;  // "decoder.layers.3"
  nn::Module* module;
};

struct LayerPaths {
  std::vector<std::string> modules;     // relative to the layer, depth-first
  std::vector<std::string> operations;  // relative to the layer: "<module path>.<operation>"
};

LayerPaths collect_layer_paths(nn::Module& layer);

// A user pattern (regex over paths) with the layers it applies to, in file order.
struct PathSelection {
  std::string pattern;
  std::set<int64_t> layers;
};

// Compiles a pattern, throwing ConfigError naming `field` when it is not a valid regex.
std::regex compile_pattern(const std::string& pattern, const std::string& field);

// Paths among `candidates` fully matched by `pattern`, keeping only the outermost when a parent
// and its child both match (and skipping those under `covered`, e.g. already-selected modules).
std::vector<std::string> match_outermost(const std::regex& pattern, const std::vector<std::string>& candidates,
                                         const std::set<std::string>& covered = {});

// True when `path` equals `ancestor` or lies under it ("mlp.linear_fc1" under "mlp").
bool is_under(const std::string& path, const std::string& ancestor);

}  // namespace loom::memory
