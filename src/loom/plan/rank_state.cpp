#include "loom/plan/rank_state.h"

#include <algorithm>
#include <cctype>
#include <tuple>
#include <map>

#include "loom/core/error.h"
#include "loom/dist/fsdp.h"
#include "loom/optim/muon.h"
#include "loom/plan/planning_group.h"
#include "loom/runtime/model_runtime.h"
#include "loom/runtime/parallel_options.h"

namespace loom::plan {

namespace {

// "decoder.layers.12.mlp.linear_fc1.weight" -> "decoder.layers.12" (dist/fsdp.h default units).
std::string unit_of(const std::string& name) {
  for (const char* prefix : {"decoder.layers.", "mtp.layers."}) {
    const std::string p = prefix;
    if (name.rfind(p, 0) != 0) continue;
    const size_t dot = name.find('.', p.size());
    return name.substr(0, dot);
  }
  return "";
}

bool is_muon(const config::TrainConfig& config) {
  std::string t = config.optimizer.type;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return t == "muon";
}

}  // namespace

std::vector<HeldParameter> held_parameters(const config::TrainConfig& config, const config::ResolvedConfig& resolved,
                                           int rank) {
  const models::ModelArgs& args = resolved.model_args();
  const dist::ParallelDims& dims = resolved.layout.dims;
  LOOM_CHECK(dims.pp() == 1 || resolved.layout.pipeline.has_value(), ConfigError,
             "the planner needs the pipeline stages, but the configuration resolved none");
  // The run's own model and strategies, applied as far as they place parameters.
  auto runtime = runtime::ModelRuntime::for_planning(config, resolved, planning_mesh(dims, rank));
  std::optional<optim::MuonOptions> muon;
  if (is_muon(config)) muon = optim::MuonOptions::from_json(config.optimizer.section);

  std::vector<HeldParameter> out;
  for (auto& [name, p] : runtime->module().named_parameters()) {
    HeldParameter h;
    h.name = name;
    h.local = p->local_shape();
    h.dtype = p->dtype;
    h.trainable = p->trainable;
    h.expert = p->placement.on("ep") != nullptr;
    h.muon = muon && p->trainable && optim::uses_newton_schulz(*muon, name, p->global_shape);
    h.unit = unit_of(name);
    h.gather_dtype = dist::fsdp_gather_dtype(*p, dist::mixed_precision_compute_dtype(args.compute_dtype));
    out.push_back(std::move(h));
  }
  return out;
}

bool fsdp_applied(const dist::ParallelDims& d, bool experts_on_ep) {
  return d.dp_replicate() * d.fsdp() > 1 || (experts_on_ep && d.dp_replicate() * d.efsdp() > 1);
}

bool reshard_after_forward(const config::ParallelismConfig& parallelism, const dist::ParallelDims& dims) {
  return dist::reshard_after_forward(runtime::fsdp_options(parallelism, dims));
}

StateBytes state_bytes(const std::vector<HeldParameter>& params, const dist::ParallelDims& dims, int rank) {
  StateBytes s;
  const bool experts_on_ep = std::any_of(params.begin(), params.end(), [](const HeldParameter& p) { return p.expert; });
  s.fsdp = fsdp_applied(dims, experts_on_ep);
  // This rank's place in its shard groups.
  auto index_in = [&](const std::string& axis) {
    const std::vector<int> members = dims.group_ranks(axis, rank);
    return static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  };
  const int fsdp_n = dims.fsdp(), efsdp_n = dims.efsdp();
  const int fsdp_k = s.fsdp ? index_in("fsdp") : 0, efsdp_k = s.fsdp ? index_in("efsdp") : 0;

  std::map<std::tuple<std::string, std::string, DType, DType>, size_t> bucket_of;
  for (const HeldParameter& p : params) {
    const int64_t es = static_cast<int64_t>(dtype_size(p.dtype));
    const int64_t rows = p.local.ndim() ? p.local[0] : 1;
    const int64_t row_numel = rows ? p.local.numel() / rows : 1;
    int64_t own = p.local.numel();  // the elements this rank steps
    if (s.fsdp) {
      const int n = p.expert ? efsdp_n : fsdp_n, k = p.expert ? efsdp_k : fsdp_k;
      const int64_t c = (rows + n - 1) / n;
      const int64_t begin = std::min<int64_t>(rows, k * c);
      own = (std::min<int64_t>(rows, begin + c) - begin) * row_numel;
      const auto key = std::make_tuple(p.unit, std::string(p.expert ? "efsdp" : "fsdp"), p.dtype, p.gather_dtype);
      auto [it, fresh] = bucket_of.emplace(key, s.buckets.size());
      if (fresh) s.buckets.push_back({p.unit, std::get<1>(key), n, p.dtype, p.gather_dtype, 0, 0, false});
      StateBytes::Bucket& b = s.buckets[it->second];
      b.shard_elements += c * row_numel;
      b.full_elements += rows * row_numel;
      b.trainable = b.trainable || p.trainable;
    } else {
      s.parameter_bytes += own * es;
      if (p.trainable) s.gradient_bytes += own * 4;
    }
    s.local_parameter_elements += own;
    if (p.trainable) {
      s.optimizer_bytes += own * (p.muon ? 4 : 8);
      if (p.dtype != DType::f32) s.optimizer_bytes += own * 4;  // the fp32 master copy
    }
  }
  // Per unit what FSDP allocates while it works on it (fsdp_unit.cpp): the full parameters in the
  // gather dtype and their fp32 full grads; unshard's receive buffer and reduce_grads' packed send
  // buffer, one bucket at a time, shard·n elements each.
  std::map<std::string, size_t> unit_of;
  for (const StateBytes::Bucket& b : s.buckets) {
    s.parameter_bytes += b.shard_elements * static_cast<int64_t>(dtype_size(b.dtype));
    s.gradient_bytes += b.shard_elements * 4;
    auto [it, fresh] = unit_of.emplace(b.unit, s.fsdp_units.size());
    if (fresh) s.fsdp_units.push_back({b.unit});
    StateBytes::FsdpUnit& u = s.fsdp_units[it->second];
    const int64_t gather_size = static_cast<int64_t>(dtype_size(b.gather_dtype));
    u.param_bytes += b.full_elements * gather_size;
    if (b.group_size > 1)
      u.gather_buffer_bytes = std::max(u.gather_buffer_bytes, b.shard_elements * b.group_size * gather_size);
    if (b.trainable) {
      u.grad_bytes += b.full_elements * 4;
      u.reduce_buffer_bytes = std::max(u.reduce_buffer_bytes, b.shard_elements * b.group_size * 4);
    }
  }
  return s;
}

}  // namespace loom::plan
