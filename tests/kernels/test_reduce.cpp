// kernels/cpu/reduce.h max_value: the largest element of integer and floating tensors (the
// trainer's check that token ids fit the vocabulary), NaN when any element is NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "loom/kernels/cpu/reduce.h"

using namespace loom;

TEST(ReduceKernels, MaxValueOfIntegersAndFloats) {
  EXPECT_EQ(kernels::cpu::max_value(Tensor::from_vector(std::vector<int32_t>{3, 9, -1, 9}, {2, 2})), 9.0);
  EXPECT_EQ(kernels::cpu::max_value(Tensor::from_vector(std::vector<int64_t>{-7, -2}, {2})), -2.0);
  EXPECT_EQ(kernels::cpu::max_value(Tensor::from_vector(std::vector<float>{0.5f, -3.f, 2.25f}, {3}).to(DType::bf16)), 2.25);
  // A strided view is read as its logical elements.
  Tensor t = Tensor::from_vector(std::vector<double>{1, 100, 2, 200}, {2, 2});
  EXPECT_EQ(kernels::cpu::max_value(t.transpose(0, 1).narrow(0, 0, 1)), 2.0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(kernels::cpu::max_value(Tensor::from_vector(std::vector<float>{1, nan, 5}, {3}))));
  EXPECT_THROW(kernels::cpu::max_value(Tensor::empty({0})), ShapeError);
}
