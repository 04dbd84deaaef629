// Helpers shared by the attention kernel tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "loom/core/tensor.h"

namespace loom::testing {

// The ranges a causal mask with q_offset and per-sample document ends gives each row.
inline Tensor ranges_of(int64_t B, int64_t Sq, int64_t Sk, int64_t q_offset, const std::vector<std::vector<int64_t>>& ends) {
  std::vector<int64_t> r;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Sq; ++i) {
      const int64_t p = i + q_offset;
      int64_t lo = 0, hi = std::clamp<int64_t>(p + 1, 0, Sk);
      const auto& e = ends[static_cast<size_t>(b)];
      if (p < 0 || p >= e.back()) {
        hi = 0;
      } else {
        size_t d = 0;
        while (e[d] <= p) ++d;
        lo = d ? e[d - 1] : 0;
        hi = std::min(hi, e[d]);
      }
      if (hi <= lo) lo = hi = 0;
      r.push_back(lo);
      r.push_back(hi);
    }
  return Tensor::from_vector(r, {B, Sq, 2});
}

}  // namespace loom::testing
