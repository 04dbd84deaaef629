// Embedding, gather/scatter/index ops and top-k.
#include <gtest/gtest.h>

#include "loom/ops/index.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::gradcheck;
using loom::testing::leaf;

TEST(OpsIndex, EmbeddingForwardAndGrad) {
  Tensor w = leaf({5, 3}, 1);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{4, 0, 4, 2}, {2, 2});
  Tensor y = ops::embedding(ids, w);
  EXPECT_EQ(y.shape(), Shape({2, 2, 3}));
  EXPECT_DOUBLE_EQ(y.at({0, 0, 1}), w.at({4, 1}));
  EXPECT_DOUBLE_EQ(y.at({1, 1, 2}), w.at({2, 2}));
  EXPECT_LT(gradcheck([ids](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::embedding(ids, in[0])}; }, {w}), 1e-6);
  Tensor ids32 = Tensor::from_vector(std::vector<int32_t>{1, 3}, {2});
  EXPECT_DOUBLE_EQ(ops::embedding(ids32, w).at({1, 0}), w.at({3, 0}));
}

TEST(OpsIndex, EmbeddingRejectsOutOfRangeIds) {
  Tensor w = Tensor::zeros({5, 3});
  try {
    ops::embedding(Tensor::from_vector(std::vector<int64_t>{1, 5}, {2}), w);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("index 5 at position 1 is out of range [0, 5)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::embedding(Tensor::from_vector(std::vector<int64_t>{-1}, {1}), w), ValueError);
  EXPECT_THROW(ops::embedding(Tensor::zeros({2}), w), DTypeError);
}

TEST(OpsIndex, Bf16EmbeddingGradIsFp32) {
  Tensor w = Tensor::ones({4, 2}, DType::bf16);
  w.set_requires_grad(true);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 1, 3}, {3});
  autograd::backward(ops::sum(ops::cast(ops::embedding(ids, w), DType::f32)));
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().to_float_vector(), (std::vector<float>{0, 0, 2, 2, 0, 0, 1, 1}));
}

TEST(OpsIndex, GatherScatterIndexAddGradcheck) {
  Tensor x = leaf({3, 4}, 2);
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{3, 0, 1, 1, 2, 0}, {3, 2});
  EXPECT_LT(gradcheck([idx](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::gather(in[0], 1, idx)}; }, {x}), 1e-6);
  Tensor src = leaf({3, 2}, 3);
  Tensor uniq = Tensor::from_vector(std::vector<int64_t>{3, 0, 1, 2, 2, 0}, {3, 2});
  for (bool acc : {false, true})
    EXPECT_LT(gradcheck([uniq, acc](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::scatter(in[0], 1, uniq, in[1], acc)}; }, {x, src}), 1e-6);
  Tensor rows = Tensor::from_vector(std::vector<int64_t>{2, 0, 2}, {3});
  Tensor add = leaf({3, 4}, 4);
  EXPECT_LT(gradcheck([rows](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::index_add(in[0], 0, rows, in[1])}; }, {x, add}), 1e-6);
  EXPECT_LT(gradcheck([rows](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::index_select(in[0], 0, rows)}; }, {x}), 1e-6);
  Tensor sum = ops::index_add(Tensor::zeros({3, 1}, DType::f64), 0, rows, Tensor::ones({3, 1}, DType::f64));
  EXPECT_EQ(sum.to_double_vector(), (std::vector<double>{1, 0, 2}));
}

TEST(OpsIndex, TopkValuesIndicesAndGrad) {
  Tensor x = Tensor::from_vector(std::vector<double>{0.1, 0.9, 0.5, 0.9, -1.0, 2.0, 0.0, 1.0}, {2, 4});
  auto [v, i] = ops::topk(x, 2);
  EXPECT_EQ(v.to_double_vector(), (std::vector<double>{0.9, 0.9, 2.0, 1.0}));
  EXPECT_EQ(i.to_int_vector(), (std::vector<int64_t>{1, 3, 1, 3}));  // ties: lower index first
  Tensor y = leaf({3, 5}, 5);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::topk(in[0], 3).first}; }, {y}), 1e-6);
  EXPECT_THROW(ops::topk(x, 5), ValueError);
}
