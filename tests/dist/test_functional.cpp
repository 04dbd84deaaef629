// The differentiable collectives over a group of one rank (every strategy also runs without
// mpirun): each is the identity on values, and its gradient passes straight through. The
// multi-rank finite-difference checks are in tests/dist/mpi/test_functional.cpp.
#include <gtest/gtest.h>

#include "loom/dist/functional.h"
#include "loom/ops/reduce.h"
#include "testing/gradcheck.h"

namespace loom::dist {
namespace {

using testing::gradcheck;
using testing::leaf;

std::shared_ptr<ProcessGroup> one_rank() { return std::shared_ptr<ProcessGroup>(make_single_rank_group("tp")); }

TEST(Functional, OneRankCollectivesAreIdentitiesWithExactGrads) {
  auto g = one_rank();
  EXPECT_LT(gradcheck([g](const std::vector<Tensor>& x) -> std::vector<Tensor> { return {all_gather(x[0], g, 1)}; },
                      {leaf({2, 3, 4}, 1)}, 1e-9, 1e-6, "all_gather"),
            1e-9);
  EXPECT_LT(gradcheck([g](const std::vector<Tensor>& x) -> std::vector<Tensor> { return {reduce_scatter(x[0], g, -1)}; },
                      {leaf({2, 3}, 2)}, 1e-9, 1e-6, "reduce_scatter"),
            1e-9);
  EXPECT_LT(gradcheck([g](const std::vector<Tensor>& x) -> std::vector<Tensor> { return {all_reduce(x[0], g)}; },
                      {leaf({5}, 3)}, 1e-9, 1e-6, "all_reduce"),
            1e-9);
  EXPECT_LT(gradcheck([g](const std::vector<Tensor>& x) -> std::vector<Tensor> { return {copy_to_group(x[0], g)}; },
                      {leaf({3, 2}, 4)}, 1e-9, 1e-6, "copy_to_group"),
            1e-9);
  EXPECT_LT(gradcheck([g](const std::vector<Tensor>& x) -> std::vector<Tensor> {
                        return {all_to_all_v(x[0], g, {3}, {3})};
                      },
                      {leaf({3, 2}, 5)}, 1e-9, 1e-6, "all_to_all_v"),
            1e-9);

  Tensor x = leaf({2, 3}, 6);
  Tensor y = all_gather(x, g, 0);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_FALSE(y.shares_storage_with(x));  // a new tensor: writing it never changes x
  EXPECT_EQ(y.to_double_vector(), x.to_double_vector());
  EXPECT_TRUE(copy_to_group(x, g).shares_storage_with(x));
}

TEST(Functional, BadArgumentsNameTheOpAndTheAxis) {
  auto g = one_rank();
  try {
    all_gather(Tensor::zeros({4}, DType::i64), g, 0);
    FAIL();
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("all_gather on mesh axis 'tp': dtype int64 is not differentiable"),
              std::string::npos)
        << e.what();
  }
  try {
    all_to_all_v(Tensor::zeros({4, 2}), g, {3}, {3});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("send_rows add up to 3 but the input [4, 2] has 4 rows"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(all_to_all_v(Tensor::zeros({4, 2}), g, {2, 2}, {4}), ValueError);
  EXPECT_THROW(all_reduce(Tensor::zeros({2}), nullptr), ValueError);
  EXPECT_THROW(reduce_scatter(Tensor::zeros({2}), g, 1), ShapeError);  // no dim 1
}

}  // namespace
}  // namespace loom::dist
