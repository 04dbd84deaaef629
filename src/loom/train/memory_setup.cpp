#include "loom/train/memory_setup.h"

#include "loom/config/layer_spec.h"
#include "loom/core/log.h"

namespace loom::train {

namespace {

std::set<int64_t> ids(const config::LayerSpecs& specs, int64_t total_layers, const std::string& field) {
  auto ranges = config::parse_layer_specs(specs, total_layers, field);
  auto v = config::layer_ids(ranges);
  return std::set<int64_t>(v.begin(), v.end());
}

std::vector<memory::PathSelection> selections(const config::ModuleSelectMap& map, int64_t total_layers,
                                              const std::string& field) {
  std::vector<memory::PathSelection> out;
  for (const auto& e : map.entries)
    out.push_back({e.pattern, ids(e.layers, total_layers, field + "['" + e.pattern + "']")});
  return out;
}

}  // namespace

memory::RecomputeOptions recompute_options(const config::RecomputeConfig& rc, const config::RecomputeCommConfig& comm,
                                           int64_t total_layers) {
  memory::RecomputeOptions o;
  if (rc.mode == "full") o.mode = memory::RecomputeOptions::Mode::full;
  else if (rc.mode == "select") o.mode = memory::RecomputeOptions::Mode::select;
  if (o.mode != memory::RecomputeOptions::Mode::none) {
    if (rc.full_recompute_layer) o.full_layers = ids(*rc.full_recompute_layer, total_layers, "recompute.full_recompute_layer");
    if (rc.select_module) o.select = selections(*rc.select_module, total_layers, "recompute.select_module");
    if (rc.exclude_op) o.exclude_ops = *rc.exclude_op;
  }
  o.comm_enable = comm.enable;
  if (comm.enable && comm.select_module) o.comm_select = selections(*comm.select_module, total_layers, "recompute_comm.select_module");
  return o;
}

memory::SwapOptions swap_options(const config::SwapConfig& sw, int64_t total_layers) {
  memory::SwapOptions o;
  o.enable = sw.enable;
  o.prefetch = sw.default_prefetch;
  if (!sw.enable) return o;
  if (sw.layer_swap) {
    // The reference uses only the first entry; Loom merges all of them (and says so).
    for (size_t i = 0; i < sw.layer_swap->size(); ++i) {
      auto s = ids((*sw.layer_swap)[i].layers, total_layers, "swap.layer_swap[" + std::to_string(i) + "].layers");
      o.layers.insert(s.begin(), s.end());
    }
    if (sw.layer_swap->size() > 1)
      log::info("swap.layer_swap has ", sw.layer_swap->size(), " entries: their layers are merged");
  }
  if (sw.op_swap)
    for (size_t i = 0; i < sw.op_swap->size(); ++i) {
      const auto& item = (*sw.op_swap)[i];
      o.op_swap.push_back({item.op_name, ids(item.layers, total_layers, "swap.op_swap[" + std::to_string(i) + "].layers")});
    }
  return o;
}

}  // namespace loom::train
