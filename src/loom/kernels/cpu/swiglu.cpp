#include "loom/kernels/cpu/swiglu.h"

#include <cmath>

#include "loom/core/parallel.h"
#include "loom/core/scalar_cast.h"
#include "loom/kernels/cpu/vec.h"

namespace loom::kernels::cpu {

namespace {

// A matrix view: rows of `cols` elements, `stride` elements apart.
template <typename T>
struct Rows {
  T* data;
  int64_t stride;
  T* row(int64_t r) const { return data + r * stride; }
};

#ifdef LOOM_VEC_AVX2
template <typename T>
inline __m256 load8(const T* p) {
  if constexpr (std::is_same_v<T, float>) return _mm256_loadu_ps(p);
  else return vec::load_bf16x8(reinterpret_cast<const uint16_t*>(p));
}
template <typename T>
inline void store8(T* p, __m256 v) {
  if constexpr (std::is_same_v<T, float>) _mm256_storeu_ps(p, v);
  else vec::store_bf16x8(reinterpret_cast<uint16_t*>(p), v);
}
inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, vec::exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}
#endif

template <typename T>
constexpr bool kVectorised = std::is_same_v<T, float> || std::is_same_v<T, bf16>;

template <typename T>
void forward_rows(int64_t rows, int64_t cols, Rows<const T> gate, Rows<const T> up, Rows<T> out) {
  using C = compute_t<T>;
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* g = gate.row(r);
      const T* u = up.row(r);
      T* o = out.row(r);
      int64_t i = 0;
#ifdef LOOM_VEC_AVX2
      if constexpr (kVectorised<T>) {
        for (; i + 8 <= cols; i += 8) {
          __m256 gv = load8(g + i), uv = load8(u + i);
          store8(o + i, _mm256_mul_ps(_mm256_mul_ps(gv, sigmoid8(gv)), uv));
        }
      }
#endif
      for (; i < cols; ++i) {
        C gv = C(g[i]);
        o[i] = cast_scalar<T>(gv / (C(1) + std::exp(-gv)) * C(u[i]));
      }
    }
  });
}

template <typename T>
void backward_rows(int64_t rows, int64_t cols, Rows<const T> grad, Rows<const T> gate, Rows<const T> up, Rows<T> dgate,
                   Rows<T> dup) {
  using C = compute_t<T>;
  parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* go = grad.row(r);
      const T* g = gate.row(r);
      const T* u = up.row(r);
      T* dg = dgate.row(r);
      T* du = dup.row(r);
      int64_t i = 0;
#ifdef LOOM_VEC_AVX2
      if constexpr (kVectorised<T>) {
        const __m256 one = _mm256_set1_ps(1.0f);
        for (; i + 8 <= cols; i += 8) {
          __m256 gov = load8(go + i), gv = load8(g + i), uv = load8(u + i);
          __m256 s = sigmoid8(gv);
          __m256 gs = _mm256_mul_ps(gov, s);
          store8(du + i, _mm256_mul_ps(gs, gv));
          // d gate = go · up · s · (1 + g (1 − s))
          __m256 t = _mm256_fmadd_ps(gv, _mm256_sub_ps(one, s), one);
          store8(dg + i, _mm256_mul_ps(_mm256_mul_ps(gs, uv), t));
        }
      }
#endif
      for (; i < cols; ++i) {
        C gov = C(go[i]), gv = C(g[i]), uv = C(u[i]);
        C s = C(1) / (C(1) + std::exp(-gv));
        du[i] = cast_scalar<T>(gov * s * gv);
        dg[i] = cast_scalar<T>(gov * uv * s * (C(1) + gv * (C(1) - s)));
      }
    }
  });
}

// Rows of a tensor whose last dim has unit stride and whose leading dims collapse to one stride.
bool row_layout(const Tensor& t, int64_t& rows, int64_t& cols, int64_t& stride) {
  cols = t.dim() ? t.size(-1) : 1;
  rows = cols ? t.numel() / cols : 0;
  if (t.dim() == 0) { stride = 1; return true; }
  if (t.stride(-1) != 1 && cols > 1) return false;
  if (t.dim() == 1) { stride = cols; return true; }
  stride = t.stride(-2);
  // leading dims must be uniformly spaced rows
  int64_t expect = stride;
  for (int d = t.dim() - 2; d >= 0; --d) {
    if (t.shape()[d] != 1 && t.strides()[d] != expect) return false;
    expect *= t.shape()[d];
  }
  return true;
}

