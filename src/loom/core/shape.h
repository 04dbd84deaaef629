// Shape and strides: up to 8 dimensions stored inline (no heap traffic on the hot path).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace loom {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  // Negative index counts from the end (-1 = last).
  int64_t at(int i) const;
  int64_t numel() const;
  void push_back(int64_t d);
  void pop_back() { --ndim_; }
  void insert(int pos, int64_t d);
  void erase(int pos);
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + ndim_; }
  std::vector<int64_t> to_vector() const { return std::vector<int64_t>(begin(), end()); }
  std::string str() const;  // "[2, 3, 4]"

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// Row-major (C-order) strides for a shape.
Shape contiguous_strides(const Shape& shape);
// Normalise a possibly negative dim index against ndim, throwing ShapeError naming `op`.
int normalize_dim(int dim, int ndim, const char* op);
// numpy broadcasting of two shapes; throws ShapeError naming `op` when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace loom
