// attention_merge (cpu/attention.h): one block's partial attention folded into a running result
// by log-sum-exp, for context parallelism's ring.
#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/attention.h"

namespace loom::kernels::cpu {
namespace {

template <typename T>
void merge_impl(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  const int64_t B = out.size(0), Sq = out.size(1), H = out.size(2), Dv = out.size(3);
  const Tensor bo = block_out.dtype() == out.dtype() ? block_out.contiguous() : block_out.to(out.dtype()).contiguous();
  const Tensor bl = block_lse.dtype() == lse.dtype() ? block_lse.contiguous() : block_lse.to(lse.dtype()).contiguous();
  T* o = out.data<T>();
  T* l = lse.data<T>();
  const T* po = bo.data<T>();
  const T* pl = bl.data<T>();
  const T neg_inf = -std::numeric_limits<T>::infinity();
  parallel_for(0, B * Sq, std::max<int64_t>(1, 4096 / std::max<int64_t>(H * Dv, 1)), [&](int64_t s, int64_t e) {
    for (int64_t bi = s; bi < e; ++bi) {
      const int64_t b = bi / Sq, i = bi % Sq;
      for (int64_t h = 0; h < H; ++h) {
        T& run = l[(b * H + h) * Sq + i];
        const T add = pl[(b * H + h) * Sq + i];
        if (add == neg_inf) continue;  // the block hides every key of this row
        T* orow = o + ((b * Sq + i) * H + h) * Dv;
        const T* brow = po + ((b * Sq + i) * H + h) * Dv;
        if (run == neg_inf) {
          std::copy(brow, brow + Dv, orow);
          run = add;
          continue;
        }
        const T m = std::max(run, add);
        const T a = std::exp(run - m), c = std::exp(add - m), sum = a + c;
        const T wa = a / sum, wc = c / sum;
        for (int64_t x = 0; x < Dv; ++x) orow[x] = wa * orow[x] + wc * brow[x];
        run = m + std::log(sum);
      }
    }
  });
}

}  // namespace

void attention_merge(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  LOOM_ASSERT(out.dim() == 4 && lse.dim() == 3 && out.is_contiguous() && lse.is_contiguous(),
              "attention_merge needs a contiguous [B, Sq, H, Dv] output and [B, H, Sq] lse");
  LOOM_ASSERT(block_out.shape() == out.shape() && block_lse.shape() == lse.shape(), "attention_merge: block ",
              block_out.shape().str(), " / ", block_lse.shape().str(), " vs running ", out.shape().str(), " / ",
              lse.shape().str());
  LOOM_ASSERT(out.dtype() == lse.dtype() && (out.dtype() == DType::f32 || out.dtype() == DType::f64),
              "attention_merge accumulates in f32 or f64");
  if (out.dtype() == DType::f64) merge_impl<double>(out, lse, block_out, block_lse);
  else merge_impl<float>(out, lse, block_out, block_lse);
}

}  // namespace loom::kernels::cpu
