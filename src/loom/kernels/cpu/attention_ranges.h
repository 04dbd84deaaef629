// The attention kernel's masks as per-row key intervals (cpu/attention.h): every mask mode gives
// each query row one contiguous interval of visible keys [lo, hi); the kernels skip fully masked
// tiles and leave fully visible ones unmasked. Internal to cpu/attention*.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "loom/core/tensor.h"
#include "loom/kernels/kernel_types.h"

namespace loom::kernels::cpu::attention_detail {

constexpr int64_t kNoKey = std::numeric_limits<int64_t>::max();

// ranges[2·(b·Sq + i) + {0, 1}] = [lo, hi): the keys query row i of sample b may see, from the
// mask's mode (causal, q_offset, doc_ends, validated here) or its key_ranges given outright.
Tensor row_ranges(const AttentionMask& mask, int64_t B, int64_t Sq, int64_t Sk);

// Keys touched by a block of query rows ([lo, hi), empty when lo >= hi) and the window every
// row of the block sees (tiles inside it need no masking).
struct BlockKeys {
  int64_t lo = kNoKey, hi = 0, all_lo = 0, all_hi = kNoKey;
};

// The keys of the n rows of `ranges`.
BlockKeys block_keys(const int64_t* ranges, int64_t n);

// Visible columns of row r in the tile [j0, j0 + jn).
inline void visible_cols(const int64_t* range, int64_t j0, int64_t jn, int64_t& c0, int64_t& c1) {
  c0 = std::clamp<int64_t>(range[0] - j0, 0, jn);
  c1 = std::clamp<int64_t>(range[1] - j0, 0, jn);
}

}  // namespace loom::kernels::cpu::attention_detail
