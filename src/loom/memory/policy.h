// Memory policy: which layers are fully recomputed, which modules inside which layers are
// selectively recomputed, which operations get communication recompute, which layers/modules
// swap their activations. The options come from the configuration, which checked every rule of
// spec/memory_optimization.md it can without the model (config/memory_checks.cpp); plan_memory()
// resolves the patterns against the built model's modules and refuses what only the module tree
// shows (a module both recomputed and swapped); apply_memory_plan() installs the plan by
// wrapping module forwards from outside.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "loom/memory/layer_paths.h"
#include "loom/memory/swap.h"

namespace loom::memory {

struct RecomputeOptions {
  enum class Mode { none, full, select };
  Mode mode = Mode::none;
  std::set<int64_t> full_layers;            // full_recompute_layer
  std::vector<PathSelection> select;        // select_module (module-path regexes)
  std::vector<std::string> exclude_ops;     // case-insensitive substrings of op names
  bool comm_enable = false;                 // recompute_comm.enable
  std::vector<PathSelection> comm_select;   // recompute_comm.select_module (operation paths)
};

struct SwapOptions {
  bool enable = false;
  int64_t prefetch = 1;                     // default_prefetch
  std::set<int64_t> layers;                 // layer_swap (all entries merged)
  std::vector<PathSelection> op_swap;       // op_name regexes over module paths
};

struct MemoryPlan {
  std::set<int64_t> full_recompute;
  std::map<int64_t, std::vector<std::string>> select_recompute;  // layer → module paths
  std::map<int64_t, std::vector<std::string>> comm_recompute;    // layer → operation paths
  std::set<int64_t> swap_layers;
  std::map<int64_t, std::vector<std::string>> op_swap;           // layer → module paths
  int64_t prefetch = 1;
  std::vector<std::string> warnings;                             // also logged
  std::string summary() const;
};

// `layers` are the transformer layers present on this process; `num_layers` counts every layer
// of the model, MTP layers included (MTP layer i has index decoder layers + i), as the layer ids
// of the options do. Throws ConfigError when a module would be both recomputed and swapped.
MemoryPlan plan_memory(const std::vector<LayerRef>& layers, int64_t num_layers, const RecomputeOptions& recompute,
                       const SwapOptions& swap);

// Installs the plan. `parameters` are never swapped. Returns the swap manager (null when no
// swap) so callers can read its statistics.
std::shared_ptr<SwapManager> apply_memory_plan(nn::Module& model, const std::vector<LayerRef>& layers,
                                               const MemoryPlan& plan, const RecomputeOptions& recompute);

// recompute.exclude_op (memory_optimization.md "Key Behaviors of exclude_op"): whether operator
// `op`'s name contains an entry, case-insensitively (and ignoring underscores, so 'AllGather'
// and 'all_gather' are one name). A kept operator's outputs and saved tensors survive the
// forward and the recompute reuses them (autograd::reuse_in_recompute); docs/memory.md lists
// the operator names.
bool op_is_excluded(const char* op, const std::vector<std::string>& exclude_ops);

}  // namespace loom::memory
