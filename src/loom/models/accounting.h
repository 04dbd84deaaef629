// Parameter counts and training FLOPs per token, from the configuration alone (no model needed),
// for MFU: FLOPs/token = 6·N_matmul + 6·S·Σ_layers H·(d_qk + d_v), where N_matmul counts every 2-D
// weight a token goes through in a matmul (the LM head included, the input embedding not; for MoE
// only the router, the k routed experts it uses and the shared experts) and the attention term is
// the forward QKᵀ and PV products (2·S·H·d each) tripled for training, as PaLM's MFU formula writes
// it (Chowdhery et al.: 12·L·d_model·S for standard attention, causal mask not discounted).
// MTP depths add their eh_proj, layer and one more LM-head product.
#pragma once

#include <cstdint>
#include <string>

#include "loom/core/error.h"
#include "loom/models/model_args.h"

namespace loom::models {

// A product or sum of configured sizes that does not fit 64 bits. `field` is the model key to
// change (relative to the section: "hidden_size"); the message names every factor.
class SizeOverflow : public ConfigError {
 public:
  SizeOverflow(std::string field, const std::string& message) : ConfigError(message), field(std::move(field)) {}
  std::string field;
};

// a × b and a + b over sizes, checked: SizeOverflow naming `what` (e.g. "vocab_size × hidden_size")
// and `field`, the key a user would lower.
int64_t checked_mul(int64_t a, int64_t b, const char* what, const char* field);
int64_t checked_add(int64_t a, int64_t b, const char* what, const char* field);

struct ParameterCounts {
  int64_t total = 0;             // every parameter (what num_parameters() reports)
  int64_t embedding = 0;         // the input embedding table
  int64_t output_layer = 0;      // the untied LM head (0 when tied)
  int64_t mtp = 0;               // MTP layers (without the shared embedding/head)
  int64_t active_per_token = 0;  // total minus the routed experts a token does not use
  int64_t matmul_per_token = 0;  // N_matmul of the FLOPs formula (main model, no MTP)
};

// Throws SizeOverflow when the sizes' products do not fit 64 bits (ModelArgs::validate reports it).
ParameterCounts count_parameters(const ModelArgs& args);

// Training (forward + backward) FLOPs per token for sequences of `seq_length` tokens: the head's
// plus every layer's (the MTP depths' when include_mtp), the two terms below.
double training_flops_per_token(const ModelArgs& args, int64_t seq_length, bool include_mtp = true);
// The LM head's product, 6·vocab_size·hidden_size (the input embedding is a lookup, not counted).
double head_flops_per_token(const ModelArgs& args);
// Decoder layer `index` (num_layers.. are the MTP depths, with their eh_proj and head product):
// 6·its matmul weights a token uses + the attention products.
double layer_flops_per_token(const ModelArgs& args, int64_t index, int64_t seq_length);
// The forward FLOPs per token of one module of layer `index` (a path as select_module names it:
// self_attention, self_attention.core_attention, mlp, mlp.experts, mlp.shared_experts), what a
// selective recompute of it runs again in the backward; 0 for the small ones (norms, single
// projections, the router).
double module_forward_flops_per_token(const ModelArgs& args, int64_t index, int64_t seq_length,
                                      const std::string& module);

}  // namespace loom::models
