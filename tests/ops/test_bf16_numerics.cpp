// Every bf16 op of a training step against float64 on the same (bf16-representable) values:
// forward outputs and the grads of every input, within bf16 tolerance. The products (linear with
// transposed and strided operands, bmm, grouped expert GEMMs, the fused LM-head loss) take
// whichever CPU matrix path the process dispatched to (kernels/cpu/cpu_isa.h); CTest runs this
// suite once per LOOM_MAX_CPU_ISA cap (tests/ops/CMakeLists.txt), and a run capped at a path
// the CPU lacks skips and says so rather than testing the lower path twice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "loom/autograd/engine.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/linear.h"
#include "loom/ops/loss.h"
#include "loom/ops/moe.h"
#include "loom/ops/norm.h"
#include "loom/ops/rope.h"
#include "loom/ops/shape.h"
#include "loom/ops/softmax.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::random_f64;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// bf16 keeps 8 significant bits: one rounding of an output is 2^-9 of its magnitude; the
// tolerance allows a few roundings (bf16 intermediates, the output, the grad) on top of fp32
// accumulation, measured against the largest reference value of the tensor (normwise: a
// cancelled element carries the absolute error of its larger neighbours). Measured on AVX512-BF16
// and on the fp32 path: 1.3e-3 to 6e-3; a transposed or misplaced operand gives O(1).
constexpr double kBf16Tol = 1.0 / 64;

double normwise_error(const Tensor& got, const Tensor& ref) {
  auto g = got.to(DType::f64).contiguous().to_double_vector();
  auto r = ref.to(DType::f64).contiguous().to_double_vector();
  EXPECT_EQ(g.size(), r.size());
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < r.size() && i < g.size(); ++i) {
    worst = std::max(worst, std::abs(g[i] - r[i]));
    scale = std::max(scale, std::abs(r[i]));
  }
  return worst / scale;
}

// Leaves: bf16 values (and those same values in f64 for the reference), grads wanted for each.
struct Inputs {
  std::vector<Tensor> bf16, f64;
};

Inputs leaves(const std::vector<Shape>& shapes, uint64_t seed, double lo = -1, double hi = 1) {
  Inputs in;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor b = random_f64(shapes[i], seed + i, lo, hi).to(DType::bf16);
    Tensor d = b.to(DType::f64);
    b.set_requires_grad(true);
    d.set_requires_grad(true);
    in.bf16.push_back(b);
    in.f64.push_back(d);
  }
  return in;
}

// f on bf16 leaves and on their f64 copies; the output and every leaf's grad (backward of
// Σ y·R with R bf16-representable, so the seed is the same in both) within tol.
void expect_matches_f64(const Fn& f, Inputs in, const std::string& what, double tol = kBf16Tol) {
  Tensor y = f(in.bf16);
  Tensor y64 = f(in.f64);
  ASSERT_EQ(y.shape(), y64.shape()) << what;
  EXPECT_LE(normwise_error(y, y64), tol) << what << ": forward (output " << dtype_name(y.dtype()) << ")";
  Tensor r = random_f64(y.shape(), 999).to(DType::bf16);
  autograd::backward(y, r.to(y.dtype()));
  autograd::backward(y64, r.to(DType::f64));
  for (size_t i = 0; i < in.bf16.size(); ++i) {
    ASSERT_TRUE(in.bf16[i].grad().defined()) << what << ": input " << i << " got no grad";
    EXPECT_LE(normwise_error(in.bf16[i].grad(), in.f64[i].grad()), tol) << what << ": grad of input " << i;
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class Bf16Numerics : public ::testing::Test {
 protected:
  void SetUp() override {
    const kernels::cpu::MatrixDispatch& d = kernels::cpu::matrix_dispatch();
    const std::string path = kernels::cpu::matrix_path_name(d.path);
    RecordProperty("cpu_matrix_path", path);
    const char* cap = std::getenv("LOOM_MAX_CPU_ISA");
    if (cap && *cap && lower(cap) != path)
      GTEST_SKIP() << "LOOM_MAX_CPU_ISA=" << cap << " but this CPU runs " << kernels::cpu::describe_matrix_path()
                   << ": the lower path is tested by its own cap";
  }
};

}  // namespace

TEST_F(Bf16Numerics, LinearWithTransposedAndStridedOperands) {
  // x [3, 5, 40] · wᵀ + b, and again with x a transposed view and w a column block of a wider matrix.
  expect_matches_f64([](const std::vector<Tensor>& t) { return ops::linear(t[0], t[1], t[2]); },
                     leaves({{3, 5, 40}, {24, 40}, {24}}, 10), "linear");
  expect_matches_f64(
      [](const std::vector<Tensor>& t) {
        return ops::linear(ops::transpose(t[0], 0, 1), ops::narrow(t[1], 1, 3, 40));
      },
      leaves({{5, 3, 40}, {24, 49}}, 20), "linear, transposed x and strided w");
  expect_matches_f64([](const std::vector<Tensor>& t) { return ops::matmul(t[0], t[1]); },
                     leaves({{2, 7, 33}, {33, 17}}, 30), "matmul, shared b");
}

TEST_F(Bf16Numerics, BmmEveryTransposeAndAStridedBatch) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Shape a = ta ? Shape{3, 33, 7} : Shape{3, 7, 33}, b = tb ? Shape{3, 12, 33} : Shape{3, 33, 12};
      expect_matches_f64([ta, tb](const std::vector<Tensor>& t) { return ops::bmm(t[0], t[1], ta, tb); },
                         leaves({a, b}, 40), "bmm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
  expect_matches_f64(
      [](const std::vector<Tensor>& t) { return ops::bmm(ops::narrow(t[0], 2, 2, 33), ops::transpose(t[1], 1, 2), false, true); },
      leaves({{3, 7, 37}, {3, 33, 12}}, 50), "bmm, strided a and a transposed view of b");
}

TEST_F(Bf16Numerics, GroupedExpertGemms) {
  for (bool trans_w : {false, true}) {
    Tensor counts = Tensor::from_vector(std::vector<int64_t>{5, 0, 9, 2}, {4}, DType::i64);
    const Shape w = trans_w ? Shape{4, 20, 36} : Shape{4, 36, 20};
    expect_matches_f64(
        [&](const std::vector<Tensor>& t) { return ops::grouped_gemm(t[0], t[1], counts, trans_w); },
        leaves({{16, 36}, w}, 60), std::string("grouped_gemm trans_w=") + (trans_w ? "1" : "0"));
  }
}

TEST_F(Bf16Numerics, FusedLmHeadLossAndCrossEntropy) {
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{3, 77, 0, 150, 12, -100, 199, 5, 42, 64, 1, 98}, {12}, DType::i64);
  for (bool grads_in_forward : {false, true})
    for (int64_t chunk : {int64_t{0}, int64_t{5}})
      expect_matches_f64(
          [&](const std::vector<Tensor>& t) {
            return ops::linear_cross_entropy(t[0], t[1], labels, Tensor(), -100, chunk, grads_in_forward);
          },
          leaves({{12, 48}, {200, 48}}, 70, -2, 2),
          "linear_cross_entropy chunk=" + std::to_string(chunk) + " grads_in_forward=" + std::to_string(grads_in_forward));
  expect_matches_f64([&](const std::vector<Tensor>& t) { return ops::cross_entropy(t[0], labels); },
                     leaves({{12, 200}}, 80, -4, 4), "cross_entropy on bf16 logits");
}

