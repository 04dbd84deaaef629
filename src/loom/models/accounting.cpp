#include "loom/models/accounting.h"

#include <string>

namespace loom::models {

int64_t checked_mul(int64_t a, int64_t b, const char* what, const char* field) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out))
    throw SizeOverflow(field, detail::concat(what, " = ", a, " × ", b, " overflows 64 bits: the sizes are far beyond any model "
                                     "that fits in memory; lower ", field));
  return out;
}

int64_t checked_add(int64_t a, int64_t b, const char* what, const char* field) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out))
    throw SizeOverflow(field, detail::concat(what, " = ", a, " + ", b, " overflows 64 bits: the sizes are far beyond any model "
                                     "that fits in memory; lower ", field));
  return out;
}

namespace {

// Short names for the checked arithmetic below; the field named is the one a user would lower.
int64_t mul(int64_t a, int64_t b, const char* what, const char* field = "hidden_size") {
  return checked_mul(a, b, what, field);
}
int64_t add(int64_t a, int64_t b, const char* what = "the parameter count", const char* field = "hidden_size") {
  return checked_add(a, b, what, field);
}

struct LayerCounts {
  int64_t params = 0;          // all parameters of the layer
  int64_t matmul_active = 0;   // 2-D weights a token multiplies with
  int64_t inactive = 0;        // routed-expert parameters a token skips
  // The parts of matmul_active by module (the rest is the dense MLP's or the router's).
  int64_t attention_matmul = 0, routed_matmul = 0, shared_matmul = 0;
};

int64_t norm_params(const ModelArgs& a, int64_t dim) {
  return a.normalization == nn::NormKind::layer_norm ? mul(2, dim, "2 × norm width") : dim;
}

int64_t gated_mlp_params(const ModelArgs& a, int64_t ffn, int64_t* matmul) {
  const int64_t D = a.hidden_size;
  const int64_t width = a.gated_linear_unit ? mul(2, ffn, "2 × intermediate_size", "intermediate_size") : ffn;
  const int64_t w = add(mul(width, D, "MLP width × hidden_size", "intermediate_size"),
                        mul(ffn, D, "intermediate_size × hidden_size", "intermediate_size"));
  *matmul = add(*matmul, w);
  return add(w, a.mlp_bias ? add(width, D) : 0);
}

LayerCounts layer_counts(const ModelArgs& a, int64_t index) {
  LayerCounts c;
  const int64_t D = a.hidden_size, H = a.num_attention_heads;
  c.params = add(c.params, mul(2, norm_params(a, D), "2 × hidden_size"));
  int64_t attn = 0, bias = 0;
  if (a.multi_latent_attention) {
    const int64_t qk = add(a.qk_nope_head_dim, a.qk_rope_head_dim, "qk_nope_head_dim + qk_rope_head_dim",
                           "qk_nope_head_dim");
    const int64_t hqk = mul(H, qk, "num_attention_heads × (qk_nope_head_dim + qk_rope_head_dim)", "num_attention_heads");
    if (a.q_lora_rank > 0) {
      attn = add(mul(a.q_lora_rank, D, "q_lora_rank × hidden_size", "q_lora_rank"),
                 mul(hqk, a.q_lora_rank, "num_attention_heads × qk_head_dim × q_lora_rank", "q_lora_rank"));
      c.params = add(c.params, norm_params(a, a.q_lora_rank));
      if (a.attention_bias) bias = add(bias, a.q_lora_rank);
    } else {
      attn = mul(hqk, D, "num_attention_heads × qk_head_dim × hidden_size");
    }
    const int64_t kv_down = mul(add(a.kv_lora_rank, a.qk_rope_head_dim), D,
                                "(kv_lora_rank + qk_rope_head_dim) × hidden_size", "kv_lora_rank");
    const int64_t kv_up = mul(mul(H, add(a.qk_nope_head_dim, a.v_head_dim), "num_attention_heads × head dims",
                                  "num_attention_heads"),
                              a.kv_lora_rank, "num_attention_heads × head dims × kv_lora_rank", "kv_lora_rank");
    const int64_t proj = mul(mul(D, H, "hidden_size × num_attention_heads"), a.v_head_dim,
                             "hidden_size × num_attention_heads × v_head_dim");
    attn = add(add(add(attn, kv_down), kv_up), proj);
    c.params = add(c.params, norm_params(a, a.kv_lora_rank));
    if (a.attention_bias) bias = add(bias, add(add(a.kv_lora_rank, a.qk_rope_head_dim), D));
  } else {
    const int64_t q = mul(H, a.head_dim, "num_attention_heads × head_dim", "num_attention_heads");
    const int64_t kv = mul(a.num_key_value_heads, a.head_dim, "num_key_value_heads × head_dim", "num_key_value_heads");
    const int64_t qd = mul(q, D, "num_attention_heads × head_dim × hidden_size");
    attn = add(add(qd, mul(2, mul(kv, D, "num_key_value_heads × head_dim × hidden_size"), "2 × kv projection")), qd);
    if (a.attention_bias) bias = add(add(q, mul(2, kv, "2 × kv width")), D);
    if (a.qk_layernorm) c.params = add(c.params, mul(2, norm_params(a, a.head_dim), "2 × head_dim", "head_dim"));
  }
  c.params = add(c.params, add(attn, bias));
  c.matmul_active = add(c.matmul_active, attn);
  c.attention_matmul = attn;
  if (a.is_moe_layer(index)) {
    const int64_t E = a.num_experts, F = a.moe_intermediate_size;
    const int64_t expert = mul(3, mul(D, F, "hidden_size × moe_intermediate_size", "moe_intermediate_size"),
                               "3 × hidden_size × moe_intermediate_size", "moe_intermediate_size");
    const int64_t router = mul(E, D, "n_routed_experts × hidden_size", "n_routed_experts");
    const int64_t experts = mul(E, expert, "n_routed_experts × expert size", "n_routed_experts");
    c.params = add(c.params, add(router, experts));  // router + experts (the bias is a buffer)
    c.matmul_active = add(c.matmul_active, add(router, mul(a.moe_topk, expert, "num_experts_per_tok × expert size",
                                                           "num_experts_per_tok")));
    c.inactive = add(c.inactive, mul(E - a.moe_topk, expert, "unused experts × expert size", "n_routed_experts"));
    c.routed_matmul = mul(a.moe_topk, expert, "num_experts_per_tok × expert size", "num_experts_per_tok");
    if (a.shared_expert_intermediate_size > 0) {
      const int64_t before = c.matmul_active;
      c.params = add(c.params, gated_mlp_params(a, a.shared_expert_intermediate_size, &c.matmul_active));
      c.shared_matmul = c.matmul_active - before;
    }
  } else {
    c.params = add(c.params, gated_mlp_params(a, a.intermediate_size, &c.matmul_active));
  }
  return c;
}

double attention_flops(const ModelArgs& a, int64_t seq) {
  const double H = static_cast<double>(a.num_attention_heads);
  const double dqk = a.multi_latent_attention ? static_cast<double>(a.qk_nope_head_dim + a.qk_rope_head_dim)
                                              : static_cast<double>(a.head_dim);
  const double dv = a.multi_latent_attention ? static_cast<double>(a.v_head_dim) : static_cast<double>(a.head_dim);
  return 6.0 * static_cast<double>(seq) * H * (dqk + dv);
}

}  // namespace

