#include "loom/runtime/generation.h"

#include <algorithm>
#include <chrono>

#include "loom/autograd/checkpoint.h"
#include "loom/core/error.h"
#include "loom/nn/kv_cache.h"
#include "loom/ops/shape.h"
#include "loom/ops/weight_cast.h"

namespace loom::runtime {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check_prompts(const std::vector<std::vector<int64_t>>& prompts, int64_t max_positions) {
  LOOM_CHECK(!prompts.empty(), ValueError, "generation needs at least one prompt");
  for (size_t i = 0; i < prompts.size(); ++i) {
    LOOM_CHECK(!prompts[i].empty(), DataError, "prompt ", i + 1, " is empty: give it at least one token");
    LOOM_CHECK(static_cast<int64_t>(prompts[i].size()) < max_positions, DataError, "prompt ", i + 1, " has ",
               prompts[i].size(), " tokens, and the model has ", max_positions,
               " positions (max_position_embeddings): shorten the prompt so a token can follow it");
  }
}

// Per row: its running state while tokens are drawn.
struct Rows {
  std::vector<Generation> out;
  std::vector<bool> done;
  size_t left = 0;

  explicit Rows(size_t n) : out(n), done(n, false), left(n) {}
  // Takes row r's next token (at `position`, counted from its first token) from its logits; the
  // row is done after an end token, the caller's stop, or when no token can follow this one.
  void take(size_t r, const float* logits, int64_t vocab, int64_t position, const GenerationOptions& o,
            int64_t max_positions, const TokenCallback& on_token) {
    if (done[r]) return;
    const int64_t token = sample_token(logits, vocab, o.sampling, r, out[r].ids.size());
    out[r].ids.push_back(token);
    const bool ends = std::find(o.end_ids.begin(), o.end_ids.end(), token) != o.end_ids.end();
    const bool stopped = (on_token && on_token(r, token)) || ends;
    const bool full = static_cast<int64_t>(out[r].ids.size()) >= o.max_new_tokens || position + 1 >= max_positions;
    if (stopped || full) {
      out[r].finish_reason = stopped ? "stop" : "length";
      done[r] = true;
      --left;
    }
  }
};

}  // namespace

TokenGenerator::TokenGenerator(nn::CausalLM& model, int64_t max_positions)
    : model_(model), max_positions_(max_positions) {}

std::vector<float> TokenGenerator::step(const Tensor& ids, nn::KVCache& cache) {
  const int64_t n = ids.size(1);
  const Tensor hidden = model_.decoder().forward(model_.embed(ids), cache.positions(n), Tensor());
  const Tensor last = ops::narrow(hidden, 1, n - 1, 1);
  cache.advance(n);
  return model_.head_logits(last).contiguous().to_float_vector();
}

std::vector<Generation> TokenGenerator::generate(const std::vector<std::vector<int64_t>>& prompts,
                                                 const GenerationOptions& o, const TokenCallback& on_token) {
  check_prompts(prompts, max_positions_);
  LOOM_CHECK(o.max_new_tokens >= 1, ValueError, "max_new_tokens must be at least 1, got ", o.max_new_tokens);
  autograd::EvaluationGuard evaluating;
  ops::WeightCastScope weight_casts;
  stats_ = {};
  const int64_t B = static_cast<int64_t>(prompts.size());
  int64_t L = 0;
  for (const auto& p : prompts) L = std::max<int64_t>(L, static_cast<int64_t>(p.size()));
  std::vector<int64_t> pad, ids;
  for (const auto& p : prompts) {
    pad.push_back(L - static_cast<int64_t>(p.size()));
    ids.insert(ids.end(), static_cast<size_t>(pad.back()), p.front());  // any id: padding is masked off
    ids.insert(ids.end(), p.begin(), p.end());
    stats_.prompt_tokens += static_cast<int64_t>(p.size());
  }
  nn::KVCache cache(L + o.max_new_tokens, pad);
  model_.attach_cache(&cache);
  struct Detach {
    nn::CausalLM& m;
    ~Detach() { m.attach_cache(nullptr); }
  } detach{model_};

  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits = step(Tensor::from_vector(ids, {B, L}), cache);
  stats_.prefill_s = seconds_since(t0);
  const int64_t V = static_cast<int64_t>(logits.size()) / B;
  Rows rows(prompts.size());
  t0 = std::chrono::steady_clock::now();
  for (int64_t t = 0;; ++t) {
    std::vector<int64_t> next(static_cast<size_t>(B));
    for (size_t r = 0; r < prompts.size(); ++r) {
      const int64_t position = static_cast<int64_t>(prompts[r].size()) + t;
      rows.take(r, logits.data() + static_cast<int64_t>(r) * V, V, position, o, max_positions_, on_token);
      next[r] = rows.out[r].ids.empty() ? 0 : rows.out[r].ids.back();
    }
    if (rows.left == 0) break;
    logits = step(Tensor::from_vector(next, {B, 1}), cache);
    ++stats_.decode_steps;
  }
  stats_.decode_s = seconds_since(t0);
  stats_.cache_bytes = cache.bytes();
  for (const Generation& g : rows.out) stats_.generated_tokens += static_cast<int64_t>(g.ids.size());
  return std::move(rows.out);
}

std::vector<Generation> generate_without_cache(const SequenceLogits& logits,
                                               const std::vector<std::vector<int64_t>>& prompts,
                                               const GenerationOptions& o, int64_t max_positions,
                                               int64_t length_multiple) {
  check_prompts(prompts, max_positions);
  autograd::EvaluationGuard evaluating;
  ops::WeightCastScope weight_casts;
  const int64_t B = static_cast<int64_t>(prompts.size());
  std::vector<std::vector<int64_t>> seqs = prompts;
  Rows rows(prompts.size());
  while (rows.left > 0) {
    int64_t L = 0;
    for (const auto& s : seqs) L = std::max<int64_t>(L, static_cast<int64_t>(s.size()));
    L = (L + length_multiple - 1) / length_multiple * length_multiple;
    std::vector<int64_t> ids, ends;
    std::vector<int32_t> positions;
    for (const auto& s : seqs) {
      const int64_t pad = L - static_cast<int64_t>(s.size());
      for (int64_t i = 0; i < L; ++i) {
        ids.push_back(i < pad ? s.front() : s[static_cast<size_t>(i - pad)]);
        positions.push_back(static_cast<int32_t>(std::max<int64_t>(i - pad, 0)));
      }
      ends.push_back(pad);
      ends.push_back(L);
    }
    data::Batch batch;
    batch.input_ids = Tensor::from_vector(ids, {B, L}, DType::i32);
    batch.position_ids = Tensor::from_vector(positions, {B, L});
    batch.document_ends = Tensor::from_vector(ends, {B, 2}, DType::i32);
    const Tensor out = logits(batch);
    const Tensor last = out.narrow(1, L - 1, 1).contiguous();
    const std::vector<float> values = last.to_float_vector();
    const int64_t V = last.size(2);
    for (size_t r = 0; r < seqs.size(); ++r) {
      if (rows.done[r]) continue;
      const int64_t position = static_cast<int64_t>(seqs[r].size());
      rows.take(r, values.data() + static_cast<int64_t>(r) * V, V, position, o, max_positions, {});
      seqs[r].push_back(rows.out[r].ids.back());
    }
  }
  return std::move(rows.out);
}

}  // namespace loom::runtime
