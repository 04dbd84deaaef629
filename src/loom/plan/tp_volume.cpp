#include "loom/plan/tp_volume.h"

#include <algorithm>

#include "loom/core/error.h"
#include "loom/kernels/tiling.h"

namespace loom::plan {

namespace {

constexpr int64_t kF32 = 4, kF64 = 8, kI64 = 8;
constexpr int64_t kGatheredAllReduceLimit = int64_t{1} << 14;  // mpi_process_group.cpp do_all_reduce

class Sites {
 public:
  void add(SiteKind kind, const std::string& what, int64_t forward, int64_t backward, const std::string& group = "tp") {
    auto it = std::find_if(sites_.begin(), sites_.end(),
                           [&](const VolumeSite& s) { return s.what == what && s.group == group; });
    if (it == sites_.end()) it = sites_.insert(sites_.end(), VolumeSite{kind, what, group});
    ++it->count;
    it->forward_bytes += forward;
    it->backward_bytes += backward;
  }
  // One parameter left whole on every tp rank: its grad is all-reduced once per backward.
  void partial_grad(const std::string& what, int64_t elements, int t) {
    add(SiteKind::grads, "grad all-reduce: " + what, 0, all_reduce_bytes(elements, kF32, t));
  }
  std::vector<VolumeSite> take() { return std::move(sites_); }

