#include <gtest/gtest.h>

#include "loom/core/tensor.h"

using namespace loom;

TEST(Tensor, FactoriesShapeAndValues) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  EXPECT_EQ(t.strides(), Shape({3, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_DOUBLE_EQ(t.at({1, 2}), 6.0);
  EXPECT_EQ(Tensor::zeros({4}).to_float_vector(), std::vector<float>(4, 0.f));
  EXPECT_EQ(Tensor::full({2}, 2.5).to_float_vector(), std::vector<float>(2, 2.5f));
  EXPECT_EQ(Tensor::arange(4).to_int_vector(), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(Tensor, TransposeSharesStorageAndContiguousCopies) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), Shape({3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_TRUE(tt.shares_storage_with(t));
  EXPECT_EQ(tt.contiguous().to_float_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Tensor, ViewRejectsIncompatibleLayout) {
  Tensor t = Tensor::zeros({2, 3}).transpose(0, 1);
  EXPECT_THROW(t.view({6}), ShapeError);
  EXPECT_EQ(t.reshape({6}).shape(), Shape({6}));
  Tensor u = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(u.view({6, -1}).shape(), Shape({6, 4}));
  EXPECT_EQ(u.view({2, 12}).strides(), Shape({12, 1}));
  EXPECT_THROW(u.view({5, -1}), ShapeError);
}