TEST_F(Bf16Numerics, Norms) {
  // Weights near 1 as trained norms have; the reference computes in f64 throughout.
  auto norm_inputs = [](uint64_t seed, bool bias) {
    Inputs in = leaves({{4, 6, 64}}, seed, -3, 3);
    Inputs w = leaves(bias ? std::vector<Shape>{{64}, {64}} : std::vector<Shape>{{64}}, seed + 10, 0.5, 1.5);
    for (size_t i = 0; i < w.bf16.size(); ++i) {
      in.bf16.push_back(w.bf16[i]);
      in.f64.push_back(w.f64[i]);
    }
    return in;
  };
  expect_matches_f64(
      [](const std::vector<Tensor>& t) {
        return ops::rms_norm(t[0], t[1], 1e-5, t[0].dtype() == DType::f64 ? DType::f64 : DType::f32);
      },
      norm_inputs(90, false), "rms_norm");
  expect_matches_f64(
      [](const std::vector<Tensor>& t) {
        return ops::layer_norm(t[0], t[1], t[2], 1e-5, t[0].dtype() == DType::f64 ? DType::f64 : DType::f32);
      },
      norm_inputs(100, true), "layer_norm");
}

TEST_F(Bf16Numerics, RopeBothLayouts) {
  const ops::RopeTable table32 = ops::make_rope_table(16, 32, 10000.0, {}, DType::f32);
  const ops::RopeTable table64 = ops::make_rope_table(16, 32, 10000.0, {}, DType::f64);
  for (bool interleaved : {false, true})
    expect_matches_f64(
        [&](const std::vector<Tensor>& t) {
          return ops::rope(t[0], t[0].dtype() == DType::f64 ? table64 : table32, Tensor(), interleaved);
        },
        leaves({{2, 9, 3, 16}}, 110), std::string("rope interleaved=") + (interleaved ? "1" : "0"));
}

TEST_F(Bf16Numerics, SwigluAndSoftmax) {
  expect_matches_f64([](const std::vector<Tensor>& t) { return ops::swiglu(t[0], t[1]); },
                     leaves({{6, 40}, {6, 40}}, 120, -4, 4), "swiglu");
  expect_matches_f64([](const std::vector<Tensor>& t) { return ops::swiglu_packed(t[0]); },
                     leaves({{6, 80}}, 130, -4, 4), "swiglu_packed");
  expect_matches_f64([](const std::vector<Tensor>& t) { return ops::softmax(t[0], -1); },
                     leaves({{5, 7, 50}}, 140, -6, 6), "softmax");
  expect_matches_f64([](const std::vector<Tensor>& t) { return ops::log_softmax(t[0], -1); },
                     leaves({{5, 50}}, 150, -6, 6), "log_softmax");
}