 private:
  std::vector<VolumeSite> sites_;
};

struct Ctx {
  const nn::TransformerConfig& c;
  int t;
  const TpStepShape& step;
  // One sequence move of [B, S, w] between split and whole (either direction).
  int64_t move(int64_t width) const {
    return all_gather_bytes(step.batch * step.seq / t * width, step.activation_bytes ? step.activation_bytes : kF32, t);
  }
  // A layer's sequence all-gather: forward, and its reduce-scatter (+ the gather again) backward.
  void gather(Sites& s, SiteKind kind, const std::string& what, int64_t width) const {
    s.add(kind, what, move(width), move(width) + (step.gathers_recomputed ? move(width) : 0));
  }
  void norm(Sites& s, int64_t dim) const {
    s.partial_grad("norm weights", dim, t);
    if (c.normalization == nn::NormKind::layer_norm) s.partial_grad("norm weights", dim, t);  // + bias
  }
};

// Which balance statistics the router sums over tp (nn/router.cpp balance_loss).
struct BalanceStatistics {
  bool per_token = false, per_sequence = false;
};

BalanceStatistics balance_statistics(const nn::TransformerConfig& c) {
  BalanceStatistics b;
  const auto& types = c.moe_load_balancing_types;
  const auto& coeffs = c.moe_aux_loss_coeffs;
  for (size_t i = 0; i < types.size(); ++i) {
    const double coeff = coeffs.empty() ? 0.0 : coeffs[std::min(i, coeffs.size() - 1)];
    if (coeff == 0.0 || types[i] == "none") continue;
    (types[i] == "seq_aux_loss" ? b.per_sequence : b.per_token) = true;
  }
  return b;
}

void attention_sites(Sites& s, const Ctx& x) {
  const nn::TransformerConfig& c = x.c;
  const int64_t D = c.hidden_size;
  if (c.multi_latent_attention) {
    if (c.q_lora_rank > 0) {
      x.gather(s, SiteKind::latent, "MLA q latent all-gather [B,S/t,q_lora_rank]", c.q_lora_rank);
      s.partial_grad("MLA down-projections", c.q_lora_rank * D, x.t);  // linear_qa
      if (c.attention_bias) s.partial_grad("biases", c.q_lora_rank, x.t);
      x.norm(s, c.q_lora_rank);  // q_layernorm
      x.gather(s, SiteKind::latent, "MLA kv latent all-gather [B,S/t,kv_lora_rank+qk_rope_head_dim]", c.kv_lora_rank + c.qk_rope_head_dim);
    } else {
      x.gather(s, SiteKind::sequence, "attention input all-gather [B,S/t,D]", D);
    }
    s.partial_grad("MLA down-projections", (c.kv_lora_rank + c.qk_rope_head_dim) * D, x.t);  // linear_kva
    if (c.attention_bias) s.partial_grad("biases", c.kv_lora_rank + c.qk_rope_head_dim, x.t);
    x.norm(s, c.kv_lora_rank);  // kv_layernorm
  } else {
    x.gather(s, SiteKind::sequence, "attention input all-gather [B,S/t,D]", D);
    if (c.qk_layernorm) {
      x.norm(s, c.head_dim);
      x.norm(s, c.head_dim);
    }
    const int64_t G = c.num_key_value_heads;
    if (G % x.t != 0) {  // t/G ranks share each KV head: linear_k and linear_v summed among them
      const int copies = x.t / static_cast<int>(G);
      for (int i = 0; i < 2; ++i) {
        s.add(SiteKind::grads, "shared KV head grad all-reduce", 0, all_reduce_bytes(c.head_dim * D, kF32, copies), "tp_kv");
        if (c.attention_bias) s.add(SiteKind::grads, "shared KV head grad all-reduce", 0, all_reduce_bytes(c.head_dim, kF32, copies), "tp_kv");
      }
    }
  }
  s.add(SiteKind::sequence, "linear_proj reduce-scatter [B,S,D]", x.move(D), x.move(D));
  if (c.attention_bias) s.partial_grad("biases", D, x.t);  // linear_proj's, added after the sum
}

void mlp_sites(Sites& s, const Ctx& x, int64_t layer) {
  const nn::TransformerConfig& c = x.c;
  const int64_t D = c.hidden_size;
  if (!c.is_moe_layer(layer)) {
    x.gather(s, SiteKind::sequence, "MLP input all-gather [B,S/t,D]", D);
    s.add(SiteKind::sequence, "linear_fc2 reduce-scatter [B,S,D]", x.move(D), x.move(D));
    if (c.mlp_bias) s.partial_grad("biases", D, x.t);
    return;
  }
  const int64_t E = c.num_experts, B = x.step.batch;
  const BalanceStatistics b = balance_statistics(c);
  if (b.per_token) s.add(SiteKind::moe, "MoE balance statistics all-reduce", all_reduce_bytes(E, kF32, x.t) + all_reduce_bytes(E, kF64, x.t), 0);
  if (b.per_sequence)
    s.add(SiteKind::moe, "MoE balance statistics all-reduce", all_reduce_bytes(B * E, kF32, x.t) + all_reduce_bytes(B * E, kF64, x.t), 0);
  s.add(SiteKind::moe, "MoE routing counts all-reduce (after the step)", 0, all_reduce_bytes(E, kI64, x.t));
  const int64_t F = c.moe_intermediate_size;
  s.partial_grad("MoE router, experts, shared experts", E * D, x.t);
  if (!x.step.experts_on_ep) {  // under expert parallelism the routed experts are not partial over tp
    s.partial_grad("MoE router, experts, shared experts", E * D * 2 * F, x.t);
    s.partial_grad("MoE router, experts, shared experts", E * F * D, x.t);
  }
  if (const int64_t Fs = c.shared_expert_intermediate_size; Fs > 0) {
    s.partial_grad("MoE router, experts, shared experts", (c.gated_linear_unit ? 2 : 1) * Fs * D, x.t);
    if (c.mlp_bias) s.partial_grad("MoE router, experts, shared experts", (c.gated_linear_unit ? 2 : 1) * Fs, x.t);
    s.partial_grad("MoE router, experts, shared experts", D * Fs, x.t);
    if (c.mlp_bias) s.partial_grad("MoE router, experts, shared experts", D, x.t);
  }
}

void layer_sites(Sites& s, const Ctx& x, int64_t layer) {
  x.norm(s, x.c.hidden_size);  // input_layernorm
  attention_sites(s, x);
  x.norm(s, x.c.hidden_size);  // pre_mlp_layernorm
  mlp_sites(s, x, layer);
}

// The embedding lookup, the head's gather and the vocabulary-split loss: once for the main loss
// and once per MTP depth.
void embedding_head_loss_sites(Sites& s, const Ctx& x, bool embedding) {
  const int64_t D = x.c.hidden_size, N = x.step.batch * x.step.seq;
  if (embedding) s.add(SiteKind::vocabulary, "embedding reduce-scatter [B,S,D]", x.move(D), x.move(D));
  if (!x.step.head) return;
  s.add(SiteKind::vocabulary, "head input all-gather [B,S/t,D]", x.move(D), x.move(D));
  const int64_t chunk = kernels::linear_cross_entropy_chunk(N, x.c.vocab_size / x.t, 0);
  int64_t bytes = 0;
  for (int64_t t0 = 0; t0 < N; t0 += chunk) {
    const int64_t rows = std::min(chunk, N - t0);
    bytes += all_reduce_bytes(rows, kF32, x.t) + all_reduce_bytes(2 * rows, kF32, x.t);
  }
  s.add(SiteKind::vocabulary, "loss all-reduces of per-token max, Σexp, target logit", bytes, 0);
}

}  // namespace

int64_t all_gather_bytes(int64_t elements_per_rank, int64_t elem_bytes, int t) {
  return (t - 1) * elements_per_rank * elem_bytes;
}

int64_t reduce_scatter_bytes(int64_t elements_per_rank, int64_t elem_bytes, int t) {
  return (t - 1) * elements_per_rank * elem_bytes;
}

int64_t all_reduce_bytes(int64_t elements, int64_t elem_bytes, int t) {
  if (t <= 1 || elements == 0) return 0;
  if (elements * t <= kGatheredAllReduceLimit) return all_gather_bytes(elements, elem_bytes, t);
  const int64_t chunk = (elements + t - 1) / t;
  return reduce_scatter_bytes(chunk, elem_bytes, t) + all_gather_bytes(chunk, elem_bytes, t);
}

std::vector<VolumeSite> count_tp_volume(const nn::TransformerConfig& c, int t, const TpStepShape& step) {
  for (DType d : {c.params_dtype, c.compute_dtype, c.layernorm_compute_dtype, c.router_dense_type})
    LOOM_CHECK(d == DType::f32 || step.activation_bytes > 0, ValueError, "the counted tensor-parallel volume assumes float32 throughout; set "
               "model.params_dtype, compute_dtype, layernorm_compute_dtype and router_dense_type to float32");
  LOOM_CHECK(t >= 1 && step.seq % t == 0, ValueError, "the sequence length ", step.seq,
             " must divide by tensor_parallel ", t);
  Sites s;
  if (t == 1) return s.take();
  const Ctx x{c, t, step};
  // The main loss (embedding on the first stage, head on the last), then each MTP depth's, which
  // embeds again and runs the head on the last stage.
  embedding_head_loss_sites(s, x, step.embedding);
  if (step.head)
    for (int64_t k = 0; k < c.mtp_num_layers; ++k) embedding_head_loss_sites(s, x, true);
  const int64_t last = step.last_layer < 0 ? c.num_layers - 1 : std::min<int64_t>(step.last_layer, c.num_layers - 1);
  for (int64_t l = std::max<int64_t>(0, step.first_layer); l <= last; ++l) layer_sites(s, x, l);
  if (step.head)
    for (int64_t l = c.num_layers; l < c.num_layers + c.mtp_num_layers; ++l) layer_sites(s, x, l);
  const int64_t D = c.hidden_size;
  if (step.head) x.norm(s, D);  // decoder.final_layernorm
  for (int64_t k = 0; step.head && k < c.mtp_num_layers; ++k) {
    x.norm(s, D);  // enorm
    x.norm(s, D);  // hnorm
    s.partial_grad("MTP eh_proj", D * 2 * D, t);
    x.norm(s, D);  // final_layernorm
  }
  // The step's logged values, one f64 each: loss, the extras (balance loss, MTP loss and each
  // depth's), the grad norm's Σg².
  const int64_t extras = logged_extra_losses(c);
  const int n = step.world_size;
  const std::string scalars = n == t ? "tp" : "world";
  s.add(SiteKind::scalars, "loss and extra-loss scalars (world)", (1 + extras) * all_reduce_bytes(1, kF64, n), 0, scalars);
  s.add(SiteKind::scalars, "grad-norm scalar (world)", 0, all_reduce_bytes(1, kF64, n), scalars);
  return s.take();
}

bool logs_balance_loss(const nn::TransformerConfig& c) {
  const BalanceStatistics b = balance_statistics(c);
  return b.per_token || b.per_sequence;
}

int64_t balance_statistics_bytes(const nn::TransformerConfig& c, int64_t batch, int n) {
  const BalanceStatistics b = balance_statistics(c);
  const int64_t E = c.num_experts;
  int64_t bytes = 0;
  if (b.per_token) bytes += all_reduce_bytes(E, kF32, n) + all_reduce_bytes(E, kF64, n);
  if (b.per_sequence) bytes += all_reduce_bytes(batch * E, kF32, n) + all_reduce_bytes(batch * E, kF64, n);
  return bytes;
}

int64_t logged_extra_losses(const nn::TransformerConfig& c) {
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < c.num_layers + c.mtp_num_layers; ++l) moe_layers += c.is_moe_layer(l) ? 1 : 0;
  const BalanceStatistics b = balance_statistics(c);
  return (moe_layers > 0 && (b.per_token || b.per_sequence) ? 1 : 0) + (c.mtp_num_layers > 0 ? 1 + c.mtp_num_layers : 0);
}

const char* site_kind_name(SiteKind kind) {
  switch (kind) {
    case SiteKind::sequence: return "sequence";
    case SiteKind::latent: return "latent";
    case SiteKind::vocabulary: return "vocabulary";
    case SiteKind::grads: return "grads";
    case SiteKind::moe: return "moe";
    case SiteKind::scalars: return "scalars";
  }
  return "?";
}

int64_t total_bytes(const std::vector<VolumeSite>& sites, const std::string& group) {
  int64_t total = 0;
  for (const VolumeSite& s : sites)
    if (s.group == group) total += s.bytes();
  return total;
}

}  // namespace loom::plan
