// The differentiable collectives under mpirun (2, 3 and 4 ranks): forward values, and gradients
// against central finite differences in float64 of the loss each op's header convention assumes:
//   summed:      L = Σ_r <w_r, y_r>  (every rank's own loss, added with an all-reduce)
//   replicated:  L = <w, y>, w the same on every rank (all_reduce: the output is counted once)
// Every rank runs the same perturbation loop (one element on one rank at a time; all ranks at
// once for copy_to_group, whose input is one replicated variable), so the collectives inside the
// loss evaluations match up.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "loom/autograd/engine.h"
#include "loom/autograd/grad_mode.h"
#include "loom/dist/functional.h"
#include "loom/dist/runtime.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/reduce.h"
#include "testing/gradcheck.h"

namespace loom::dist {
namespace {

using Op = std::function<Tensor(const Tensor&)>;

const std::shared_ptr<ProcessGroup>& world() { return Runtime::get()->world(); }

enum class Loss { summed, replicated };
enum class Input { per_rank, replicated };

// Checks d L / d x of `op` at a rank-dependent (or replicated) x of `shape`; returns the worst
// relative error seen on this rank.
double check_gradient(const Op& op, const Shape& shape, Loss loss, Input input, const char* what) {
  ProcessGroup& g = *world();
  const int n = g.size(), r = g.rank();
  const uint64_t x_seed = input == Input::replicated ? 11 : 100 + static_cast<uint64_t>(r);
  Tensor x = testing::random_f64(shape, x_seed);
  x.set_requires_grad(true);
  Tensor y = op(x);
  const Tensor w = testing::random_f64(y.shape(), loss == Loss::replicated ? 7 : 200 + static_cast<uint64_t>(r));
  autograd::backward(ops::sum(ops::mul(y, w)));
  const std::vector<double> analytic = x.grad().to_double_vector();

  auto global_loss = [&](const Tensor& at) {
    autograd::NoGradGuard no_grad;
    const std::vector<double> yv = op(at).to_double_vector(), wv = w.to_double_vector();
    double local = 0;
    for (size_t i = 0; i < yv.size(); ++i) local += yv[i] * wv[i];
    return loss == Loss::summed ? g.all_reduce_scalar(local) : local;
  };
  constexpr double eps = 1e-4;
  double worst = 0;
  const int owners = input == Input::replicated ? 1 : n;
  // Ranks may hold different numbers of elements (all_to_all_v): all loop to the largest.
  const int64_t elements = g.all_reduce_scalar(x.numel(), ReduceOp::max);
  for (int owner = 0; owner < owners; ++owner) {
    for (int64_t i = 0; i < elements; ++i) {
      const bool mine = (input == Input::replicated || owner == r) && i < x.numel();
      Tensor plus = x.detach().clone(), minus = x.detach().clone();
      if (mine) {
        plus.data<double>()[i] += eps;
        minus.data<double>()[i] -= eps;
      }
      const double numeric = (global_loss(plus) - global_loss(minus)) / (2 * eps);
      if (!mine) continue;
      const double a = analytic[static_cast<size_t>(i)];
      const double err = std::abs(a - numeric) / std::max({std::abs(a), std::abs(numeric), 1e-3});
      worst = std::max(worst, err);
      EXPECT_LT(err, 1e-7) << what << " rank " << r << " element " << i << ": autograd " << a << ", finite difference "
                           << numeric;
    }
  }
  return worst;
}

TEST(Functional, AllGatherForwardAndGradAlongAnyDim) {
  ProcessGroup& g = *world();
  const int n = g.size(), r = g.rank();
  // Values: rank r's x[i][j][k] = 100 r + 10 i + ... along dim 1 the ranks' blocks follow each other.
  Tensor x = Tensor::empty({2, 3, 2}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(100 * r + i);
  Tensor y = all_gather(x, world(), 1);
  ASSERT_EQ(y.shape(), Shape({2, 3 * n, 2}));
  for (int p = 0; p < n; ++p) EXPECT_EQ(y.at({1, 3 * p + 2, 1}), 100.0 * p + 11);  // x_p[1][2][1] = 100p + 11
  for (int dim : {0, 1, -1})
    check_gradient([dim](const Tensor& t) { return all_gather(t, world(), dim); }, {2, 3, 2}, Loss::summed,
                   Input::per_rank, "all_gather");
}

TEST(Functional, ReduceScatterForwardAndGradAlongAnyDim) {
  ProcessGroup& g = *world();
  const int n = g.size(), r = g.rank();
  Tensor x = Tensor::full({3, 2 * n}, static_cast<double>(r + 1), DType::bf16);
  Tensor y = reduce_scatter(x, world(), 1);
  ASSERT_EQ(y.shape(), Shape({3, 2}));
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(y.at({2, 1}), n * (n + 1) / 2.0);
  for (int dim : {0, 1})
    check_gradient([dim](const Tensor& t) { return reduce_scatter(t, world(), dim); }, {2 * n, 2 * n}, Loss::summed,
                   Input::per_rank, "reduce_scatter");
  check_gradient([](const Tensor& t) { return reduce_scatter(t, world(), 2); }, {2, 1, 3 * n}, Loss::summed,
                 Input::per_rank, "reduce_scatter dim 2");
}

TEST(Functional, AllReduceSumsForwardAndPassesTheGradThrough) {
  ProcessGroup& g = *world();
  const int n = g.size(), r = g.rank();
  Tensor x = Tensor::full({4}, static_cast<double>(r + 1));
  Tensor y = all_reduce(x, world());
  EXPECT_EQ(y.at({3}), n * (n + 1) / 2.0);
  EXPECT_EQ(x.at({3}), r + 1.0);  // the input is not touched
  check_gradient([](const Tensor& t) { return all_reduce(t, world()); }, {3, 4}, Loss::replicated, Input::per_rank,
                 "all_reduce");
}

TEST(Functional, CopyToGroupIsTheIdentityAndSumsTheGrads) {
  check_gradient([](const Tensor& t) { return copy_to_group(t, world()); }, {2, 3}, Loss::summed, Input::replicated,
                 "copy_to_group");
  // The pair of a tensor-parallel block without SP: copy_to_group on entry, all_reduce on exit.
  // Rank r scales by (r + 1), so L = <w, Σ_r (r + 1) x> and dL/dx = n(n + 1)/2 · w.
  const int n = world()->size(), r = world()->rank();
  Tensor x = testing::leaf({5}, 3);
  Tensor y = all_reduce(ops::scale(copy_to_group(x, world()), r + 1.0), world());
  const Tensor w = testing::random_f64({5}, 9);
  autograd::backward(ops::sum(ops::mul(y, w)));
  for (int64_t i = 0; i < 5; ++i) EXPECT_NEAR(x.grad().at({i}), n * (n + 1) / 2.0 * w.at({i}), 1e-12);
}

TEST(Functional, AllToAllVExchangesRowsAndSendsGradsBack) {
  ProcessGroup& g = *world();
  const int n = g.size(), r = g.rank();
  // Rank r sends (2r + p) % 3 rows to rank p (zero included), so it receives (2p + r) % 3 from p.
  std::vector<int64_t> send_rows(static_cast<size_t>(n)), recv_rows(static_cast<size_t>(n));
  int64_t rows = 0;
  for (int p = 0; p < n; ++p) {
    send_rows[static_cast<size_t>(p)] = (2 * r + p) % 3;
    recv_rows[static_cast<size_t>(p)] = (2 * p + r) % 3;
    rows += send_rows[static_cast<size_t>(p)];
  }
  // Row k of rank r's input holds 10 r + k; it lands on the rank its block is addressed to.
  Tensor x = Tensor::empty({rows, 2}, DType::f32);
  for (int64_t k = 0; k < rows; ++k) x.data<float>()[2 * k] = x.data<float>()[2 * k + 1] = static_cast<float>(10 * r + k);
  Tensor y = all_to_all_v(x, world(), send_rows, recv_rows);
  int64_t at = 0;
  for (int p = 0; p < n; ++p) {
    int64_t first = 0;  // index of p's first row for rank r
    for (int q = 0; q < r; ++q) first += (2 * p + q) % 3;
    for (int64_t k = 0; k < recv_rows[static_cast<size_t>(p)]; ++k, ++at) EXPECT_EQ(y.at({at, 1}), 10.0 * p + first + k);
  }
  EXPECT_EQ(at, y.shape()[0]);
  check_gradient([&](const Tensor& t) { return all_to_all_v(t, world(), send_rows, recv_rows); }, {rows, 2, 2},
                 Loss::summed, Input::per_rank, "all_to_all_v");
}

TEST(Functional, Bf16AndF32GradsKeepTheirDtype) {
  const int n = world()->size();
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = Tensor::full({2, 3}, 1.0, dt);
    x.set_requires_grad(true);
    Tensor y = reduce_scatter(all_gather(x, world(), 0), world(), 0);  // Σ over ranks of x
    EXPECT_EQ(y.at({1, 2}), static_cast<double>(n));
    // The grad that flows back through both collectives (a bf16 leaf's .grad() would be fp32).
    const Tensor dx = autograd::grad({ops::sum(y)}, {x})[0];
    EXPECT_EQ(dx.dtype(), dt);
    // y_r = n x_r (each rank's gathered copy adds x_r once), so d/dx_r of Σ_s Σ y_s is n.
    EXPECT_EQ(dx.at({0, 0}), static_cast<double>(n));
  }
}

TEST(Functional, IndivisibleReduceScatterNamesTheAxis) {
  const int n = world()->size();
  if (n == 1) return;
  try {
    reduce_scatter(Tensor::zeros({2 * n + 1, 2}), world(), 0);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter on mesh axis 'world': dim 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("must split into " + std::to_string(n) + " equal blocks"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom::dist
