// Generation with a KV cache (nn/kv_cache.h), for `loom generate` and the samples a training run
// prints:
//
//   prefill   the prompts, left-padded to one length, through the model once (flash attention, as
//             training); each attention layer keeps its keys and values (MLA: its latent) in the
//             cache, and the last position's logits give every row's first token
//   decode    one position per step against the cache: every row's new token in, one row of
//             logits each out, until every row stopped (an end token, the caller's stop, or
//             max_new_tokens / the model's positions)
//
// Under an EvaluationGuard (nothing a training step reads is touched) and one WeightCastScope
// (bf16 weights cast once for the whole generation). On one process, or on ranks that all hold
// the whole model (FSDP/HSDP gather it per forward, every rank generating the same tokens).
//
// generate_without_cache() is the reference: every step re-runs the whole sequence through a
// logits function (runtime::Schedule::logits runs it under any layout), greedy or sampled alike.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/data/batch.h"
#include "loom/nn/causal_lm.h"
#include "loom/runtime/sampling.h"

namespace loom::runtime {

struct GenerationOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  std::vector<int64_t> end_ids;  // tokens that end a row (the tokenizer's EOS); kept in its ids
};

struct Generation {
  std::vector<int64_t> ids;   // the generated tokens (an end token included)
  std::string finish_reason;  // "stop": an end token or the caller's stop; "length": out of tokens or positions
};

// Called with each new token of a row (in row order, every step); returning true stops the row
// there (a stop string): the token is kept and the reason is "stop".
using TokenCallback = std::function<bool(size_t row, int64_t token)>;

struct GenerationStats {
  int64_t prompt_tokens = 0;     // every row's prompt
  int64_t generated_tokens = 0;  // every row's new tokens
  int64_t cache_bytes = 0;
  double prefill_s = 0, decode_s = 0;
  int64_t decode_steps = 0;      // forwards after the prefill
};

class TokenGenerator {
 public:
  // `max_positions`: the model's (model.max_position_embeddings); no row goes past it.
  TokenGenerator(nn::CausalLM& model, int64_t max_positions);
  std::vector<Generation> generate(const std::vector<std::vector<int64_t>>& prompts, const GenerationOptions& options,
                                   const TokenCallback& on_token = {});
  const GenerationStats& last_stats() const { return stats_; }

 private:
  // Logits [B, V] (fp32, host) of the last of `ids` [B, n] new positions, through the cache.
  std::vector<float> step(const Tensor& ids, class nn::KVCache& cache);

  nn::CausalLM& model_;
  int64_t max_positions_;
  GenerationStats stats_;
};

// The logits [B, S, V] of a batch of input_ids (and position_ids).
using SequenceLogits = std::function<Tensor(const data::Batch& batch)>;

// The same generation without a cache: each step runs every row's whole sequence so far (prompt
// and new tokens, left-padded to a multiple of `length_multiple` (what a context- or
// sequence-parallel layout splits), positions from each row's first token) and samples from its
// last position. Every rank of a layout calls it with the same prompts.
std::vector<Generation> generate_without_cache(const SequenceLogits& logits,
                                               const std::vector<std::vector<int64_t>>& prompts,
                                               const GenerationOptions& options, int64_t max_positions,
                                               int64_t length_multiple = 1);

}  // namespace loom::runtime
