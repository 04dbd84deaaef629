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
// Speculative decoding (GenerationOptions::speculative = mtp, greedy only): after each forward
// the model's MTP layers draft the next tokens (mtp_drafter.h), the main model checks them all in
// one forward of 1 + drafts positions through the cache, every row keeps the drafts that equal
// its own greedy choices plus the main model's token after them, and the cache is truncated
// back to the kept positions. The tokens are plain greedy's; only the forwards are fewer.
// Batched rows share one cache length, so a step keeps the drafts every generating row accepted
// (the fewest); the rows that accepted more get those tokens again at the next step.
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

// How a step proposes tokens: none (one token per forward) or the model's MTP layers' drafts.
enum class Speculative { none, mtp };

struct GenerationOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  std::vector<int64_t> end_ids;  // tokens that end a row (the tokenizer's EOS); kept in its ids
  Speculative speculative = Speculative::none;
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
  // Main-model forwards summed over the rows still generating in each (the prefill included):
  // generated_tokens / row_forwards is the tokens a row gets per forward (1 without drafts).
  int64_t row_forwards = 0;
  // Speculative: the drafts the main model checked for the rows still generating, and of those
  // the ones kept (each equal to the main model's own greedy token there).
  int64_t drafted_tokens = 0, accepted_tokens = 0;
};

class TokenGenerator {
 public:
  // `max_positions`: the model's (model.max_position_embeddings); no row goes past it.
  TokenGenerator(nn::CausalLM& model, int64_t max_positions);
  std::vector<Generation> generate(const std::vector<std::vector<int64_t>>& prompts, const GenerationOptions& options,
                                   const TokenCallback& on_token = {});
  const GenerationStats& last_stats() const { return stats_; }

 private:
  std::vector<Generation> generate_speculative(const std::vector<std::vector<int64_t>>& prompts,
                                               const GenerationOptions& options, const TokenCallback& on_token);
  // Hidden states [B, n, D] (before the final norm) of `ids` [B, n] new positions, through the
  // cache, which advances by n.
  Tensor forward(const Tensor& ids, class nn::KVCache& cache);
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
