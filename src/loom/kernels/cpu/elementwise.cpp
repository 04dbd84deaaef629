#include "loom/kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>

#include "loom/core/parallel.h"
#include "loom/core/scalar_cast.h"
#include "loom/core/strided_loop.h"
#include "loom/kernels/cpu/vec.h"

namespace loom::kernels::cpu {

namespace {

template <typename C>
inline C apply_binary(BinaryOp op, C x, C y) {
  switch (op) {
    case BinaryOp::add: return x + y;
    case BinaryOp::sub: return x - y;
    case BinaryOp::mul: return x * y;
    case BinaryOp::div: return x / y;
    case BinaryOp::maximum: return (x > y || std::isnan(x)) ? x : y;
    case BinaryOp::minimum: return (x < y || std::isnan(x)) ? x : y;
  }
  return x;
}

template <typename C>
inline C sigmoid_of(C x) { return C(1) / (C(1) + std::exp(-x)); }

}  // namespace

namespace {

struct AddF { template <typename C> C operator()(C x, C y) const { return x + y; } };
struct SubF { template <typename C> C operator()(C x, C y) const { return x - y; } };
struct MulF { template <typename C> C operator()(C x, C y) const { return x * y; } };
struct DivF { template <typename C> C operator()(C x, C y) const { return x / y; } };
struct MaxF { template <typename C> C operator()(C x, C y) const { return apply_binary(BinaryOp::maximum, x, y); } };
struct MinF { template <typename C> C operator()(C x, C y) const { return apply_binary(BinaryOp::minimum, x, y); } };

// Calls body(functor) with the functor type for `op`, so the inner loops are specialised per op
// (and vectorise) instead of switching per element.
template <typename Body>
void with_binary_functor(BinaryOp op, Body&& body) {
  switch (op) {
    case BinaryOp::add: return body(AddF{});
    case BinaryOp::sub: return body(SubF{});
    case BinaryOp::mul: return body(MulF{});
    case BinaryOp::div: return body(DivF{});
    case BinaryOp::maximum: return body(MaxF{});
    case BinaryOp::minimum: return body(MinF{});
  }
}

// out[i] = f(a[i], b[i]) over [s, e) of contiguous tensors, in the compute type.
template <typename T, typename F>
void binary_flat(F f, const T* a, const T* b, T* out, int64_t s, int64_t e) {
  using C = compute_t<T>;
  for (int64_t i = s; i < e; ++i) out[i] = cast_scalar<T>(f(C(a[i]), C(b[i])));
}

// bf16 (the residual adds of bf16 compute): widened and rounded a block at a time by the vector
// conversions, the same values as the scalar ones, at memory speed.
template <typename F>
void binary_flat(F f, const bf16* a, const bf16* b, bf16* out, int64_t s, int64_t e) {
  constexpr int64_t kBlock = 512;
  float xa[kBlock], xb[kBlock];
  for (int64_t i = s; i < e; i += kBlock) {
    const int64_t n = std::min(kBlock, e - i);
    vec::widen_row(a + i, xa, n);
    vec::widen_row(b + i, xb, n);
    for (int64_t j = 0; j < n; ++j) xa[j] = f(xa[j], xb[j]);
    vec::narrow_row(xa, out + i, n);
  }
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_same_dtype(a, b, name);
  check_floating(a, name, "input");
  check_same_device(a, b, name);
  check_device_supported(a.device(), name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, a.dtype());
  Tensor ae = a.shape() == shape ? a : a.expand(shape);
  Tensor be = b.shape() == shape ? b : b.expand(shape);
  LOOM_DISPATCH_FLOATING(a.dtype(), name, [&] {
    using C = compute_t<scalar_t>;
    scalar_t* o = out.data<scalar_t>();
    const scalar_t* pa = static_cast<const scalar_t*>(ae.raw_data());
    const scalar_t* pb = static_cast<const scalar_t*>(be.raw_data());
    with_binary_functor(op, [&](auto f) {
      if (ae.is_contiguous() && be.is_contiguous()) {
        parallel_for(0, out.numel(), 32768, [&](int64_t s, int64_t e) { binary_flat(f, pa, pb, o, s, e); });
        return;
      }
      for_each_row<3>(shape, {out.strides(), ae.strides(), be.strides()},
                      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& inc) {
                        scalar_t* po = o + off[0];
                        const scalar_t* x = pa + off[1];
                        const scalar_t* y = pb + off[2];
                        if (inc[1] == 1 && inc[2] == 1) {
                          for (int64_t i = 0; i < n; ++i) po[i] = cast_scalar<scalar_t>(f(C(x[i]), C(y[i])));
                        } else if (inc[1] == 1 && inc[2] == 0) {
                          const C yv = C(y[0]);
                          for (int64_t i = 0; i < n; ++i) po[i] = cast_scalar<scalar_t>(f(C(x[i]), yv));
                        } else if (inc[1] == 0 && inc[2] == 1) {
                          const C xv = C(x[0]);
                          for (int64_t i = 0; i < n; ++i) po[i] = cast_scalar<scalar_t>(f(xv, C(y[i])));
                        } else {
                          for (int64_t i = 0; i < n; ++i)
                            po[i] = cast_scalar<scalar_t>(f(C(x[i * inc[1]]), C(y[i * inc[2]])));
                        }
                      });
    });
  });
  return out;
}

namespace {

// out = fn(a) elementwise (fn takes and returns the compute type), contiguous inputs as one flat
// loop, strided ones row by row. Shared by unary ops and affine.
template <typename Fn>
Tensor map_elements(const Tensor& a, const char* name, Fn&& fn) {
  check_floating(a, name, "input");
  check_device_supported(a.device(), name);
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  LOOM_DISPATCH_FLOATING(a.dtype(), name, [&] {
    using C = compute_t<scalar_t>;
    scalar_t* o = out.data<scalar_t>();
    const scalar_t* pa = static_cast<const scalar_t*>(a.raw_data());
    if (a.is_contiguous()) {
      parallel_for(0, a.numel(), 16384, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) o[i] = cast_scalar<scalar_t>(fn(C(pa[i])));
      });
      return;
    }
    for_each_row<2>(a.shape(), {out.strides(), a.strides()},
                    [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& inc) {
                      scalar_t* po = o + off[0];
                      const scalar_t* x = pa + off[1];
                      for (int64_t i = 0; i < n; ++i) po[i] = cast_scalar<scalar_t>(fn(C(x[i * inc[1]])));
                    });
  });
  return out;
}

