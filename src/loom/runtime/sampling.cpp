#include "loom/runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom::runtime {

int64_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, uint64_t row, uint64_t step) {
  LOOM_CHECK(o.top_p > 0 && o.top_p <= 1, ValueError, "top_p must be in (0, 1], got ", o.top_p);
  LOOM_CHECK(o.temperature >= 0 && o.top_k >= 0, ValueError, "temperature ", o.temperature, " and top_k ", o.top_k,
             " must not be negative");
  if (o.temperature == 0) return std::max_element(logits, logits + vocab) - logits;
  // Candidates by descending logit (ties by id, so the order never depends on the sort).
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const size_t keep = o.top_k > 0 ? static_cast<size_t>(std::min(o.top_k, vocab)) : order.size();
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                    [logits](int64_t a, int64_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  order.resize(keep);
  std::vector<double> p(keep);
  const double top = logits[order[0]] / o.temperature;
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i] = std::exp(logits[order[i]] / o.temperature - top);
  // The smallest prefix whose probability reaches top_p (at least one token).
  size_t n = keep;
  if (o.top_p < 1) {
    double mass = 0;
    for (n = 0; n < keep;) {
      mass += p[n++] / total;
      if (mass >= o.top_p) break;
    }
  }
  const double kept = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n), 0.0);
  const double u = stream_uniform({o.seed, stream_id("loom.sampling") + row, 0}, static_cast<int64_t>(step)) * kept;
  double mass = 0;
  for (size_t i = 0; i < n; ++i) {
    mass += p[i];
    if (u <= mass) return order[i];
  }
  return order[n - 1];
}

}  // namespace loom::runtime
