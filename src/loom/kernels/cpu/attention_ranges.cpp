#include "loom/kernels/cpu/attention_ranges.h"

#include <vector>

#include "loom/core/error.h"

namespace loom::kernels::cpu::attention_detail {
namespace {

std::vector<int64_t> read_doc_ends(const Tensor& doc_ends, int64_t B, int64_t Sk) {
  LOOM_CHECK(doc_ends.dim() == 2 && doc_ends.size(0) == B && doc_ends.size(1) >= 1, ShapeError,
             "attention: doc_ends must be [batch, num_docs] = [", B, ", K>=1], got ",
             doc_ends.shape().str(), " (one row of ascending document ends per sample)");
  LOOM_CHECK(doc_ends.dtype() == DType::i32 || doc_ends.dtype() == DType::i64, DTypeError,
             "attention: doc_ends must be int32 or int64, got ", dtype_name(doc_ends.dtype()));
  std::vector<int64_t> ends = doc_ends.to_int_vector();
  const int64_t K = doc_ends.size(1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t d = 0; d < K; ++d) {
      const int64_t e = ends[b * K + d];
      LOOM_CHECK(e >= 0 && e <= Sk, ValueError, "attention: doc_ends[", b, "][", d, "] = ", e,
                 " is outside [0, ", Sk, "]: document ends are exclusive key positions, padded "
                 "with the key sequence length ", Sk);
      LOOM_CHECK(d == 0 || e >= ends[b * K + d - 1], ValueError, "attention: doc_ends[", b, "][",
                 d, "] = ", e, " is smaller than doc_ends[", b, "][", d - 1, "] = ",
                 ends[b * K + d - 1], ": document ends must be ascending (pad with ", Sk, ")");
    }
  return ends;
}

// The caller's own intervals (AttentionMask::key_ranges), checked and made dense.
Tensor given_ranges(const Tensor& key_ranges, int64_t B, int64_t Sq, int64_t Sk) {
  LOOM_CHECK(key_ranges.dim() == 3 && key_ranges.size(0) == B && key_ranges.size(1) == Sq &&
                 key_ranges.size(2) == 2,
             ShapeError, "attention: key_ranges must be [batch, q_len, 2] = [", B, ", ", Sq,
             ", 2], got ", key_ranges.shape().str());
  LOOM_CHECK(key_ranges.dtype() == DType::i64, DTypeError, "attention: key_ranges must be int64, got ",
             dtype_name(key_ranges.dtype()));
  Tensor ranges = key_ranges.contiguous().view({B * Sq * 2});
  if (ranges.data<int64_t>() == key_ranges.data<int64_t>()) ranges = ranges.clone();
  int64_t* r = ranges.data<int64_t>();
  for (int64_t row = 0; row < B * Sq; ++row) {
    const int64_t lo = r[2 * row], hi = r[2 * row + 1];
    LOOM_CHECK(lo >= 0 && hi <= Sk, ValueError, "attention: key_ranges row ", row, " = [", lo, ", ", hi,
               ") is outside [0, ", Sk, "] (the key sequence length)");
    if (hi <= lo) r[2 * row] = r[2 * row + 1] = 0;
  }
  return ranges;
}

}  // namespace

// ranges[2·(b·Sq + i) + {0, 1}] = [lo, hi): the keys query row i of sample b may see.
Tensor row_ranges(const AttentionMask& mask, int64_t B, int64_t Sq, int64_t Sk) {
  if (mask.key_ranges.defined()) return given_ranges(mask.key_ranges, B, Sq, Sk);
  std::vector<int64_t> ends;
  int64_t K = 0;
  if (mask.doc_ends.defined()) {
    ends = read_doc_ends(mask.doc_ends, B, Sk);
    K = mask.doc_ends.size(1);
  }
  Tensor ranges = Tensor::empty({B * Sq * 2}, DType::i64);
  int64_t* r = ranges.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* e = K ? ends.data() + b * K : nullptr;
    for (int64_t i = 0; i < Sq; ++i) {
      const int64_t p = i + mask.q_offset;
      int64_t lo = 0, hi = Sk;
      if (mask.causal) hi = std::clamp<int64_t>(p + 1, 0, Sk);
      if (e) {
        if (p < 0 || p >= e[K - 1]) {
          hi = 0;
        } else {
          const int64_t d = std::upper_bound(e, e + K, p) - e;
          lo = d ? e[d - 1] : 0;
          hi = std::min(hi, e[d]);
        }
      }
      if (hi <= lo) lo = hi = 0;
      r[2 * (b * Sq + i)] = lo;
      r[2 * (b * Sq + i) + 1] = hi;
    }
  }
  return ranges;
}

BlockKeys block_keys(const int64_t* ranges, int64_t n) {
  BlockKeys k;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t lo = ranges[2 * r], hi = ranges[2 * r + 1];
    if (lo < hi) {
      k.lo = std::min(k.lo, lo);
      k.hi = std::max(k.hi, hi);
    }
    k.all_lo = std::max(k.all_lo, lo);
    k.all_hi = std::min(k.all_hi, hi);
  }
  if (k.all_hi <= k.all_lo) k.all_lo = k.all_hi = 0;
  return k;
}

}  // namespace loom::kernels::cpu::attention_detail
