#include "loom/runtime/generation.h"

#include <algorithm>
#include <chrono>

#include "loom/autograd/checkpoint.h"
#include "loom/core/error.h"
#include "loom/nn/kv_cache.h"
#include "loom/ops/shape.h"
#include "loom/ops/weight_cast.h"
#include "loom/runtime/mtp_drafter.h"

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

// The prompts left-padded to the longest, L: ids [B, L] row-major and each row's padding.
struct Padded {
  int64_t length = 0;
  std::vector<int64_t> pad, ids;
};

Padded left_pad(const std::vector<std::vector<int64_t>>& prompts) {
  Padded p;
  for (const auto& prompt : prompts) p.length = std::max<int64_t>(p.length, static_cast<int64_t>(prompt.size()));
  for (const auto& prompt : prompts) {
    p.pad.push_back(p.length - static_cast<int64_t>(prompt.size()));
    p.ids.insert(p.ids.end(), static_cast<size_t>(p.pad.back()), prompt.front());  // any id: padding is masked off
    p.ids.insert(p.ids.end(), prompt.begin(), prompt.end());
  }
  return p;
}

// The most tokens a generating row can still take (max_new_tokens and the model's positions): a
// step drafts one fewer, none at the last step, whose one token ends every row.
int64_t tokens_left(const Rows& rows, const std::vector<std::vector<int64_t>>& prompts, int64_t max_new_tokens,
                    int64_t max_positions) {
  int64_t room = 0;
  for (size_t r = 0; r < prompts.size(); ++r)
    if (!rows.done[r]) {
      const int64_t taken = static_cast<int64_t>(rows.out[r].ids.size());
      room = std::max(room, std::min(max_new_tokens - taken, max_positions - static_cast<int64_t>(prompts[r].size()) - taken));
    }
  return room;
}

}  // namespace

TokenGenerator::TokenGenerator(nn::CausalLM& model, int64_t max_positions)
    : model_(model), max_positions_(max_positions) {}

Tensor TokenGenerator::forward(const Tensor& ids, nn::KVCache& cache) {
  const int64_t n = ids.size(1);
  Tensor hidden = model_.decoder().forward(model_.embed(ids), cache.positions(n), Tensor());
  cache.advance(n);
  return hidden;
}

std::vector<float> TokenGenerator::step(const Tensor& ids, nn::KVCache& cache) {
  const Tensor hidden = forward(ids, cache);
  return model_.head_logits(ops::narrow(hidden, 1, hidden.size(1) - 1, 1)).contiguous().to_float_vector();
}

