// softmax, log_softmax, sum and mean.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/ops/reduce.h"
#include "loom/ops/softmax.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::gradcheck;
using loom::testing::leaf;

TEST(OpsSoftmax, ForwardMatchesDefinitionAndIsStable) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3, 1000, 1001, 1002}, {2, 3});
  auto y = ops::softmax(x).to_double_vector();
  double z = std::exp(1) + std::exp(2) + std::exp(3);
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(y[r * 3 + i], std::exp(1 + i) / z, 1e-12);
  auto ly = ops::log_softmax(x).to_double_vector();
  EXPECT_NEAR(ly[5], 3 - std::log(z), 1e-12);
}

TEST(OpsSoftmax, GradcheckAnyDim) {
  Tensor x = leaf({2, 3, 4}, 1, -2, 2);
  for (int dim : {-1, 0, 1}) {
    EXPECT_LT(gradcheck([dim](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::softmax(in[0], dim)}; }, {x}), 1e-6);
    EXPECT_LT(gradcheck([dim](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::log_softmax(in[0], dim)}; }, {x}), 1e-6);
  }
}

TEST(OpsReduce, SumMeanValuesAndGrads) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(ops::sum(x).item(), 21);
  EXPECT_EQ(ops::sum(x, {0}).to_double_vector(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(ops::sum(x, {1}, true).shape(), Shape({2, 1}));
  EXPECT_EQ(ops::mean(x, {1}).to_double_vector(), (std::vector<double>{2, 5}));
  Tensor y = leaf({2, 3, 4}, 2);
  for (auto dims : std::vector<std::vector<int>>{{}, {0}, {1}, {2}, {0, 2}, {-1, 0}})
    for (bool keep : {false, true}) {
      EXPECT_LT(gradcheck([dims, keep](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::sum(in[0], dims, keep)}; }, {y}), 1e-6);
      EXPECT_LT(gradcheck([dims, keep](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::mean(in[0], dims, keep)}; }, {y}), 1e-6);
    }
}