// Calls body(functor) with a functor for `op`, so each op gets its own specialised loop instead
// of a switch per element.
template <typename Body>
Tensor with_unary_functor(UnaryOp op, Body&& body) {
  switch (op) {
    case UnaryOp::neg: return body([](auto x) { return -x; });
    case UnaryOp::exp: return body([](auto x) { return std::exp(x); });
    case UnaryOp::log: return body([](auto x) { return std::log(x); });
    case UnaryOp::sqrt: return body([](auto x) { return std::sqrt(x); });
    case UnaryOp::rsqrt: return body([](auto x) { return decltype(x)(1) / std::sqrt(x); });
    case UnaryOp::square: return body([](auto x) { return x * x; });
    case UnaryOp::abs: return body([](auto x) { return std::abs(x); });
    case UnaryOp::sigmoid: return body([](auto x) { return sigmoid_of(x); });
    case UnaryOp::silu: return body([](auto x) { return x * sigmoid_of(x); });
    case UnaryOp::tanh: return body([](auto x) { return std::tanh(x); });
    case UnaryOp::relu: return body([](auto x) { return x > decltype(x)(0) ? x : decltype(x)(0); });
    case UnaryOp::reciprocal: return body([](auto x) { return decltype(x)(1) / x; });
  }
  LOOM_THROW(ValueError, "unknown unary op");
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& a, const char* name) {
  return with_unary_functor(op, [&](auto f) { return map_elements(a, name, f); });
}

Tensor affine(const Tensor& a, double scale, double shift) {
  return LOOM_DISPATCH_FLOATING(a.dtype(), "affine", [&] {
    using C = compute_t<scalar_t>;
    const C s = C(scale), t = C(shift);
    return map_elements(a, "affine", [s, t](C x) { return x * s + t; });
  });
}

void add_(Tensor& dst, const Tensor& src, double alpha) {
  check_floating(dst, "add_", "destination");
  check_floating(src, "add_", "source");
  Tensor s = src.shape() == dst.shape() ? src : src.expand(dst.shape());
  LOOM_DISPATCH_FLOATING(dst.dtype(), "add_", [&] {
    using D = scalar_t;
    D* d = static_cast<D*>(dst.raw_data());
    LOOM_DISPATCH_FLOATING(s.dtype(), "add_", [&] {
      using S = scalar_t;
      using C = std::conditional_t<std::is_same_v<D, double> || std::is_same_v<S, double>, double, float>;
      const C a = C(alpha);
      const S* p = static_cast<const S*>(s.raw_data());
      for_each_row<2>(dst.shape(), {dst.strides(), s.strides()},
                      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& inc) {
                        D* x = d + off[0];
                        const S* y = p + off[1];
                        if (inc[0] == 1 && inc[1] == 1) {
                          for (int64_t i = 0; i < n; ++i)
                            x[i] = cast_scalar<D>(cast_scalar<C>(x[i]) + a * cast_scalar<C>(y[i]));
                        } else {
                          for (int64_t i = 0; i < n; ++i)
                            x[i * inc[0]] = cast_scalar<D>(cast_scalar<C>(x[i * inc[0]]) +
                                                           a * cast_scalar<C>(y[i * inc[1]]));
                        }
                      });
    });
  });
}

