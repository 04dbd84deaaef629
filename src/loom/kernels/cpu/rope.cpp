#include "loom/kernels/cpu/rope.h"

#include <type_traits>
#include <vector>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/index.h"
#include "loom/kernels/cpu/row_helpers.h"

namespace loom::kernels::cpu {

namespace {

// Positions as int64 [B·S], validated against the table length.
std::vector<int64_t> checked_positions(const Tensor& positions, int64_t batch, int64_t seq,
                                       int64_t table_len) {
  LOOM_CHECK(positions.dtype() == DType::i64 || positions.dtype() == DType::i32, DTypeError,
             "rope: position_ids must be int32 or int64, got ", dtype_name(positions.dtype()));
  const bool shared = positions.dim() == 1;
  LOOM_CHECK((shared && positions.shape()[0] == seq) ||
                 (positions.dim() == 2 && positions.shape()[0] == batch && positions.shape()[1] == seq),
             ShapeError, "rope: position_ids has shape ", positions.shape().str(),
             " but x has batch ", batch, " and sequence ", seq, "; expected [", batch, ", ", seq,
             "] or [", seq, "]");
  Tensor pc = positions.contiguous();
  std::vector<int64_t> pos(static_cast<size_t>(batch * seq));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t p = index_at(pc, shared ? s : b * seq + s);
      if (p < 0 || p >= table_len) {
        LOOM_THROW(ValueError, "rope: position_ids[", b, ", ", s, "] = ", p,
                   " is outside the RoPE table of ", table_len,
                   " positions [0, ", table_len, "); build the table with max_positions > ", p,
                   " (the sequence length the model is trained at)");
      }
      pos[b * seq + s] = p;
    }
  }
  return pos;
}

template <typename T, typename C>
void rope_rows(const Tensor& x, const Tensor& cos, const Tensor& sin, const std::vector<int64_t>& pos,
               bool interleaved, bool inverse, Tensor& y) {
  const int64_t B = x.shape()[0], S = x.shape()[1], H = x.shape()[2], D = x.shape()[3];
  const int64_t half = cos.shape()[1], R = 2 * half;
  const int64_t sb = x.strides()[0], ss = x.strides()[1], sh = x.strides()[2];
  const T* px = x.data<T>();
  T* py = y.data<T>();
  const C* pc = cos.data<C>();
  const C* psn = sin.data<C>();
  const C sign = inverse ? C(-1) : C(1);
  parallel_for(0, B * S, std::max<int64_t>(1, 16384 / std::max<int64_t>(H * D, 1)), [&](int64_t b0, int64_t e0) {
    std::vector<C> xbuf(D), ybuf(D), sn(half);
    for (int64_t bs = b0; bs < e0; ++bs) {
      const int64_t b = bs / S, s = bs % S;
      const C* c = pc + pos[bs] * half;
      const C* st = psn + pos[bs] * half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) sn[i] = sign * st[i];
      for (int64_t h = 0; h < H; ++h) {
        const C* xv = row_as(px + b * sb + s * ss + h * sh, xbuf.data(), D);
        T* yr = py + (bs * H + h) * D;
        C* yv = out_row(yr, ybuf.data());
        if (interleaved) {
#pragma omp simd
          for (int64_t i = 0; i < half; ++i) {
            const C x1 = xv[2 * i], x2 = xv[2 * i + 1];
            yv[2 * i] = x1 * c[i] - x2 * sn[i];
            yv[2 * i + 1] = x2 * c[i] + x1 * sn[i];
          }
        } else {
#pragma omp simd
          for (int64_t i = 0; i < half; ++i) {
            const C x1 = xv[i], x2 = xv[i + half];
            yv[i] = x1 * c[i] - x2 * sn[i];
            yv[i + half] = x2 * c[i] + x1 * sn[i];
          }
        }
        for (int64_t i = R; i < D; ++i) yv[i] = xv[i];
        finish_row(yv, yr, D);
      }
    }
  });
}

}  // namespace

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
            bool interleaved, bool inverse) {
  check_floating(x, "rope", "x");
  check_device_supported(x.device(), "rope");
  LOOM_CHECK(x.dim() == 4, ShapeError, "rope: x must be [batch, seq, heads, head_dim], got ",
             x.shape().str());
  LOOM_CHECK(cos.dim() == 2 && sin.shape() == cos.shape(), ShapeError,
             "rope: cos/sin tables must both be [positions, rotary_dim / 2], got ",
             cos.shape().str(), " and ", sin.shape().str());
  const int64_t D = x.shape()[3], R = 2 * cos.shape()[1];
  LOOM_CHECK(R <= D, ShapeError, "rope: the table rotates ", R, " dims but x ", x.shape().str(),
             " has head_dim ", D, "; build the table with rotary_dim <= ", D);
  const std::vector<int64_t> pos = checked_positions(positions, x.shape()[0], x.shape()[1], cos.shape()[0]);
  Tensor xs = x.strides()[3] == 1 ? x : x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  if (y.numel() == 0) return y;
  LOOM_DISPATCH_FLOATING(x.dtype(), "rope", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    const DType cd = dtype_of<C>::value;
    Tensor cc = cos.to(cd).contiguous(), sc = sin.to(cd).contiguous();
    rope_rows<T, C>(xs, cc, sc, pos, interleaved, inverse, y);
  });
  return y;
}

}  // namespace loom::kernels::cpu
