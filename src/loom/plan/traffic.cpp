#include "loom/plan/traffic.h"

#include <algorithm>

#include "loom/plan/tp_volume.h"

namespace loom::plan {

std::vector<StageChunk> stage_chunks(const config::ResolvedConfig& resolved, int pp_rank) {
  const models::ModelArgs& a = resolved.model_args();
  const auto& pipeline = resolved.layout.pipeline;
  if (!pipeline || pipeline->pipeline_parallel <= 1 || pipeline->stages.empty())
    return {StageChunk{0, 0, a.num_layers - 1, true, true}};
  std::vector<StageChunk> out;
  const int last = pipeline->num_virtual_stages() - 1;
  for (int s : pipeline->local_stage_indices(pp_rank)) {
    const config::VirtualStage& v = pipeline->stages[static_cast<size_t>(s)];
    out.push_back({s, v.layers.first, v.layers.last, s == 0, s == last});
  }
  return out;
}

namespace {

void add(std::map<std::string, int64_t>& m, const std::string& axis, int64_t bytes) {
  if (bytes > 0) m[axis] += bytes;
}

// Routed-expert layers among [first, last] (and MTP's on the head stage).
std::vector<int64_t> layers_of(const models::ModelArgs& a, const StageChunk& c) {
  std::vector<int64_t> out;
  for (int64_t l = c.first_layer; l <= c.last_layer && l < a.num_layers; ++l) out.push_back(l);
  if (c.head)
    for (int64_t k = 0; k < a.mtp_num_layers; ++k) out.push_back(a.num_layers + k);
  return out;
}

}  // namespace

std::map<std::string, int64_t> bytes_sent_per_step(const config::TrainConfig& config,
                                                   const config::ResolvedConfig& resolved, int pp_rank,
                                                   const StateBytes& state, int64_t seq) {
  const models::ModelArgs& a = resolved.model_args();
  const dist::ParallelDims& d = resolved.layout.dims;
  const int64_t M = resolved.layout.num_accumulation_steps;
  const int64_t B = config.training.local_batch_size;
  const bool pipelined = d.pp() > 1;
  const bool reshard = reshard_after_forward(config.parallelism, d);
  const int64_t act = static_cast<int64_t>(dtype_size(a.compute_dtype));
  std::map<std::string, int64_t> out;

  // FSDP.
  for (const StateBytes::Bucket& b : state.buckets) {
    const int64_t es = static_cast<int64_t>(dtype_size(b.gather_dtype));
    const bool root = b.unit.empty();
    const int64_t gathers = root ? 1 : pipelined ? (reshard ? 2 * M : 1) : M * (reshard ? 2 : 1);
    const int64_t reduces = root || pipelined ? 1 : M;
    add(out, b.group, gathers * all_gather_bytes(b.shard_elements, es, b.group_size));
    if (!b.trainable) continue;
    add(out, b.group, reduces * reduce_scatter_bytes(b.shard_elements, 4, b.group_size));
    add(out, "dp_replicate", reduces * all_reduce_bytes(b.shard_elements, 4, d.dp_replicate()));
  }

  const std::vector<StageChunk> chunks = stage_chunks(resolved, pp_rank);
  const int64_t local_tokens = B * seq / d.cp();  // one micro-batch's tokens on this cp rank

  // Tensor parallelism: the sites of this rank's chunks, per micro-batch (scalars below).
  if (d.tp() > 1)
    for (const StageChunk& c : chunks) {
      TpStepShape shape;
      shape.batch = B;
      shape.seq = seq / d.cp();
      shape.world_size = d.world_size();
      shape.activation_bytes = act;
      shape.first_layer = c.first_layer;
      shape.last_layer = c.last_layer;
      shape.embedding = c.embedding;
      shape.head = c.head;
      shape.experts_on_ep = d.ep() > 1;
      shape.gathers_recomputed = resolved.recompute.comm_enable;
      for (const VolumeSite& site : count_tp_volume(a, d.tp(), shape)) {
        if (site.group != "tp" || site.kind == SiteKind::scalars) continue;
        const bool once_per_step = site.what.find("after the step") != std::string::npos;
        add(out, "tp", site.bytes() * (once_per_step ? 1 : M));
      }
    }

  // Context parallelism.
  if (d.cp() > 1) {
    const int c = d.cp();
    const int64_t T = local_tokens;
    int64_t k_width, v_width, q_width;
    if (a.multi_latent_attention) {
      const int64_t H = a.num_attention_heads / d.tp();
      k_width = H * (a.qk_nope_head_dim + a.qk_rope_head_dim);
      v_width = H * a.v_head_dim;
      q_width = k_width;
    } else {
      const int64_t G = std::max<int64_t>(1, a.num_key_value_heads / d.tp());
      k_width = v_width = G * a.head_dim;
      q_width = a.num_attention_heads / d.tp() * a.head_dim;
    }
    const int64_t kv = T * (k_width + v_width) * act;
    int64_t per_layer;
    if (config.parallelism.context_parallel_method == "colossal") {
      per_layer = (c - 1) * kv + (c - 1) * kv + c * kv;
    } else {
      // q, k, v in, the output [.., H, dv] back (dv = head_dim, MLA's v_head_dim).
      const int64_t o_width = a.multi_latent_attention ? v_width : q_width;
      const int64_t moved = T * (q_width + k_width + v_width + o_width) * act * (c - 1) / c;
      per_layer = 2 * moved;
    }
    int64_t layers = 0, moe_layers = 0, heads = 0;
    for (const StageChunk& ch : chunks) {
      for (int64_t l : layers_of(a, ch)) ++layers, moe_layers += a.is_moe_layer(l) ? 1 : 0;
      if (ch.head) heads += 1 + a.mtp_num_layers;
    }
    add(out, "cp", M * layers * per_layer);
    // Each head loss sums its token count (f64) and its share of the loss (fp32) over cp; the
    // balance statistics are summed over cp too.
    add(out, "cp", M * heads * (all_reduce_bytes(1, 8, c) + all_reduce_bytes(1, 4, c)));
    add(out, "cp", M * moe_layers * balance_statistics_bytes(a, B, c));
  }

  // Expert parallelism.
  if (d.ep() > 1 && a.num_experts > 0) {
    const int n = d.ep();
    const int64_t T = local_tokens / d.tp();
    const int64_t rows_out = T * a.moe_topk * (n - 1) / n;
    const int64_t rows = rows_out * a.hidden_size * act;
    const int64_t counts = static_cast<int64_t>(n - 1) * (a.num_experts / n) * 8;
    int64_t moe_layers = 0;
    for (const StageChunk& ch : chunks)
      for (int64_t l : layers_of(a, ch)) moe_layers += a.is_moe_layer(l) ? 1 : 0;
    add(out, "ep", M * moe_layers * (4 * rows + counts));
  }

  // Pipeline: activations forward out of every chunk but the last virtual stage, grads back out
  // of every chunk but the first.
  if (pipelined) {
    const int64_t boundary = B * (seq / d.cp() / d.tp()) * a.hidden_size * act;
    for (const StageChunk& c : chunks) add(out, "pp", M * boundary * ((c.head ? 0 : 1) + (c.embedding ? 0 : 1)));
  }

  // MoE routing counts (int64 [E] per MoE layer of the stage) summed after the step over batch,
  // cp and tp (trainer.cpp; tp's is in tp_volume's sites).
  int64_t stage_moe_layers = 0;
  for (const StageChunk& ch : chunks)
    for (int64_t l : layers_of(a, ch)) stage_moe_layers += a.is_moe_layer(l) ? 1 : 0;
  add(out, "batch", stage_moe_layers * all_reduce_bytes(a.num_experts, 8, d.data_parallel()));
  add(out, "cp", stage_moe_layers * all_reduce_bytes(a.num_experts, 8, d.cp()));

  // The step's scalars over the world, one f64 (int64) all-reduce each: the logged loss, the
  // grad norm's Σg², the optimizer's finite agreement, and each extra loss.
  const int64_t extras = logged_extra_losses(a);
  int64_t scalars = 3 + extras;
  if (pipelined) {
    // The pipeline schedule first agrees on the extras' names: the longest "name\n" list of any
    // rank (an int64 max), then every rank's list as int32 characters (pipeline_schedule.cpp).
    ++scalars;
    int64_t longest = 0;
    for (int p = 0; p < d.pp(); ++p) {
      int64_t joined = 0;
      bool moe = false, head = false;
      for (const StageChunk& ch : stage_chunks(resolved, p)) {
        head = head || ch.head;
        for (int64_t l : layers_of(a, ch)) moe = moe || a.is_moe_layer(l);
      }
      if (moe && logs_balance_loss(a)) joined += static_cast<int64_t>(std::string("load_balancing_loss\n").size());
      if (head && a.mtp_num_layers > 0) {
        joined += static_cast<int64_t>(std::string("mtp_loss\n").size());
        for (int64_t k = 1; k <= a.mtp_num_layers; ++k)
          joined += static_cast<int64_t>(("mtp_" + std::to_string(k) + "_loss\n").size());
      }
      longest = std::max(longest, joined);
    }
    add(out, "world", all_gather_bytes(longest, 4, d.world_size()));
    // The MoE monitor's counts of every stage (train/model_hooks.cpp gather_over_stages): an int64
    // max of the longest (layer, n, counts...) list, then every stage's list and its end mark.
    int64_t counts = 0;
    for (int p = 0; p < d.pp(); ++p) {
      int64_t mine = 0;
      for (const StageChunk& ch : stage_chunks(resolved, p))
        for (int64_t l : layers_of(a, ch)) mine += a.is_moe_layer(l) ? 2 + a.num_experts : 0;
      counts = std::max(counts, mine);
    }
    add(out, "pp", all_reduce_bytes(1, 8, d.pp()) + all_gather_bytes(counts + 1, 8, d.pp()));
  }
  add(out, "world", scalars * all_reduce_bytes(1, 8, d.world_size()));
  return out;
}

}  // namespace loom::plan
