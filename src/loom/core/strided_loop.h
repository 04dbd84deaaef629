// Iteration over N strided operands of one logical shape, one innermost row at a time.
// Kernels give a row body; outer rows are split across threads when there is enough work.
#pragma once

#include <array>
#include <cstdint>

#include "loom/core/parallel.h"
#include "loom/core/shape.h"

namespace loom {

// body(const std::array<int64_t, N>& element_offsets, int64_t row_length,
//      const std::array<int64_t, N>& inner_strides)
template <int N, typename Body>
void for_each_row(const Shape& shape, const std::array<Shape, N>& strides, Body&& body,
                  bool parallel = true) {
  const int nd = shape.ndim();
  if (shape.numel() == 0) return;
  if (nd == 0) {
    std::array<int64_t, N> off{};
    std::array<int64_t, N> inner{};
    body(off, int64_t{1}, inner);
    return;
  }
  const int64_t row = shape[nd - 1];
  std::array<int64_t, N> inner;
  for (int k = 0; k < N; ++k) inner[k] = strides[k][nd - 1];
  const int64_t rows = shape.numel() / row;
  auto run = [&](int64_t r0, int64_t r1) {
    // Decompose r0 into an index over the outer dims, then step it like an odometer.
    std::array<int64_t, Shape::kMaxDims> idx{};
    int64_t rem = r0;
    for (int d = nd - 2; d >= 0; --d) {
      idx[d] = rem % shape[d];
      rem /= shape[d];
    }
    std::array<int64_t, N> off{};
    for (int k = 0; k < N; ++k)
      for (int d = 0; d < nd - 1; ++d) off[k] += idx[d] * strides[k][d];
    for (int64_t r = r0; r < r1; ++r) {
      body(off, row, inner);
      for (int d = nd - 2; d >= 0; --d) {
        ++idx[d];
        for (int k = 0; k < N; ++k) off[k] += strides[k][d];
        if (idx[d] < shape[d]) break;
        for (int k = 0; k < N; ++k) off[k] -= strides[k][d] * shape[d];
        idx[d] = 0;
      }
    }
  };
  if (parallel) {
    parallel_for(0, rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(row, 1)), run);
  } else {
    run(0, rows);
  }
}

}  // namespace loom