ParameterCounts count_parameters(const ModelArgs& a) {
  ParameterCounts p;
  const int64_t D = a.hidden_size, V = a.vocab_size;
  p.embedding = mul(V, D, "vocab_size × hidden_size", "vocab_size");
  p.output_layer = a.tie_word_embeddings ? 0 : p.embedding;
  int64_t inactive = 0;
  p.matmul_per_token = p.embedding;  // the LM head multiplies whether tied or not
  const char* layers = "num_hidden_layers × parameters per layer";
  for (int64_t i = 0; i < a.num_layers; ++i) {
    LayerCounts c = layer_counts(a, i);
    p.total = add(p.total, c.params, layers, "num_hidden_layers");
    p.matmul_per_token = add(p.matmul_per_token, c.matmul_active, layers, "num_hidden_layers");
    inactive = add(inactive, c.inactive, layers, "num_hidden_layers");
  }
  for (int64_t k = 0; k < a.mtp_num_layers; ++k) {
    LayerCounts c = layer_counts(a, a.num_layers + k);
    const int64_t extra = add(mul(3, norm_params(a, D), "3 × hidden_size"),
                              mul(2, mul(D, D, "hidden_size × hidden_size"), "2 × hidden_size²"));
    p.mtp = add(p.mtp, add(c.params, extra), "MTP parameters", "num_nextn_predict_layers");  // enorm, hnorm, final norm, eh_proj
    inactive = add(inactive, c.inactive, "MTP parameters", "num_nextn_predict_layers");
  }
  p.total = add(add(add(add(p.total, p.embedding), p.output_layer), norm_params(a, D)), p.mtp);
  p.active_per_token = p.total - inactive;
  return p;
}

double head_flops_per_token(const ModelArgs& a) {
  return 6.0 * static_cast<double>(mul(a.vocab_size, a.hidden_size, "vocab_size × hidden_size", "vocab_size"));
}

double layer_flops_per_token(const ModelArgs& a, int64_t index, int64_t seq) {
  LayerCounts c = layer_counts(a, index);
  double flops = 6.0 * static_cast<double>(c.matmul_active) + attention_flops(a, seq);
  if (index >= a.num_layers)  // an MTP depth: its eh_proj and one more LM-head product
    flops += 6.0 * static_cast<double>(2 * a.hidden_size * a.hidden_size) + head_flops_per_token(a);
  return flops;
}

double module_forward_flops_per_token(const ModelArgs& a, int64_t index, int64_t seq, const std::string& module) {
  const LayerCounts c = layer_counts(a, index);
  const double core = attention_flops(a, seq) / 3.0;
  if (module == "self_attention") return 2.0 * static_cast<double>(c.attention_matmul) + core;
  if (module == "self_attention.core_attention") return core;
  if (module == "mlp") return 2.0 * static_cast<double>(c.matmul_active - c.attention_matmul);
  if (module == "mlp.experts") return 2.0 * static_cast<double>(c.routed_matmul);
  if (module == "mlp.shared_experts") return 2.0 * static_cast<double>(c.shared_matmul);
  return 0;  // norms, single projections, the router, the dispatcher: small against the above
}

double training_flops_per_token(const ModelArgs& a, int64_t seq, bool include_mtp) {
  double flops = head_flops_per_token(a);
  const int64_t layers = a.num_layers + (include_mtp ? a.mtp_num_layers : 0);
  for (int64_t i = 0; i < layers; ++i) flops += layer_flops_per_token(a, i, seq);
  return flops;
}

}  // namespace loom::models
