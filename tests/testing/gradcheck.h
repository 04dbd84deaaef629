// Finite-difference gradient check in float64. The op's output y is reduced with fixed random
// weights R to L = Σ y·R; analytic dL/dx from backward is compared with the central difference
// (L(x+ε) − L(x−ε)) / 2ε for every element of every input that requires grad.
// Error measure: |analytic − numeric| / max(|analytic|, |numeric|, 1e-3).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "loom/autograd/engine.h"
#include "loom/autograd/grad_mode.h"
#include "loom/core/rng.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/reduce.h"

namespace loom::testing {

using OpFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Random f64 tensor with values in [lo, hi) from a fixed stream (`seed` picks the stream).
inline Tensor random_f64(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f64);
  fill_uniform(t, lo, hi, RngState{seed, 7, 0});
  return t;
}

inline double loss_value(const OpFn& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& weights) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> ys = f(inputs);
  double total = 0;
  for (size_t k = 0; k < ys.size(); ++k) {
    if (!weights[k].defined()) continue;
    std::vector<double> y = ys[k].to_double_vector(), w = weights[k].to_double_vector();
    for (size_t i = 0; i < y.size(); ++i) total += y[i] * w[i];
  }
  return total;
}

// Returns the largest error seen (and records a gtest failure above tol).
inline double gradcheck(const OpFn& f, std::vector<Tensor> inputs, double tol = 1e-6,
                        double eps = 1e-6, const std::string& what = "") {
  for (auto& x : inputs) {
    if (x.defined()) {
      EXPECT_EQ(x.dtype(), DType::f64) << "gradcheck inputs must be float64";
    }
  }
  // Analytic grads.
  std::vector<Tensor> ys = f(inputs);
  std::vector<Tensor> weights;
  Tensor loss;
  for (size_t k = 0; k < ys.size(); ++k) {
    if (!ys[k].defined() || !ys[k].requires_grad() || ys[k].dtype() != DType::f64) {
      weights.emplace_back();
      continue;
    }
    weights.push_back(random_f64(ys[k].shape(), 1000 + k));
    Tensor term = ops::sum(ops::mul(ys[k], weights.back()));
    loss = loss.defined() ? ops::add(loss, term) : term;
  }
  EXPECT_TRUE(loss.defined()) << what << ": no differentiable output";
  if (!loss.defined()) return 1e30;
  for (auto& x : inputs) if (x.defined() && x.requires_grad()) x.set_grad(Tensor());
  autograd::backward(loss);
  double worst = 0;
  for (size_t j = 0; j < inputs.size(); ++j) {
    Tensor& x = inputs[j];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor analytic = x.grad().defined() ? x.grad() : Tensor::zeros(x.shape(), DType::f64);
    std::vector<double> a = analytic.to_double_vector();
    double* px = x.data<double>();
    EXPECT_TRUE(x.is_contiguous());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double orig = px[i];
      px[i] = orig + eps;
      double lp = loss_value(f, inputs, weights);
      px[i] = orig - eps;
      double lm = loss_value(f, inputs, weights);
      px[i] = orig;
      double numeric = (lp - lm) / (2 * eps);
      double err = std::abs(a[i] - numeric) / std::max({std::abs(a[i]), std::abs(numeric), 1e-3});
      worst = std::max(worst, err);
      if (err > tol) {
        ADD_FAILURE() << what << ": input " << j << " element " << i << ": analytic " << a[i]
                      << " vs numeric " << numeric << " (rel err " << err << ")";
        return err;
      }
    }
  }
  return worst;
}

// Leaf f64 tensor requiring grad.
inline Tensor leaf(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t = random_f64(shape, seed, lo, hi);
  t.set_requires_grad(true);
  return t;
}

}  // namespace loom::testing
