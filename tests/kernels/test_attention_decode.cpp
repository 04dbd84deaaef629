// The decode kernel (kernels/cpu/attention_decode.h): a few query rows against a cache give the
// attention the f64 flash kernel computes on the same values — output and log-sum-exp — for GQA
// groups, one to eight rows, causal offsets, left padding as document ends, strided views of a
// cache (MLA's values are a slice of its keys) and rows that see no key.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/core/rng.h"
#include "loom/kernels/cpu/attention.h"
#include "loom/kernels/cpu/attention_decode.h"

using namespace loom;
namespace kc = loom::kernels::cpu;

namespace {

Tensor random(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 4.0 * stream_uniform({seed, 5, 0}, static_cast<int64_t>(i)) - 2.0;
  return Tensor::from_vector(v, shape, DType::f64).to(dtype);
}

// The decode kernel on `dtype` operands against the f64 flash kernel on the same (rounded) values.
void expect_matches_flash(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::AttentionMask& mask,
                          double tol, const std::string& what) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const kernels::AttentionForwardResult want = kc::attention_forward(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64),
                                                                     scale, mask, false, kernels::AttentionTiles{});
  // Both kernels: fp32 products, and on a CPU with AVX512-BF16 its dot products for bf16.
  std::vector<kc::MatrixPath> paths = {kc::MatrixPath::fp32};
  if (kc::matrix_dispatch().features.avx512_bf16) paths.push_back(kc::MatrixPath::avx512_bf16);
  for (kc::MatrixPath path : paths) {
  const std::string on = what + " on " + kc::matrix_path_name(path);
  const kernels::AttentionForwardResult got = kc::decode_attention_forward_on(path, q, k, v, scale, mask);
  ASSERT_EQ(got.out.shape(), want.out.shape()) << on;
  EXPECT_EQ(got.out.dtype(), q.dtype()) << on;
  const auto o = got.out.to_double_vector(), ow = want.out.to_double_vector();
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], ow[i], tol * (1 + std::fabs(ow[i]))) << on << " out[" << i << "]";
  const auto l = got.lse.to_double_vector(), lw = want.lse.to_double_vector();
  for (size_t i = 0; i < l.size(); ++i) {
    if (std::isinf(lw[i])) EXPECT_EQ(l[i], lw[i]) << on << " lse[" << i << "]";
    else ASSERT_NEAR(l[i], lw[i], 1e-5 * (1 + std::fabs(lw[i]))) << on << " lse[" << i << "]";
  }
  }
}

TEST(AttentionDecode, FewRowsOverACacheEqualTheFlashKernel) {
  for (DType dtype : {DType::f32, DType::bf16})
    for (int64_t rows : {1, 3, 8})
      for (auto [heads, kv] : {std::pair<int64_t, int64_t>{4, 4}, {8, 2}, {6, 1}}) {
        const int64_t B = 2, keys = 37, D = dtype == DType::bf16 ? 64 : 24;  // bf16: the AVX512 kernel's shapes
        const Tensor q = random({B, rows, heads, D}, dtype, 1), k = random({B, keys, kv, D}, dtype, 2),
                     v = random({B, keys, kv, dtype == DType::bf16 ? 144 : 16}, dtype, 3);
        // The rows are the last `rows` positions, as after a cache of keys - rows positions.
        kernels::AttentionMask mask{true, keys - rows, Tensor(), Tensor()};
        // bf16: the output is rounded to bf16 once (8 bits of mantissa).
        const double tol = dtype == DType::bf16 ? 8e-3 : 2e-6;
        const std::string what = std::string(dtype_name(dtype)) + " rows " + std::to_string(rows) + " heads " +
                                 std::to_string(heads) + "/" + std::to_string(kv);
        expect_matches_flash(q, k, v, mask, tol, what);
        // Left padding: row b's first pad[b] keys belong to no prompt ([pad_b, keys] as doc ends).
        mask.doc_ends = Tensor::from_vector(std::vector<int64_t>{0, keys, 5, keys}, {B, 2}, DType::i64);
        expect_matches_flash(q, k, v, mask, tol, what + " padded");
      }
}

TEST(AttentionDecode, StridedViewsOfACacheAreReadInPlace) {
  // MLA: one latent "head" [c; rope] per position, values its first c columns; the cache holds
  // more positions than are filled.
  const int64_t B = 1, capacity = 40, filled = 29, c = 16, rope = 8;
  const Tensor cache = random({B, capacity, 1, c + rope}, DType::f32, 4);
  const Tensor keys = cache.narrow(1, 0, filled), values = keys.narrow(3, 0, c);
  const Tensor q = random({B, 1, 4, c + rope}, DType::f32, 5);
  expect_matches_flash(q, keys, values, {true, filled - 1, Tensor(), Tensor()}, 2e-6, "latent view");
  // A last dim that is not dense is copied first, with the same result.
  const Tensor wide = random({B, filled, 1, 2 * (c + rope)}, DType::f32, 6);
  const Tensor every_other = wide.narrow(3, 0, 2 * (c + rope)).view({B, filled, 1, c + rope, 2}).select(4, 0);
  expect_matches_flash(q, every_other, values, {true, filled - 1, Tensor(), Tensor()}, 2e-6, "strided last dim");
}

TEST(AttentionDecode, RowsThatSeeNoKeyGiveZerosAndMinusInfinity) {
  const Tensor q = random({1, 2, 2, 8}, DType::f32, 7), k = random({1, 6, 2, 8}, DType::f32, 8),
               v = random({1, 6, 2, 8}, DType::f32, 9);
  // Documents end at 2 and 4: the rows at positions 4 and 5 sit in none.
  const kernels::AttentionMask mask{true, 4, Tensor::from_vector(std::vector<int64_t>{2, 4}, {1, 2}, DType::i64), Tensor()};
  const kernels::AttentionForwardResult r = kc::decode_attention_forward(q, k, v, 1.0, mask);
  for (double x : r.out.to_double_vector()) EXPECT_EQ(x, 0.0);
  for (double x : r.lse.to_double_vector()) EXPECT_EQ(x, -INFINITY);
}

}  // namespace
