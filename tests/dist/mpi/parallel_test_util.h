// Shared by the mpirun tests of the parallel strategies (tensor, context, expert, pipeline): a
// rank's slice of a one-process tensor, read from the parameter's placement, and an element-wise
// comparison with a relative tolerance.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "loom/core/tensor.h"
#include "loom/nn/module.h"

namespace loom::testing {

// The pieces of `whole` that parameter p holds, in its local layout.
inline Tensor local_of(const Tensor& whole, const nn::Parameter& p) {
  Tensor out = Tensor::zeros(p.local_shape(), whole.dtype());
  for (const nn::Piece& piece : p.pieces()) {
    Tensor dst = out, src = whole;
    for (int d = 0; d < piece.shape.ndim(); ++d) {
      dst = dst.narrow(d, piece.local_offset[static_cast<size_t>(d)], piece.shape[d]);
      src = src.narrow(d, piece.global_offset[static_cast<size_t>(d)], piece.shape[d]);
    }
    dst.copy_(src);
  }
  return out;
}

// |got − want| ≤ tol · (1 + |want|) element by element; `what` names the tensor in failures.
inline void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  auto a = got.contiguous().to_double_vector(), b = want.contiguous().to_double_vector();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol * (1.0 + std::fabs(b[i]))) << what << " [" << i << "]";
}

}  // namespace loom::testing
