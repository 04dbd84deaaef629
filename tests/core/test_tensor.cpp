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

TEST(Tensor, SliceSelectExpandSqueezePermute) {
  Tensor t = Tensor::arange(24, DType::f32).view({2, 3, 4});
  Tensor s = t.slice(2, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.shape(), Shape({2, 3, 2}));
  EXPECT_EQ(s.contiguous().to_float_vector()[0], 1.0f);
  EXPECT_EQ(s.contiguous().to_float_vector()[1], 3.0f);
  EXPECT_EQ(t.select(1, 2).contiguous().to_float_vector(), (std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23}));
  Tensor e = Tensor::from_vector(std::vector<float>{1, 2}, {2, 1}).expand({2, 3});
  EXPECT_EQ(e.strides(), Shape({1, 0}));
  EXPECT_EQ(e.contiguous().to_float_vector(), (std::vector<float>{1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(t.unsqueeze(0).shape(), Shape({1, 2, 3, 4}));
  EXPECT_EQ(t.unsqueeze(0).squeeze(0).shape(), t.shape());
  EXPECT_THROW(t.squeeze(0), ShapeError);
  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), Shape({4, 2, 3}));
  EXPECT_DOUBLE_EQ(p.at({3, 1, 2}), t.at({1, 2, 3}));
  EXPECT_THROW(t.permute({0, 0, 1}), ShapeError);
  EXPECT_THROW(t.narrow(1, 2, 2), ShapeError);
}

TEST(Tensor, CopyFillAndPrinting) {
  Tensor t = Tensor::zeros({2, 2});
  t.fill_(1.5);
  EXPECT_EQ(t.to_float_vector(), std::vector<float>(4, 1.5f));
  Tensor col = t.select(1, 0);
  col.fill_(-1.0);  // writes through the view
  EXPECT_EQ(t.to_float_vector(), (std::vector<float>{-1, 1.5f, -1, 1.5f}));
  EXPECT_EQ(t.str(), "Tensor(shape=[2, 2], dtype=float32, device=cpu, values=[-1, 1.5, -1, 1.5])");
  EXPECT_THROW(t.item(), ShapeError);
  EXPECT_THROW(t.data<double>(), DTypeError);
  EXPECT_THROW(Tensor().shape(), Error);
}

TEST(Tensor, DetachSharesDataButNotHistory) {
  Tensor t = Tensor::ones({3});
  t.set_requires_grad(true);
  Tensor d = t.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.shares_storage_with(t));
  EXPECT_THROW(Tensor::zeros({2}, DType::i64).set_requires_grad(true), DTypeError);
}
