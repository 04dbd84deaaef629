// Small helpers shared by the optim tests: parameters with grads and json sections.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/tensor.h"
#include "loom/optim/named_param.h"

namespace loom::optim::testing {

inline Tensor make_param(const std::vector<float>& values, const Shape& shape,
                         DType dtype = DType::f32) {
  Tensor t = Tensor::from_vector(values, shape, dtype);
  t.set_requires_grad(true);
  return t;
}

inline void set_grad(Tensor& p, const std::vector<float>& g) {
  p.set_grad(Tensor::from_vector(g, p.shape(), DType::f32));
}

inline std::vector<float> random_values(int64_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

inline std::vector<float> random_bf16_values(int64_t n, uint32_t seed, float scale = 1.f) {
  std::vector<float> v = random_values(n, seed, scale);
  for (auto& x : v) x = round_to_bf16(x);
  return v;
}

inline nlohmann::ordered_json yaml_like(const std::string& json_text) {
  return nlohmann::ordered_json::parse(json_text);
}

}  // namespace loom::optim::testing