std::vector<Generation> TokenGenerator::generate(const std::vector<std::vector<int64_t>>& prompts,
                                                 const GenerationOptions& o, const TokenCallback& on_token) {
  check_prompts(prompts, max_positions_);
  LOOM_CHECK(o.max_new_tokens >= 1, ValueError, "max_new_tokens must be at least 1, got ", o.max_new_tokens);
  autograd::EvaluationGuard evaluating;
  ops::WeightCastScope weight_casts;
  stats_ = {};
  for (const auto& p : prompts) stats_.prompt_tokens += static_cast<int64_t>(p.size());
  if (o.speculative == Speculative::mtp) return generate_speculative(prompts, o, on_token);
  const int64_t B = static_cast<int64_t>(prompts.size());
  const Padded padded = left_pad(prompts);
  const int64_t L = padded.length;
  nn::KVCache cache(L + o.max_new_tokens, padded.pad);
  model_.attach_cache(&cache);
  struct Detach {
    nn::CausalLM& m;
    ~Detach() { m.attach_cache(nullptr); }
  } detach{model_};

  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits = step(Tensor::from_vector(padded.ids, {B, L}), cache);
  stats_.prefill_s = seconds_since(t0);
  const int64_t V = static_cast<int64_t>(logits.size()) / B;
  Rows rows(prompts.size());
  t0 = std::chrono::steady_clock::now();
  for (int64_t t = 0;; ++t) {
    stats_.row_forwards += static_cast<int64_t>(rows.left);
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

std::vector<Generation> TokenGenerator::generate_speculative(const std::vector<std::vector<int64_t>>& prompts,
                                                             const GenerationOptions& o, const TokenCallback& on_token) {
  LOOM_CHECK(o.sampling.temperature == 0, ValueError, "speculative decoding with the MTP layers is greedy only (a "
             "draft is kept when it equals the main model's argmax), got temperature ", o.sampling.temperature,
             ": use temperature 0, or sample without speculative decoding");
  LOOM_CHECK(!model_.mtp_layers().empty(), ValueError, "speculative decoding drafts with the model's MTP layers and "
             "this model has none (model.mtp_num_layers / num_nextn_predict_layers is 0): generate without it, or "
             "load a model trained with MTP layers");
  const int64_t B = static_cast<int64_t>(prompts.size());
  const Padded padded = left_pad(prompts);
  const int64_t L = padded.length;
  // A step writes at most the positions the rows can still take, so the plain capacity suffices.
  nn::KVCache cache(L + o.max_new_tokens, padded.pad);
  MtpDrafter drafter(model_, L + o.max_new_tokens, padded.pad);
  model_.attach_cache(&cache, &drafter.cache());
  struct Detach {
    nn::CausalLM& m;
    ~Detach() { m.attach_cache(nullptr); }
  } detach{model_};

  auto t0 = std::chrono::steady_clock::now();
  Tensor committed = forward(Tensor::from_vector(padded.ids, {B, L}), cache);
  std::vector<float> logits = model_.head_logits(ops::narrow(committed, 1, L - 1, 1)).contiguous().to_float_vector();
  stats_.prefill_s = seconds_since(t0);
  const int64_t V = static_cast<int64_t>(logits.size()) / B;
  Rows rows(prompts.size());
  auto take = [&](size_t r, const float* row_logits) {
    const int64_t position = static_cast<int64_t>(prompts[r].size() + rows.out[r].ids.size());
    rows.take(r, row_logits, V, position, o, max_positions_, on_token);
  };
  // Each row's tokens by cache position: padding, prompt, then every token a step kept (a row
  // that stopped keeps the main model's tokens too, so that every row has one length).
  std::vector<std::vector<int64_t>> seq(prompts.size());
  stats_.row_forwards += B;
  for (size_t r = 0; r < prompts.size(); ++r) {
    const auto row = padded.ids.begin() + static_cast<std::ptrdiff_t>(r) * L;
    seq[r].assign(row, row + L);
    take(r, logits.data() + static_cast<int64_t>(r) * V);
    seq[r].push_back(rows.out[r].ids.back());
  }

  t0 = std::chrono::steady_clock::now();
  while (rows.left > 0) {
    const int64_t room = tokens_left(rows, prompts, o.max_new_tokens, max_positions_);
    const std::vector<std::vector<int64_t>> drafts =
        room > 1 ? drafter.draft(committed, seq) : std::vector<std::vector<int64_t>>(prompts.size());
    const int64_t n = std::min(drafter.depth(), room - 1), N = static_cast<int64_t>(seq[0].size());
    std::vector<int64_t> ids;
    for (size_t r = 0; r < prompts.size(); ++r) {
      ids.push_back(seq[r].back());
      ids.insert(ids.end(), drafts[r].begin(), drafts[r].begin() + n);
    }
    // One forward checks every draft: position m's logits give the main model's token after it.
    const Tensor hidden = forward(Tensor::from_vector(ids, {B, 1 + n}), cache);
    logits = model_.head_logits(hidden).contiguous().to_float_vector();
    ++stats_.decode_steps;
    auto at = [&](size_t r, int64_t m) { return logits.data() + (static_cast<int64_t>(r) * (1 + n) + m) * V; };
    // The rows share one cache length: keep the drafts every generating row accepted.
    int64_t kept = n;
    for (size_t r = 0; r < prompts.size(); ++r) {
      int64_t a = 0;
      while (!rows.done[r] && a < n && drafts[r][static_cast<size_t>(a)] == sample_token(at(r, a), V, {}, 0, 0)) ++a;
      if (!rows.done[r]) kept = std::min(kept, a);
    }
    cache.truncate(N + kept);
    for (size_t r = 0; r < prompts.size(); ++r) {
      const size_t before = rows.out[r].ids.size();
      const bool generating = !rows.done[r];
      for (int64_t m = 0; m <= kept; ++m) {
        take(r, at(r, m));
        seq[r].push_back(sample_token(at(r, m), V, {}, 0, 0));
      }
      if (!generating) continue;
      ++stats_.row_forwards;
      stats_.drafted_tokens += n;
      stats_.accepted_tokens += static_cast<int64_t>(rows.out[r].ids.size() - before) - 1;
    }
    committed = ops::narrow(hidden, 1, 0, kept + 1);
  }
  stats_.decode_s = seconds_since(t0);
  stats_.cache_bytes = cache.bytes() + drafter.cache().bytes();
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