Tensor as_rows(const Tensor& t, int64_t& rows, int64_t& cols, int64_t& stride) {
  if (row_layout(t, rows, cols, stride)) return t;
  Tensor c = t.contiguous();
  row_layout(c, rows, cols, stride);
  return c;
}

void check_pair(const Tensor& gate, const Tensor& up, const char* op) {
  check_same_dtype(gate, up, op);
  check_floating(gate, op, "gate");
  LOOM_CHECK(gate.shape() == up.shape(), ShapeError, op, ": gate ", gate.shape().str(), " and up ",
             up.shape().str(), " must have equal shapes");
}

}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  check_pair(gate, up, "swiglu");
  int64_t rows, cols, gs, us;
  Tensor g = as_rows(gate, rows, cols, gs), u = as_rows(up, rows, cols, us);
  Tensor out = Tensor::empty(gate.shape(), gate.dtype());
  LOOM_DISPATCH_FLOATING(gate.dtype(), "swiglu", [&] {
    using T = scalar_t;
    forward_rows<T>(rows, cols, {static_cast<const T*>(g.raw_data()), gs}, {static_cast<const T*>(u.raw_data()), us},
                    {out.data<T>(), cols});
  });
  return out;
}

void swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up, Tensor& d_gate, Tensor& d_up) {
  check_pair(gate, up, "swiglu_backward");
  LOOM_CHECK(grad.shape() == gate.shape(), ShapeError, "swiglu_backward: grad ", grad.shape().str(),
             " must match gate ", gate.shape().str());
  int64_t rows, cols, gs, us, os;
  Tensor g = as_rows(gate, rows, cols, gs), u = as_rows(up, rows, cols, us), go = as_rows(grad.to(gate.dtype()), rows, cols, os);
  d_gate = Tensor::empty(gate.shape(), gate.dtype());
  d_up = Tensor::empty(up.shape(), up.dtype());
  LOOM_DISPATCH_FLOATING(gate.dtype(), "swiglu_backward", [&] {
    using T = scalar_t;
    backward_rows<T>(rows, cols, {static_cast<const T*>(go.raw_data()), os}, {static_cast<const T*>(g.raw_data()), gs},
                     {static_cast<const T*>(u.raw_data()), us}, {d_gate.data<T>(), cols}, {d_up.data<T>(), cols});
  });
}

Tensor swiglu_packed(const Tensor& h) {
  check_floating(h, "swiglu", "input");
  LOOM_CHECK(h.dim() >= 1 && h.size(-1) % 2 == 0, ShapeError, "swiglu: the last dim of ", h.shape().str(),
             " must be even (gate half then up half)");
  Tensor hc = h.contiguous();
  const int64_t width = hc.size(-1), F = width / 2, rows = width ? hc.numel() / width : 0;
  Shape out_shape = h.shape();
  out_shape[out_shape.ndim() - 1] = F;
  Tensor out = Tensor::empty(out_shape, h.dtype());
  LOOM_DISPATCH_FLOATING(h.dtype(), "swiglu", [&] {
    using T = scalar_t;
    const T* base = hc.data<T>();
    forward_rows<T>(rows, F, {base, width}, {base + F, width}, {out.data<T>(), F});
  });
  return out;
}

Tensor swiglu_packed_backward(const Tensor& grad, const Tensor& h) {
  Tensor hc = h.contiguous(), gc = grad.to(h.dtype()).contiguous();
  const int64_t width = hc.size(-1), F = width / 2, rows = width ? hc.numel() / width : 0;
  LOOM_CHECK(gc.numel() == rows * F, ShapeError, "swiglu_backward: grad ", grad.shape().str(), " does not match input ",
             h.shape().str());
  Tensor dh = Tensor::empty(h.shape(), h.dtype());
  LOOM_DISPATCH_FLOATING(h.dtype(), "swiglu_backward", [&] {
    using T = scalar_t;
    const T* base = hc.data<T>();
    T* d = dh.data<T>();
    backward_rows<T>(rows, F, {gc.data<T>(), F}, {base, width}, {base + F, width}, {d, width}, {d + F, width});
  });
  return dh;
}

}  // namespace loom::kernels::cpu
