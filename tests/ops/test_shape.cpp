// Shape ops: views route grads back; cat/split/stack inverse of each other.
#include <gtest/gtest.h>

#include "loom/ops/shape.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::gradcheck;
using loom::testing::leaf;

TEST(OpsShape, GradcheckViews) {
  Tensor x = leaf({2, 3, 4}, 1);
  auto check = [&](loom::testing::OpFn f, const char* name) { EXPECT_LT(gradcheck(f, {x}, 1e-6, 1e-6, name), 1e-6) << name; };
  check([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::reshape(in[0], {6, -1})}; }, "reshape");
  check([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::transpose(in[0], 0, 2)}; }, "transpose");
  check([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::permute(in[0], {2, 0, 1})}; }, "permute");
  check([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::narrow(in[0], 2, 1, 2)}; }, "narrow");
  check([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::select(in[0], 1, -1)}; }, "select");
  check([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::contiguous(ops::transpose(in[0], 0, 1))}; }, "contiguous");
  check([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::flatten(in[0], 1)}; }, "flatten");
  check([](const std::vector<Tensor>& in) { return ops::split(in[0], {1, 3}, 2); }, "split");
  check([](const std::vector<Tensor>& in) { return ops::chunk(in[0], 2, 0); }, "chunk");
  Tensor small = leaf({3, 1}, 2);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::expand(in[0], {2, 3, 4})}; }, {small}), 1e-6);
}

TEST(OpsShape, CatSplitStackValuesAndGrads) {
  Tensor a = leaf({2, 3}, 3), b = leaf({2, 1}, 4);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::cat({in[0], in[1]}, 1)}; }, {a, b}), 1e-6);
  Tensor c = leaf({2, 3}, 5);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::stack({in[0], in[1]}, 1)}; }, {a, c}), 1e-6);
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto parts = ops::split(x, {2, 1}, 1);
  EXPECT_EQ(parts[0].contiguous().to_float_vector(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(parts[1].contiguous().to_float_vector(), (std::vector<float>{3, 6}));
  EXPECT_EQ(ops::cat(parts, 1).to_float_vector(), x.to_float_vector());
  EXPECT_EQ(ops::stack({x, x}, 0).shape(), Shape({2, 2, 3}));
}

TEST(OpsShape, ErrorsNameTheRule) {
  EXPECT_THROW(ops::cat({Tensor::zeros({2, 3}), Tensor::zeros({3, 3})}, 1), ShapeError);
  EXPECT_THROW(ops::split(Tensor::zeros({2, 3}), {1, 1}, 1), ShapeError);
  EXPECT_THROW(ops::reshape(Tensor::zeros({2, 3}), {4, -1}), ShapeError);
  EXPECT_THROW(ops::narrow(Tensor::zeros({2, 3}), 1, 2, 2), ShapeError);
  try {
    ops::transpose(Tensor::zeros({2, 3}), 0, 2);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("dim 2 is out of range for a 2-d tensor"), std::string::npos) << e.what();
  }
}
