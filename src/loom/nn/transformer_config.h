// Everything the decoder layers need to know, typed. models::ModelArgs fills it from the `model:`
// section (HF config.json names or MindFormers aliases, docs/models.md "Keys") and adds the
// registry facts; nn layers read only this struct.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/ops/rope.h"

namespace loom::nn {

enum class NormKind { rms_norm, layer_norm };
// model.hidden_act (other_training_features.md §3): gelu, silu, fusedswiglu. silu and
// fusedswiglu with a gated MLP both run the fused swiglu op.
enum class Activation { silu, gelu, fusedswiglu };
enum class ScoreFunction { softmax, sigmoid };
// Extra rope scaling the rope op does not build itself (HF "llama3" frequency bands).
struct Llama3RopeScaling {
  bool enabled = false;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct TransformerConfig {
  // ---- Sizes ----------------------------------------------------------------------------
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // GQA groups (num_query_groups)
  int64_t head_dim = 0;             // kv_channels
  int64_t intermediate_size = 0;    // dense MLP width (ffn_hidden_size)
  int64_t max_position_embeddings = 4096;
  int64_t seq_length = 0;           // 0: unknown (rope tables grow on demand)

  // ---- Norms, activation, biases -----------------------------------------------------------
  NormKind normalization = NormKind::rms_norm;
  double norm_epsilon = 1e-6;
  Activation activation = Activation::silu;
  bool gated_linear_unit = true;  // linear_fc1 = [gate rows; up rows]
  bool attention_bias = false;    // biases on linear_q/k/v and linear_proj (HF attention_bias)
  bool mlp_bias = false;          // biases on linear_fc1/linear_fc2 (HF Llama mlp_bias)
  bool qk_layernorm = false;      // per-head RMSNorm of q and k before RoPE (Qwen3)
  bool tie_word_embeddings = false;
  double init_std = 0.02;         // normal init of every matrix (initializer_range)

  // ---- RoPE ----------------------------------------------------------------------------
  double rope_theta = 10000.0;
  ops::RopeScaling rope_scaling;
  Llama3RopeScaling llama3_rope;
  bool rope_interleave = false;   // pairs (2i, 2i+1) as the DeepSeek reference

  // ---- Multi-latent attention (DeepSeek-V3) -----------------------------------------------
  bool multi_latent_attention = false;
  int64_t q_lora_rank = 0;  // 0: no q compression (linear_q)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  // ---- Mixture of experts ----------------------------------------------------------------
  int64_t num_experts = 0;  // 0: every layer dense
  int64_t moe_topk = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared experts
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;        // DeepSeek: layer i (>= first_k) is MoE iff i % freq == 0
  int64_t decoder_sparse_step = 1;   // Qwen3-MoE: layer i is MoE iff (i + 1) % step == 0
  std::vector<int64_t> mlp_only_layers;
  int64_t moe_router_num_groups = 0;  // n_group; 0 or 1: no group limit
  int64_t moe_router_group_topk = 0;  // topk_group
  double routed_scaling_factor = 1.0;
  ScoreFunction score_function = ScoreFunction::softmax;
  bool norm_topk_prob = true;
  bool moe_router_enable_expert_bias = false;
  double moe_router_bias_update_rate = 1e-3;
  // Kinds: "aux_loss" (micro-batch), "seq_aux_loss" (per sequence), "gbs_aux_loss" (counts
  // accumulated over the step's micro-batches); coefficient per kind.
  std::vector<std::string> moe_load_balancing_types;
  std::vector<double> moe_aux_loss_coeffs;

  // ---- Multi-token prediction ------------------------------------------------------------
  int64_t mtp_num_layers = 0;
  double mtp_loss_scaling_factor = 0.1;

  // ---- Precision (other_training_features.md §4) -------------------------------------------
  DType params_dtype = DType::f32;
  DType compute_dtype = DType::bf16;
  DType layernorm_compute_dtype = DType::f32;
  DType softmax_compute_dtype = DType::f32;
  DType rotary_dtype = DType::f32;
  DType router_dense_type = DType::f32;

  // ---- Derived ---------------------------------------------------------------------------
  bool is_moe_layer(int64_t layer) const;  // decoder layer index; MTP layers use num_layers + k
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t rope_table_positions() const {
    return seq_length > 0 ? seq_length : max_position_embeddings;
  }
};

}  // namespace loom::nn
