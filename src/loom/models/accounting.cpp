#include "loom/models/accounting.h"

namespace loom::models {

namespace {

struct LayerCounts {
  int64_t params = 0;          // all parameters of the layer
  int64_t matmul_active = 0;   // 2-D weights a token multiplies with
  int64_t inactive = 0;        // routed-expert parameters a token skips
};

int64_t norm_params(const ModelArgs& a, int64_t dim) {
  return a.normalization == nn::NormKind::layer_norm ? 2 * dim : dim;
}

int64_t gated_mlp_params(const ModelArgs& a, int64_t ffn, int64_t* matmul) {
  const int64_t D = a.hidden_size, width = a.gated_linear_unit ? 2 * ffn : ffn;
  const int64_t w = width * D + ffn * D;
  *matmul += w;
  return w + (a.mlp_bias ? width + D : 0);
}

LayerCounts layer_counts(const ModelArgs& a, int64_t index) {
  LayerCounts c;
  const int64_t D = a.hidden_size, H = a.num_attention_heads;
  c.params += 2 * norm_params(a, D);
  int64_t attn = 0, bias = 0;
  if (a.multi_latent_attention) {
    const int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    if (a.q_lora_rank > 0) {
      attn += a.q_lora_rank * D + H * qk * a.q_lora_rank;
      c.params += norm_params(a, a.q_lora_rank);
      if (a.attention_bias) bias += a.q_lora_rank;
    } else {
      attn += H * qk * D;
    }
    attn += (a.kv_lora_rank + a.qk_rope_head_dim) * D + H * (a.qk_nope_head_dim + a.v_head_dim) * a.kv_lora_rank +
            D * H * a.v_head_dim;
    c.params += norm_params(a, a.kv_lora_rank);
    if (a.attention_bias) bias += a.kv_lora_rank + a.qk_rope_head_dim + D;
  } else {
    const int64_t q = H * a.head_dim, kv = a.num_key_value_heads * a.head_dim;
    attn += q * D + 2 * kv * D + D * q;
    if (a.attention_bias) bias += q + 2 * kv + D;
    if (a.qk_layernorm) c.params += 2 * norm_params(a, a.head_dim);
  }
  c.params += attn + bias;
  c.matmul_active += attn;
  if (a.is_moe_layer(index)) {
    const int64_t E = a.num_experts, F = a.moe_intermediate_size;
    const int64_t expert = 3 * D * F;
    c.params += E * D + E * expert;  // router + experts (the bias is a buffer)
    c.matmul_active += E * D + a.moe_topk * expert;
    c.inactive += (E - a.moe_topk) * expert;
    if (a.shared_expert_intermediate_size > 0) c.params += gated_mlp_params(a, a.shared_expert_intermediate_size, &c.matmul_active);
  } else {
    c.params += gated_mlp_params(a, a.intermediate_size, &c.matmul_active);
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
  p.embedding = V * D;
  p.output_layer = a.tie_word_embeddings ? 0 : V * D;
  int64_t inactive = 0;
  p.matmul_per_token = V * D;  // the LM head multiplies whether tied or not
  for (int64_t i = 0; i < a.num_layers; ++i) {
    LayerCounts c = layer_counts(a, i);
    p.total += c.params;
    p.matmul_per_token += c.matmul_active;
    inactive += c.inactive;
  }
  for (int64_t k = 0; k < a.mtp_num_layers; ++k) {
    LayerCounts c = layer_counts(a, a.num_layers + k);
    p.mtp += c.params + 3 * norm_params(a, D) + 2 * D * D;  // enorm, hnorm, final norm, eh_proj
    inactive += c.inactive;
  }
  p.total += p.embedding + p.output_layer + norm_params(a, D) + p.mtp;
  p.active_per_token = p.total - inactive;
  return p;
}

double training_flops_per_token(const ModelArgs& a, int64_t seq, bool include_mtp) {
  ParameterCounts p = count_parameters(a);
  double flops = 6.0 * static_cast<double>(p.matmul_per_token) + attention_flops(a, seq) * a.num_layers;
  if (include_mtp)
    for (int64_t k = 0; k < a.mtp_num_layers; ++k) {
      LayerCounts c = layer_counts(a, a.num_layers + k);
      const double matmul = static_cast<double>(c.matmul_active + 2 * a.hidden_size * a.hidden_size +
                                                a.vocab_size * a.hidden_size);
      flops += 6.0 * matmul + attention_flops(a, seq);
    }
  return flops;
}

}  // namespace loom::models
