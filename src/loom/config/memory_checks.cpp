// recompute, recompute_comm and swap: memory_optimization.md ("Combination Constraints") and the
// reference activation_checkpoint.py validations, with its messages, and the options the memory
// layer takes (memory::plan_memory asserts what is checked here; it only adds what needs the
// built module tree: matching the patterns to real modules). Layer ids count the MTP layers
// after the decoder layers.
#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "loom/config/checks.h"
#include "loom/config/layer_spec.h"

namespace loom::config::detail {

std::vector<std::string> layer_module_paths(const models::ModelArgs& model) {
  std::vector<std::string> paths = {"input_layernorm", "self_attention", "self_attention.core_attention",
                                    "self_attention.linear_proj", "pre_mlp_layernorm", "mlp", "mlp.linear_fc1",
                                    "mlp.linear_fc2"};
  if (model.multi_latent_attention) {
    for (const char* m : {"linear_q", "linear_qa", "q_layernorm", "linear_qb", "linear_kva", "kv_layernorm", "linear_kvb"})
      paths.push_back(std::string("self_attention.") + m);
  } else {
    for (const char* m : {"linear_q", "linear_k", "linear_v", "q_layernorm", "k_layernorm"})
      paths.push_back(std::string("self_attention.") + m);
  }
  if (model.is_moe())
    for (const char* m : {"mlp.router", "mlp.token_dispatcher", "mlp.experts", "mlp.shared_experts",
                          "mlp.shared_experts.linear_fc1", "mlp.shared_experts.linear_fc2"})
      paths.emplace_back(m);
  return paths;
}

std::vector<std::string> matching_modules(const std::string& pattern, const std::vector<std::string>& modules) {
  std::vector<std::string> out;
  try {
    const std::regex re(pattern, std::regex::ECMAScript);
    for (const auto& m : modules)
      if (std::regex_match(m, re)) out.push_back(m);
  } catch (const std::regex_error&) {
    // reported by check_regex
  }
  return out;
}

namespace {

struct Selection {
  std::string pattern;
  std::string path;
  std::vector<std::int64_t> layers;
  std::vector<std::string> modules;  // canonical module paths the pattern matches in full
};

bool related(const std::string& a, const std::string& b) {
  return a == b || a.rfind(b + ".", 0) == 0 || b.rfind(a + ".", 0) == 0;
}

std::string join_ids(const std::vector<std::int64_t>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// Validates a select_module map; returns its entries with expanded layers and matched modules.
std::vector<Selection> check_select_module(const ModuleSelectMap& map, const std::string& path,
                                           std::optional<std::int64_t> total_layers,
                                           const std::vector<std::string>& modules, Diagnostics& diag) {
  std::vector<Selection> out;
  for (const auto& entry : map.entries) {
    Selection sel;
    sel.pattern = entry.pattern;
    sel.path = child_path(path, entry.pattern);
    sel.layers = layer_ids(parse_layer_specs(entry.layers, total_layers, sel.path, diag));
    if (check_regex(entry.pattern, sel.path, diag)) {
      sel.modules = matching_modules(entry.pattern, modules);
      if (sel.modules.empty())
        diag.warn(sel.path, "pattern '" + entry.pattern + "' matches no module of a Loom decoder layer (it must match "
                            "a whole path such as self_attention, self_attention.linear_proj, mlp or "
                            "mlp.linear_fc1; try '.*" + entry.pattern + "')");
    }
    out.push_back(std::move(sel));
  }
  return out;
}

std::set<std::int64_t> id_set(const std::vector<std::int64_t>& ids) { return {ids.begin(), ids.end()}; }

std::vector<memory::PathSelection> path_selections(const std::vector<Selection>& selections) {
  std::vector<memory::PathSelection> out;
  for (const auto& s : selections) out.push_back({s.pattern, id_set(s.layers)});
  return out;
}

}  // namespace

MemoryOptions check_memory(const TrainConfig& c, const models::ModelArgs& model, Diagnostics& diag) {
  const RecomputeConfig& rc = c.recompute;
  const RecomputeCommConfig& comm = c.recompute_comm;
  const SwapConfig& sw = c.swap;
  // The layers specs address: decoder layers then MTP layers; unknown without the model depth.
  const std::optional<std::int64_t> total =
      model.num_layers > 0 ? std::optional<std::int64_t>(model.num_layers + model.mtp_num_layers) : std::nullopt;
  const auto modules = layer_module_paths(model);
  MemoryOptions options;
  const bool uses_layers = rc.mode != "None" || comm.enable || sw.enable;
  if (uses_layers && !total)
    diag.note("recompute/swap layer ranges not checked against the model depth: the model section gives no "
              "num_hidden_layers/num_layers");

  // ---- recompute ----
  const std::vector<std::string> modes = {"None", "full", "select"};
  const bool mode_ok = std::find(modes.begin(), modes.end(), rc.mode) != modes.end();
  if (!mode_ok)
    diag.error("recompute.mode", "must be \"None\", \"full\" or \"select\", got '" + rc.mode + "'" +
                                     did_you_mean(rc.mode, modes));
  std::vector<std::int64_t> full_layers;
  std::vector<Selection> selects;
  if (mode_ok && rc.mode != "None") {
    if (rc.mode == "full" && (!rc.full_recompute_layer || rc.full_recompute_layer->specs.empty()))
      diag.error("recompute.full_recompute_layer", "mode is 'full' but full_recompute_layer is missing or empty; list "
                                                   "the layers to recompute, e.g. ['0-3']");
    if (rc.mode == "select" && (!rc.select_module || rc.select_module->entries.empty()))
      diag.error("recompute.select_module", "mode is 'select' but select_module is missing or empty; map module "
                                            "regexes to layers, e.g. {'.*mlp': ['0-3']}");
    if (rc.full_recompute_layer)
      full_layers = layer_ids(parse_layer_specs(*rc.full_recompute_layer, total, "recompute.full_recompute_layer", diag));
    if (rc.select_module) {
      if (rc.mode == "select")
        selects = check_select_module(*rc.select_module, "recompute.select_module", total, modules, diag);
      else
        diag.warn("recompute.select_module", "is ignored in mode 'full' (only mode 'select' uses it)");
    }
    if (rc.exclude_op)
      for (std::size_t i = 0; i < rc.exclude_op->size(); ++i)
        if ((*rc.exclude_op)[i].find_first_not_of(" \t") == std::string::npos)
          diag.error(index_path("recompute.exclude_op", i), "operator names must be non-empty strings");
  } else if (rc.mode == "None") {
    for (const char* f : {"full_recompute_layer", "select_module", "exclude_op"})
      if (c.is_explicit(std::string("recompute.") + f) &&
          ((std::string(f) == "full_recompute_layer" && rc.full_recompute_layer) ||
           (std::string(f) == "select_module" && rc.select_module) || (std::string(f) == "exclude_op" && rc.exclude_op)))
        diag.warn(std::string("recompute.") + f, "is ignored because recompute.mode is \"None\"");
  }

  // ---- recompute_comm ----
  std::vector<Selection> comm_selects;
  if (comm.enable) {
    if (!comm.select_module || comm.select_module->entries.empty())
      diag.error("recompute_comm.select_module", "enable is True but select_module is missing or empty; map "
                                                 "communication operator paths to layers, e.g. {'.*\\.all_gather': ['0-3']}");
    else {
      // Communication operators are functions, not modules: an unmatched pattern is expected here.
      for (const auto& entry : comm.select_module->entries) {
        Selection sel;
        sel.pattern = entry.pattern;
        sel.path = child_path("recompute_comm.select_module", entry.pattern);
        sel.layers = layer_ids(parse_layer_specs(entry.layers, total, sel.path, diag));
        if (check_regex(entry.pattern, sel.path, diag)) sel.modules = matching_modules(entry.pattern, modules);
        comm_selects.push_back(std::move(sel));
      }
    }
  } else if (comm.select_module && c.is_explicit("recompute_comm.select_module")) {
    diag.warn("recompute_comm.select_module", "is ignored because recompute_comm.enable is False");
  }
  memory::RecomputeOptions& recompute = options.recompute;
  if (mode_ok && rc.mode != "None") {
    recompute.mode = rc.mode == "full" ? memory::RecomputeOptions::Mode::full : memory::RecomputeOptions::Mode::select;
    recompute.full_layers = id_set(full_layers);
    recompute.select = path_selections(selects);
    if (rc.exclude_op) recompute.exclude_ops = *rc.exclude_op;
  }
  recompute.comm_enable = comm.enable;
  recompute.comm_select = path_selections(comm_selects);

  // ---- swap ----
  if (!sw.enable) {
    for (const char* f : {"layer_swap", "op_swap"})
      if (c.is_explicit(std::string("swap.") + f) &&
          ((std::string(f) == "layer_swap" && sw.layer_swap) || (std::string(f) == "op_swap" && sw.op_swap)))
        diag.warn(std::string("swap.") + f, "is ignored because swap.enable is False");
    return options;
  }
  memory::SwapOptions& swap = options.swap;
  swap.enable = true;
  swap.prefetch = sw.default_prefetch;
  if (c.parallelism.pipeline_parallel > 1)
    diag.error("swap.enable", "swap is not supported with pipeline parallel (pipeline_parallel = " +
                                  std::to_string(c.parallelism.pipeline_parallel) +
                                  "); use recompute to save memory with pipeline parallelism");
  const std::int64_t prefetch = sw.default_prefetch;
  if (total) {
    if (prefetch < 1 || prefetch >= *total)
      diag.error("swap.default_prefetch", "value " + std::to_string(prefetch) + " out of range [1, " +
                                              std::to_string(*total - 1) + "]");
  } else if (prefetch < 1) {
    diag.error("swap.default_prefetch", "value " + std::to_string(prefetch) + " must be >= 1");
  }
  auto check_prefetch = [&](const std::vector<LayerRange>& ranges, const std::string& path) {
    if (!total || ranges.empty() || prefetch < 1) return;
    const std::int64_t max_layer = ranges.back().last;
    if (max_layer + prefetch >= *total)
      diag.error(path, "max layer id " + std::to_string(max_layer) + " plus prefetch " + std::to_string(prefetch) +
                           " exceeds num_layers (" + std::to_string(*total) + "); max allowed layer id is " +
                           std::to_string(*total - prefetch - 1));
  };
  std::vector<std::int64_t> swap_layers;
  if (sw.layer_swap) {
    for (std::size_t i = 0; i < sw.layer_swap->size(); ++i) {
      const std::string p = index_path("swap.layer_swap", i);
      if (!c.is_explicit(p + ".layers")) {
        diag.error(p, "each entry must include 'layers', e.g. {layers: ['0-1']}");
        continue;
      }
      auto ranges = parse_layer_specs((*sw.layer_swap)[i].layers, total, p + ".layers", diag);
      check_prefetch(ranges, p + ".layers");
      const auto ids = layer_ids(ranges);
      if (i == 0) swap_layers = ids;
      // A deliberate difference (docs/memory.md): Loom swaps the layers of every entry, where the
      // reference silently keeps only the first; the warning says so.
      swap.layers.insert(ids.begin(), ids.end());
    }
    if (sw.layer_swap->size() > 1)
      diag.warn("swap.layer_swap", "has " + std::to_string(sw.layer_swap->size()) + " entries: Loom swaps the "
                "layers of all of them, where the reference uses only the first (spec memory_optimization.md); "
                "a file written for the reference may swap more layers here");
  }
  std::vector<Selection> op_swaps;
  if (sw.op_swap) {
    for (std::size_t i = 0; i < sw.op_swap->size(); ++i) {
      const std::string p = index_path("swap.op_swap", i);
      const OpSwapItem& item = (*sw.op_swap)[i];
      if (!c.is_explicit(p + ".op_name") || !c.is_explicit(p + ".layers")) {
        diag.error(p, "each entry must include 'op_name' and 'layers', e.g. {op_name: '.*mlp', layers: ['2-3']}");
        continue;
      }
      if (item.op_name.find_first_not_of(" \t") == std::string::npos) {
        diag.error(p + ".op_name", "op_name must be a non-empty str");
        continue;
      }
      Selection sel;
      sel.pattern = item.op_name;
      sel.path = p;
      auto ranges = parse_layer_specs(item.layers, total, p + ".layers", diag);
      check_prefetch(ranges, p + ".layers");
      sel.layers = layer_ids(ranges);
      if (check_regex(item.op_name, p + ".op_name", diag)) {
        sel.modules = matching_modules(item.op_name, modules);
        if (sel.modules.empty())
          diag.warn(p + ".op_name", "pattern '" + item.op_name + "' matches no module of a Loom decoder layer (try '.*" +
                                        item.op_name + "')");
      }
      swap.op_swap.push_back({sel.pattern, id_set(sel.layers)});
      op_swaps.push_back(std::move(sel));
    }
  }

  // ---- recompute x swap overlap (reference _check_recompute_swap_overlap) ----
  if (rc.mode == "None" && !comm.enable) return options;
  std::set<std::int64_t> recompute_layer_set(full_layers.begin(), full_layers.end());
  std::map<std::int64_t, std::vector<const Selection*>> select_by_layer;
  for (const auto* list : {&selects, &comm_selects})
    for (const auto& sel : *list)
      for (auto l : sel.layers)
        if (!recompute_layer_set.count(l)) select_by_layer[l].push_back(&sel);
  auto selected_layer = [&](std::int64_t l) {
    auto it = select_by_layer.find(l);
    if (it == select_by_layer.end()) return false;
    for (const Selection* sel : it->second)
      if (!sel->modules.empty()) return true;  // a pattern that matches nothing recomputes nothing
    return false;
  };
  std::vector<std::int64_t> overlap;
  for (auto l : swap_layers)
    if (recompute_layer_set.count(l) || selected_layer(l)) overlap.push_back(l);
  if (!overlap.empty())
    diag.error("swap.layer_swap", "layers " + join_ids(overlap) +
                                      " are configured for both recompute and layer swap, which is not allowed");
  for (const auto& sw_sel : op_swaps) {
    std::vector<std::int64_t> full_hits;
    std::vector<std::string> pairs;
    for (auto l : sw_sel.layers) {
      if (recompute_layer_set.count(l)) {
        full_hits.push_back(l);
        continue;
      }
      auto it = select_by_layer.find(l);
      if (it == select_by_layer.end()) continue;
      for (const Selection* rc_sel : it->second) {
        bool hit = sw_sel.pattern == rc_sel->pattern;
        for (const auto& a : sw_sel.modules)
          for (const auto& b : rc_sel->modules) hit |= related(a, b);
        if (hit)
          pairs.push_back("layer " + std::to_string(l) + ": '" + sw_sel.pattern + "'/'" + rc_sel->pattern + "'");
      }
    }
    if (!full_hits.empty())
      diag.error(sw_sel.path, "layers " + join_ids(full_hits) +
                                  " are configured for full recompute, op swap is not allowed");
    if (!pairs.empty()) {
      std::string detail;
      for (std::size_t i = 0; i < pairs.size() && i < 4; ++i) detail += (i ? "; " : "") + pairs[i];
      if (pairs.size() > 4) detail += "; ...";
      diag.error(sw_sel.path, "op swap and selective recompute select the same or parent/child modules (" + detail +
                                  "), which is not allowed");
    }
  }
  return options;
}

}  // namespace loom::config::detail
