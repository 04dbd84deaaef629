#include "loom/kernels/tiling.h"

#include <algorithm>

namespace loom::kernels {

int64_t linear_cross_entropy_chunk(int64_t n, int64_t v, int64_t requested) {
  if (n <= 0) return 1;
  if (requested > 0) return std::min(requested, n);
  const int64_t target = (int64_t{1} << 23) / std::max<int64_t>(v, 1);
  return std::clamp<int64_t>(target, 16, n);
}

}  // namespace loom::kernels
