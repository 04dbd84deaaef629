#include "loom/core/shape.h"

#include <algorithm>
#include <sstream>

#include "loom/core/error.h"

namespace loom {

Shape::Shape(std::initializer_list<int64_t> dims) {
  LOOM_CHECK(static_cast<int>(dims.size()) <= kMaxDims, ShapeError, "a shape has at most ",
             kMaxDims, " dimensions, got ", dims.size());
  for (int64_t d : dims) dims_[ndim_++] = d;
}

Shape::Shape(const std::vector<int64_t>& dims) {
  LOOM_CHECK(static_cast<int>(dims.size()) <= kMaxDims, ShapeError, "a shape has at most ",
             kMaxDims, " dimensions, got ", dims.size());
  for (int64_t d : dims) dims_[ndim_++] = d;
}

int64_t Shape::at(int i) const {
  int j = i < 0 ? i + ndim_ : i;
  LOOM_CHECK(j >= 0 && j < ndim_, ShapeError, "dimension ", i, " out of range for shape ", str());
  return dims_[j];
}

int64_t Shape::numel() const {
  // Checked: a product of sizes that overflows would allocate a wrapped-around size and write
  // past it. Configured sizes are checked where the configuration is resolved; this is the net.
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i)
    LOOM_CHECK(!__builtin_mul_overflow(n, dims_[i], &n), ShapeError, "shape ", str(),
               " has more elements than a 64-bit count holds; the sizes that make it are too large");
  return n;
}

void Shape::push_back(int64_t d) {
  LOOM_CHECK(ndim_ < kMaxDims, ShapeError, "a shape has at most ", kMaxDims, " dimensions");
  dims_[ndim_++] = d;
}

void Shape::insert(int pos, int64_t d) {
  LOOM_CHECK(ndim_ < kMaxDims, ShapeError, "a shape has at most ", kMaxDims, " dimensions");
  LOOM_CHECK(pos >= 0 && pos <= ndim_, ShapeError, "insert position ", pos, " out of range");
  for (int i = ndim_; i > pos; --i) dims_[i] = dims_[i - 1];
  dims_[pos] = d;
  ++ndim_;
}

void Shape::erase(int pos) {
  LOOM_CHECK(pos >= 0 && pos < ndim_, ShapeError, "erase position ", pos, " out of range");
  for (int i = pos; i + 1 < ndim_; ++i) dims_[i] = dims_[i + 1];
  --ndim_;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < ndim_; ++i) os << (i ? ", " : "") << dims_[i];
  os << ']';
  return os.str();
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

Shape contiguous_strides(const Shape& shape) {
  Shape strides = shape;
  int64_t s = 1;
  for (int i = shape.ndim() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

int normalize_dim(int dim, int ndim, const char* op) {
  int d = dim < 0 ? dim + ndim : dim;
  LOOM_CHECK(d >= 0 && d < ndim, ShapeError, op, ": dim ", dim, " is out of range for a ", ndim,
             "-d tensor (valid: ", -ndim, "..", ndim - 1, ")");
  return d;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int n = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    LOOM_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": shapes ", a.str(), " and ",
               b.str(), " cannot be broadcast (dimension ", i - n, " is ", da, " vs ", db,
               "; sizes must match or be 1)");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

}  // namespace loom
