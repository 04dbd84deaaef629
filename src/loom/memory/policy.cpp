#include "loom/memory/policy.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "loom/autograd/checkpoint.h"
#include "loom/core/log.h"
#include "loom/memory/comm_recompute.h"

namespace loom::memory {

namespace {

// Lower case without underscores: 'AllGather', 'allgather' and 'all_gather' name one operator.
std::string folded(const std::string& s) {
  std::string out;
  for (unsigned char c : s)
    if (c != '_') out += static_cast<char>(std::tolower(c));
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

}  // namespace

bool op_is_excluded(const char* op, const std::vector<std::string>& exclude_ops) {
  const std::string name = folded(op ? op : "");
  for (const auto& e : exclude_ops)
    if (name.find(folded(e)) != std::string::npos) return true;
  return false;
}

MemoryPlan plan_memory(const std::vector<LayerRef>& layers, int64_t num_layers, const RecomputeOptions& rc,
                       const SwapOptions& sw) {
  using Mode = RecomputeOptions::Mode;
  MemoryPlan plan;
  plan.prefetch = sw.prefetch;
  // The configuration checked these (config/memory_checks.cpp): options that break them are a bug.
  LOOM_ASSERT(rc.mode != Mode::full || !rc.full_layers.empty(), "full recompute without full_recompute_layer");
  LOOM_ASSERT(rc.mode != Mode::select || !rc.select.empty() || !rc.full_layers.empty(),
              "select recompute without select_module");
  LOOM_ASSERT(!rc.comm_enable || !rc.comm_select.empty(), "communication recompute without select_module");
  if (sw.enable) {
    LOOM_ASSERT(sw.prefetch >= 1 && sw.prefetch <= num_layers - 1, "swap prefetch ", sw.prefetch,
                " outside [1, num_layers - 1] with ", num_layers, " layers");
    auto within_prefetch = [&](const std::set<int64_t>& swapped) {
      return swapped.empty() || *swapped.rbegin() + sw.prefetch < num_layers;
    };
    LOOM_ASSERT(within_prefetch(sw.layers), "a swapped layer plus the prefetch passes the last layer");
    for (const auto& op : sw.op_swap)
      LOOM_ASSERT(within_prefetch(op.layers), "an op-swapped layer plus the prefetch passes the last layer");
  }

  std::vector<std::regex> select_re, comm_re, swap_re;
  for (const auto& s : rc.select) select_re.push_back(compile_pattern(s.pattern, "recompute.select_module"));
  for (const auto& s : rc.comm_select) comm_re.push_back(compile_pattern(s.pattern, "recompute_comm.select_module"));
  for (const auto& s : sw.op_swap) swap_re.push_back(compile_pattern(s.pattern, "swap.op_swap.op_name"));
  std::vector<bool> select_hit(rc.select.size(), false), comm_hit(rc.comm_select.size(), false),
      swap_hit(sw.op_swap.size(), false);

  for (const LayerRef& layer : layers) {
    const int64_t i = layer.index;
    LayerPaths paths = collect_layer_paths(*layer.module);
    if (rc.mode != Mode::none && rc.full_layers.count(i)) plan.full_recompute.insert(i);
    if (rc.mode == Mode::select && !plan.full_recompute.count(i)) {
      std::set<std::string> covered;
      for (size_t k = 0; k < rc.select.size(); ++k) {
        if (!rc.select[k].layers.count(i)) continue;
        for (const auto& p : match_outermost(select_re[k], paths.modules, covered)) {
          plan.select_recompute[i].push_back(p);
          covered.insert(p);
          select_hit[k] = true;
        }
      }
    }
    if (rc.comm_enable && !plan.full_recompute.count(i)) {
      std::set<std::string> covered(plan.select_recompute[i].begin(), plan.select_recompute[i].end());
      for (size_t k = 0; k < rc.comm_select.size(); ++k) {
        if (!rc.comm_select[k].layers.count(i)) continue;
        for (const auto& m : paths.modules)
          if (std::regex_match(m, comm_re[k])) {
            comm_hit[k] = true;
            std::string w = layer.path + "." + m + " is expected to be operation but got cell, this configuration will not be effective";
            if (std::find(plan.warnings.begin(), plan.warnings.end(), w) == plan.warnings.end()) plan.warnings.push_back(w);
          }
        for (const auto& p : match_outermost(comm_re[k], paths.operations, covered)) {
          plan.comm_recompute[i].push_back(p);
          comm_hit[k] = true;
        }
      }
    }
    if (sw.enable) {
      if (sw.layers.count(i)) plan.swap_layers.insert(i);
      std::set<std::string> covered;
      for (size_t k = 0; k < sw.op_swap.size(); ++k) {
        if (!sw.op_swap[k].layers.count(i)) continue;
        for (const auto& p : match_outermost(swap_re[k], paths.modules, covered)) {
          plan.op_swap[i].push_back(p);
          covered.insert(p);
          swap_hit[k] = true;
        }
      }
    }
    // Combination constraints: nothing may be both recomputed and swapped. A whole layer is the
    // parent of every module in it.
    std::vector<std::string> recomputed, swapped;
    if (plan.full_recompute.count(i)) recomputed.push_back("");
    for (const auto& p : plan.select_recompute[i]) recomputed.push_back(p);
    if (plan.swap_layers.count(i)) swapped.push_back("");
    for (const auto& p : plan.op_swap[i]) swapped.push_back(p);
    for (const auto& r : recomputed)
      for (const auto& s : swapped) {
        const bool overlap = r.empty() || s.empty() || is_under(r, s) || is_under(s, r);
        if (!overlap) continue;
        const std::string what_r = r.empty() ? "the whole layer (full_recompute_layer)" : "module '" + r + "' (select_module)";
        const std::string what_s = s.empty() ? "the whole layer (layer_swap)" : "module '" + s + "' (op_swap)";
        LOOM_THROW(ConfigError, "recompute and swap overlap on layer ", i, ": ", what_r, " is recomputed and ", what_s,
                   " is swapped; a module (or its parent or child) cannot be both. Remove layer ", i,
                   " from one of recompute and swap");
      }
    if (plan.select_recompute[i].empty()) plan.select_recompute.erase(i);
    if (plan.op_swap[i].empty()) plan.op_swap.erase(i);
  }
  for (size_t k = 0; k < rc.select.size(); ++k)
    if (rc.mode == Mode::select && !select_hit[k])
      plan.warnings.push_back("select_module pattern '" + rc.select[k].pattern + "' did not match any module");
  for (size_t k = 0; k < rc.comm_select.size(); ++k)
    if (rc.comm_enable && !comm_hit[k])
      plan.warnings.push_back("select_module pattern '" + rc.comm_select[k].pattern + "' did not match any module");
  for (size_t k = 0; k < sw.op_swap.size(); ++k)
    if (sw.enable && !swap_hit[k])
      plan.warnings.push_back("op_swap op_name '" + sw.op_swap[k].pattern + "' did not match any module");
  for (const auto& w : plan.warnings) log::warn(w);
  return plan;
}

std::shared_ptr<SwapManager> apply_memory_plan(nn::Module& model, const std::vector<LayerRef>& layers,
                                               const MemoryPlan& plan, const RecomputeOptions& rc) {
  autograd::SavePolicy keep;
  if (!rc.exclude_ops.empty()) {
    auto ops = rc.exclude_ops;
    keep = [ops](const char* op) { return op_is_excluded(op, ops); };
  }
  auto checkpoint_wrapper = [keep](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
    return autograd::checkpoint(inner, in, keep);
  };
  std::shared_ptr<SwapManager> swap;
  if (!plan.swap_layers.empty() || !plan.op_swap.empty()) {
    std::unordered_set<const Storage*> params;
    for (auto& [name, p] : model.named_parameters()) params.insert(p->tensor.storage().get());
    swap = std::make_shared<SwapManager>(plan.prefetch, std::move(params));
  }
  auto swap_wrapper = [swap](int64_t layer) {
    return [swap, layer](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
      autograd::SavedTensorHooksGuard guard(swap->hooks_for_layer(layer));
      return inner(in);
    };
  };
  for (const LayerRef& layer : layers) {
    const int64_t i = layer.index;
    if (auto it = plan.comm_recompute.find(i); it != plan.comm_recompute.end())
      apply_comm_recompute(*layer.module, it->second);
    if (plan.full_recompute.count(i)) layer.module->add_forward_wrapper(checkpoint_wrapper);
    if (auto it = plan.select_recompute.find(i); it != plan.select_recompute.end())
      for (const auto& p : it->second) layer.module->find_module(p)->add_forward_wrapper(checkpoint_wrapper);
    if (plan.swap_layers.count(i)) layer.module->add_forward_wrapper(swap_wrapper(i));
    if (auto it = plan.op_swap.find(i); it != plan.op_swap.end())
      for (const auto& p : it->second) layer.module->find_module(p)->add_forward_wrapper(swap_wrapper(i));
  }
  log::info(plan.summary());
  return swap;
}

std::string MemoryPlan::summary() const {
  std::ostringstream os;
  os << "memory policy:";
  auto ids = [](const std::set<int64_t>& s) {
    std::string out;
    for (int64_t v : s) out += (out.empty() ? "" : ",") + std::to_string(v);
    return out.empty() ? std::string("none") : out;
  };
  os << " full recompute layers [" << ids(full_recompute) << "]";
  for (auto& [l, p] : select_recompute) os << "; layer " << l << " recompute {" << join(p) << "}";
  for (auto& [l, p] : comm_recompute) os << "; layer " << l << " comm recompute {" << join(p) << "}";
  os << "; swap layers [" << ids(swap_layers) << "]";
  for (auto& [l, p] : op_swap) os << "; layer " << l << " swap {" << join(p) << "}";
  if (!swap_layers.empty() || !op_swap.empty()) os << " (prefetch " << prefetch << ")";
  return os.str();
}

}  // namespace loom::memory