void scale_(Tensor& dst, double value) {
  check_floating(dst, "scale_", "tensor");
  LOOM_DISPATCH_FLOATING(dst.dtype(), "scale_", [&] {
    using C = compute_t<scalar_t>;
    const C v = C(value);
    scalar_t* d = static_cast<scalar_t*>(dst.raw_data());
    if (dst.is_contiguous()) {
      // One flat range split across threads (a 1-D tensor is a single row to for_each_row, which
      // would run it on one thread): flat buffers such as sharded grads take this path.
      parallel_for(0, dst.numel(), 1 << 15, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) d[i] = cast_scalar<scalar_t>(C(d[i]) * v);
      });
      return;
    }
    for_each_row<1>(dst.shape(), {dst.strides()},
                    [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& inc) {
                      scalar_t* x = d + off[0];
                      for (int64_t i = 0; i < n; ++i) x[i * inc[0]] = cast_scalar<scalar_t>(C(x[i * inc[0]]) * v);
                    });
  });
}

// ---- Activations (contiguous inputs; the ops layer makes them so) ---------------------------

namespace {

template <typename Fn>
Tensor map1(const Tensor& x, const char* name, Fn fn) {
  check_floating(x, name, "input");
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const int64_t n = x.numel();
  LOOM_DISPATCH_FLOATING(x.dtype(), name, [&] {
    using C = compute_t<scalar_t>;
    const scalar_t* px = xc.data<scalar_t>();
    scalar_t* po = out.data<scalar_t>();
    parallel_for(0, n, 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) po[i] = cast_scalar<scalar_t>(fn(C(px[i])));
    });
  });
  return out;
}

template <typename Fn>
Tensor map2(const Tensor& a, const Tensor& b, const char* name, Fn fn) {
  check_same_dtype(a, b, name);
  LOOM_CHECK(a.shape() == b.shape(), ShapeError, name, ": shapes ", a.shape().str(), " and ",
             b.shape().str(), " must be equal");
  Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  const int64_t n = a.numel();
  LOOM_DISPATCH_FLOATING(a.dtype(), name, [&] {
    using C = compute_t<scalar_t>;
    const scalar_t* pa = ac.data<scalar_t>();
    const scalar_t* pb = bc.data<scalar_t>();
    scalar_t* po = out.data<scalar_t>();
    parallel_for(0, n, 16384, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = cast_scalar<scalar_t>(fn(C(pa[i]), C(pb[i])));
    });
  });
  return out;
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

}  // namespace

Tensor gelu(const Tensor& x, bool tanh_approx) {
  if (tanh_approx)
    return map1(x, "gelu", [](auto v) {
      using C = decltype(v);
      C inner = C(kSqrt2OverPi) * (v + C(0.044715) * v * v * v);
      return C(0.5) * v * (C(1) + std::tanh(inner));
    });
  return map1(x, "gelu", [](auto v) {
    using C = decltype(v);
    return C(0.5) * v * (C(1) + std::erf(v * C(kInvSqrt2)));
  });
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approx) {
  if (tanh_approx)
    return map2(grad, x, "gelu_backward", [](auto g, auto v) {
      using C = decltype(v);
      C inner = C(kSqrt2OverPi) * (v + C(0.044715) * v * v * v);
      C t = std::tanh(inner);
      C dinner = C(kSqrt2OverPi) * (C(1) + C(3 * 0.044715) * v * v);
      return g * (C(0.5) * (C(1) + t) + C(0.5) * v * (C(1) - t * t) * dinner);
    });
  return map2(grad, x, "gelu_backward", [](auto g, auto v) {
    using C = decltype(v);
    C cdf = C(0.5) * (C(1) + std::erf(v * C(kInvSqrt2)));
    C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * v * v);
    return g * (cdf + v * pdf);
  });
}

Tensor silu_backward(const Tensor& grad, const Tensor& x) {
  return map2(grad, x, "silu_backward", [](auto g, auto v) {
    using C = decltype(v);
    C s = C(1) / (C(1) + std::exp(-v));
    return g * s * (C(1) + v * (C(1) - s));
  });
}

Tensor sigmoid_backward(const Tensor& grad, const Tensor& y) {
  return map2(grad, y, "sigmoid_backward", [](auto g, auto s) { return g * s * (decltype(s)(1) - s); });
}

}  // namespace loom::kernels::cpu
