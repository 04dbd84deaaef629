// The next token from a row of logits: greedy (temperature 0), or drawn from
// softmax(logits / temperature) restricted to the top_k most likely tokens and then to the
// smallest set whose probability reaches top_p (transformers' TopK then TopP warpers), renormalised.
// The draw is Philox-uniform keyed by (seed, row, step), so a seed gives the same tokens whatever
// the thread count, batch order or machine.
#pragma once

#include <cstdint>

namespace loom::runtime {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (argmax, the first of equal maxima)
  int64_t top_k = 0;       // 0: every token
  double top_p = 1.0;      // in (0, 1]
  uint64_t seed = 0;
};

// `row` numbers the sequence (its prompt's index), `step` its generated tokens so far.
int64_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& options, uint64_t row, uint64_t step);

}  // namespace loom::runtime
