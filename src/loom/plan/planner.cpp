#include "loom/plan/planner.h"

#include <algorithm>
#include <set>

#include "loom/config/memory_estimate.h"
#include "loom/core/error.h"
#include "loom/models/accounting.h"
#include "loom/plan/traffic.h"
#include "loom/runtime/pipeline_order.h"

namespace loom::plan {

namespace {

// Micro-batches (chunk-sized pieces under interleaving) pipeline rank p holds, counted off the
// schedule the trainer runs (runtime/pipeline_order.h): at most (the chunks whose forward has run
// and whose backward has not), and at most when a backward starts after its chunk's first one
// (from then on the chunk's units hold the full grads they accumulate over the step).
struct InFlight {
  int64_t peak = 1;
  int64_t with_grads = 0;  // 0: no backward follows its chunk's first (one micro-batch per step)
  double fraction = 1.0;   // of the stage's activations each one is (1/v)
};

InFlight in_flight(const config::ResolvedConfig& r, int p) {
  const auto& pipe = r.layout.pipeline;
  const int pp = r.layout.dims.pp();
  if (!pipe || pp <= 1) return {};
  const int v = pipe->interleave_num;
  const auto kind = pipe->schedule == "gpipe" ? runtime::PipelineScheduleKind::gpipe : runtime::PipelineScheduleKind::one_f_one_b;
  InFlight f{0, 0, 1.0 / v};
  std::set<int> chunks_with_grads;
  int64_t live = 0;
  for (const runtime::PipelineAction& a : runtime::pipeline_order(pp, p, v, r.layout.num_accumulation_steps, kind)) {
    if (a.kind == runtime::PipelineAction::Kind::forward) {
      f.peak = std::max(f.peak, ++live);
      continue;
    }
    if (!chunks_with_grads.insert(a.chunk).second) f.with_grads = std::max(f.with_grads, live);
    --live;
  }
  return f;
}

// What one rank holds on top of its state at the worst moment of a step: FSDP's gathered bytes
// and the activations, from the moments the FSDP units go through (dist/fsdp.h). Without FSDP it
// is the saved activations and the larger of the backward's transient and the attention's
// exchange. With FSDP the root unit (parameters and full grads) is held throughout, and per unit
// u, with the other units' parameters too when they stay gathered (reshard 'never'):
//   gather     before u's backward (reshard) or in its forward ('never'): its parameters and the
//              all-gather's receive buffer, the activations saved so far
//   MLP        the backward's transient (config::backward_transient_bytes), before u's weight
//              grads: the MLP's activation grads come first
//   attention  u's full grads (the MLP's weight grads, most of them, are formed by then) and the
//              context-parallel exchange
//   reduce     once u's grads are complete (its layer's saved tensors freed by then): its full
//              grads and the packed send buffer
// Under pipeline parallelism the units accumulate their full grads unreduced over the step
// (set_requires_gradient_sync) and reduce them in the last micro-batch's backward, so every
// backward after a chunk's first runs with every unit's grads held (counted for all of the
// stage's units: an upper bound under interleaving), with the micro-batches in flight then.
struct Moment {
  int64_t fsdp = 0, activations = 0;
  int64_t in_flight = 1;  // micro-batches (chunks) whose activations are held then
  // For the report, "<unit>'s <what>" ("decoder.layers.3's reduce-scatter") or `what` alone;
  // kept as pointers so that weighing thousands of candidate moments builds no strings.
  const std::string* unit = nullptr;
  const char* what = "";
  int64_t total() const { return fsdp + activations; }
  std::string name() const { return unit ? *unit + "'s " + what : what; }
};

Moment peak_moment(const StateBytes& s, bool reshard, bool accumulates_unreduced, const InFlight& flight,
                   int64_t micro, int64_t smallest_layer, int64_t transient, int64_t exchange) {
  auto saved_by = [&](int64_t chunks) {
    return static_cast<int64_t>(static_cast<double>(micro) * flight.fraction * static_cast<double>(chunks));
  };
  const int64_t saved = saved_by(flight.peak), saved_with_grads = saved_by(flight.with_grads);
  Moment worst{0, saved + std::max(transient, exchange), flight.peak,
               nullptr, transient >= exchange ? "a backward's transient" : "an attention backward's exchange"};
  if (!s.fsdp) return worst;
  int64_t root = 0, all_params = 0, all_grads = 0;
  for (const StateBytes::FsdpUnit& u : s.fsdp_units) {
    if (u.unit.empty()) root += u.param_bytes + u.grad_bytes;
    else all_params += u.param_bytes, all_grads += u.grad_bytes;
  }
  auto consider = [&](int64_t fsdp, int64_t activations, int64_t chunks, const std::string* unit, const char* what) {
    const Moment m{fsdp, std::max<int64_t>(0, activations), chunks, unit, what};
    if (m.total() > worst.total()) worst = m;
  };
  consider(root + (reshard ? 0 : all_params), saved + transient, flight.peak, nullptr,
           reshard ? "a backward's transient, only the root unit gathered" : "a backward's transient");
  // In backward order, so that of equal moments the first to happen is named.
  for (auto it = s.fsdp_units.rbegin(); it != s.fsdp_units.rend(); ++it) {
    const StateBytes::FsdpUnit& u = *it;
    if (u.unit.empty()) continue;
    const int64_t held = root + (reshard ? u.param_bytes : all_params);
    consider(held + u.gather_buffer_bytes, saved, flight.peak, &u.unit, "all-gather");
    consider(held, saved + transient, flight.peak, &u.unit, "MLP backward");
    consider(held + u.grad_bytes, saved + exchange, flight.peak, &u.unit, "attention backward");
    if (!accumulates_unreduced) {
      consider(held + u.grad_bytes + u.reduce_buffer_bytes, saved - smallest_layer, flight.peak, &u.unit,
               "reduce-scatter");
    } else if (flight.with_grads > 0) {
      consider(held + all_grads, saved_with_grads + std::max(transient, exchange), flight.with_grads, &u.unit,
               "backward, the step's grads accumulated");
      consider(held + all_grads + u.reduce_buffer_bytes, saved_with_grads - smallest_layer, flight.with_grads,
               &u.unit, "reduce-scatter, the step's grads accumulated");
    }
  }
  return worst;
}

bool crosses_nodes(const std::vector<int>& members, int per_node) {
  for (int m : members)
    if (m / per_node != members.front() / per_node) return true;
  return false;
}

}  // namespace

int64_t planned_seq_length(const config::ResolvedConfig& r) {
  const int64_t seq = r.seq_length;
  LOOM_CHECK(seq > 0, ConfigError, "loom plan needs the sequence length: set train_dataset.dataloader.config."
             "seq_length (or model.seq_length)");
  return seq;
}

Plan make_plan(const config::TrainConfig& config, const config::ResolvedConfig& resolved, const DeviceProfile& device,
               int64_t device_memory, const PlanOptions& options) {
  const models::ModelArgs& a = resolved.model_args();
  const dist::ParallelDims& d = resolved.layout.dims;
  Plan plan;
  plan.world_size = d.world_size();
  plan.dims = d;
  plan.virtual_pp = resolved.layout.pipeline ? resolved.layout.pipeline->interleave_num : 1;
  plan.device = device;
  plan.device_memory_bytes = device_memory;
  plan.seq_length = planned_seq_length(resolved);
  const int64_t seq = plan.seq_length;
  const int64_t M = resolved.layout.num_accumulation_steps;
  plan.tokens_per_step = resolved.layout.samples_per_step * seq;
  plan.model_flops_per_step = models::training_flops_per_token(a, seq) * static_cast<double>(plan.tokens_per_step);
  const bool reshard = reshard_after_forward(config.parallelism, d);
  const double peak_flops = device.flops_for(a.compute_dtype);
  const bool gpu = device.name != "cpu";
  // Tokens one rank's matrix work covers per step: its data shard's, split over cp and tp.
  const double rank_tokens = static_cast<double>(M * config.training.local_batch_size * seq) / (d.cp() * d.tp());

  double slowest = 0;
  for (int p = 0; p < d.pp(); ++p) {
    const int first = d.rank_of({p, 0, 0, 0, 0});
    const std::vector<HeldParameter> held =
        options.held ? options.held(p, first) : held_parameters(config, resolved, first);
    // Layers, FLOPs and activations of the stage.
    const std::vector<StageChunk> chunks = stage_chunks(resolved, p);
    std::vector<int64_t> layers, device_layers;
    bool head = false;
    double flops_per_token = 0, recompute_per_token = 0;
    for (const StageChunk& c : chunks) {
      head = head || c.head;
      for (int64_t l = c.first_layer; l <= c.last_layer && l < a.num_layers; ++l) layers.push_back(l);
      if (c.head) {
        for (int64_t k = 0; k < a.mtp_num_layers; ++k) layers.push_back(a.num_layers + k);
        flops_per_token += models::head_flops_per_token(a);
      }
    }
    const auto recomputes = config::layer_recomputes(a, resolved.recompute, layers);
    for (int64_t l : layers) {
      const double f = models::layer_flops_per_token(a, l, seq);
      flops_per_token += f;
      // What the backward runs again: the layer's forward, or each selected module's (not one
      // a selected parent covers).
      const config::LayerRecompute& r = recomputes.at(l);
      if (r.full) recompute_per_token += f / 3;
      else
        for (const std::string& m : r.modules)
          if (r.covering(m) == m) recompute_per_token += models::module_forward_flops_per_token(a, l, seq, m);
      if (!(gpu && resolved.swap.enable && resolved.swap.layers.count(l))) device_layers.push_back(l);
    }
    const InFlight flight = in_flight(resolved, p);
    // The stage's layers' saved activations for one micro-batch, and the smallest layer's (what a
    // unit's reduce-scatter frees before it runs).
    const std::vector<int64_t> per_layer =
        config::layer_activation_bytes(config, a, resolved.layout, resolved.recompute, seq, device_layers);
    int64_t micro = 0;
    for (int64_t b : per_layer) micro += b;
    const int64_t smallest_layer = per_layer.empty() ? 0 : *std::min_element(per_layer.begin(), per_layer.end());
    // On top of what the micro-batches in flight keep: the worst moment of one backward
    // (config::backward_transient_bytes), or under context parallelism the attention's exchange.
    const int64_t transient = config::backward_transient_bytes(config, a, resolved.layout, resolved.recompute, seq,
                                                               device_layers, head);
    const int64_t exchange = config::context_parallel_exchange_bytes(config, a, resolved.layout, seq);

    // Ranks of the stage, grouped by what they hold (FSDP's last rows make the optimizer state
    // of the last shard ranks smaller).
    std::vector<RolePlan> stage_roles;
    for (int r = first; r < d.world_size(); ++r) {
      if (d.coordinates(r).pp != p) continue;
      if (!options.roles && r != first) break;
      StateBytes s = state_bytes(held, d, r);
      auto same = [&](const RolePlan& role) {
        return role.state.parameter_bytes == s.parameter_bytes && role.state.gradient_bytes == s.gradient_bytes &&
               role.state.optimizer_bytes == s.optimizer_bytes;
      };
      auto it = std::find_if(stage_roles.begin(), stage_roles.end(), same);
      if (it == stage_roles.end()) {
        RolePlan role;
        role.pp_stage = p;
        role.state = std::move(s);
        stage_roles.push_back(std::move(role));
        it = stage_roles.end() - 1;
      }
      it->ranks.push_back(r);
    }
    for (size_t i = 0; i < stage_roles.size(); ++i) {
      RolePlan& role = stage_roles[i];
      role.name = "pp stage " + std::to_string(p) + (stage_roles.size() > 1 ? " (" + std::string(1, 'a' + i) + ")" : "");
      const Moment peak = peak_moment(role.state, reshard, d.pp() > 1, flight, micro, smallest_layer, transient,
                                      exchange);
      role.fsdp_held_bytes = peak.fsdp;
      role.peak_moment = peak.name();
      role.activation_peak_bytes = peak.activations;
      role.activations_in_flight = peak.in_flight;
      role.peak_bytes = role.state.parameter_bytes + role.state.gradient_bytes + role.state.optimizer_bytes +
                        peak.total();
      role.flops_per_step = flops_per_token * rank_tokens;
      role.bytes_sent_per_step = bytes_sent_per_step(config, resolved, p, role.state, seq);
      role.compute_time_s = (flops_per_token + recompute_per_token) * rank_tokens / peak_flops;
      role.memory_time_s = 3.0 * static_cast<double>(role.state.parameter_bytes + role.state.gradient_bytes +
                                                     role.state.optimizer_bytes) / device.memory_bandwidth;
      const int r0 = role.ranks.front();
      for (const auto& [axis, bytes] : role.bytes_sent_per_step) {
        const std::vector<int> members = axis == "world" ? std::vector<int>{0, d.world_size() - 1}
                                                          : d.group_ranks(axis, r0);
        const double bw = crosses_nodes(members, device.devices_per_node) ? device.inter_node_bandwidth
                                                                          : device.intra_node_bandwidth;
        const double t = static_cast<double>(bytes) / bw;
        if (axis == "fsdp" || axis == "efsdp" || axis == "dp_replicate") role.overlapped_comm_s += t;
        else role.exposed_comm_s += t;
      }
      role.step_time_s = std::max(role.compute_time_s, role.overlapped_comm_s) + role.exposed_comm_s +
                         role.memory_time_s;
      slowest = std::max(slowest, role.step_time_s);
      plan.max_peak_bytes = std::max(plan.max_peak_bytes, role.peak_bytes);
      plan.fits = plan.fits && role.peak_bytes <= device_memory;
    }
    if (options.roles)
      for (RolePlan& role : stage_roles) plan.roles.push_back(std::move(role));
  }
  plan.bubble = 1.0 + static_cast<double>(d.pp() - 1) / static_cast<double>(plan.virtual_pp * M);
  plan.step_time_s = slowest * plan.bubble;
  plan.mfu = plan.model_flops_per_step / (plan.step_time_s * plan.world_size * peak_flops);
  return plan;
}

}  // namespace loom::plan
