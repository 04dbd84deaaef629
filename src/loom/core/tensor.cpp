#include "loom/core/tensor.h"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "loom/core/scalar_cast.h"
#include "loom/core/strided_loop.h"

namespace loom {

namespace {

std::shared_ptr<TensorImpl> make_impl(const Shape& shape, DType dtype, Device device,
                                      CachingAllocator* pool = nullptr) {
  for (int i = 0; i < shape.ndim(); ++i)
    LOOM_CHECK(shape[i] >= 0, ShapeError, "negative dimension ", shape[i], " in shape ",
               shape.str());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape.numel()) * dtype_size(dtype),
                                            device, pool);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->device = device;
  return impl;
}

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->device = base.device();
  return Tensor(std::move(impl));
}

// Resolves a single -1 in `shape` against numel.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.ndim(); ++i) {
    if (out[i] == -1) {
      LOOM_CHECK(infer < 0, ShapeError, op, ": only one dimension can be -1, got ", shape.str());
      infer = i;
    } else {
      LOOM_CHECK(out[i] >= 0, ShapeError, op, ": invalid dimension ", out[i], " in ", shape.str());
      known *= out[i];
    }
  }
  if (infer >= 0) {
    LOOM_CHECK(known > 0 && numel % known == 0, ShapeError, op, ": cannot infer -1 in ",
               shape.str(), " for ", numel, " elements (from ", from.str(), ")");
    out[infer] = numel / known;
  }
  LOOM_CHECK(out.numel() == numel, ShapeError, op, ": shape ", shape.str(), " has ", out.numel(),
             " elements but the tensor ", from.str(), " has ", numel);
  return out;
}

// Strides for viewing (shape, strides) as new_shape without copying; false if impossible.
// (The chunk-matching algorithm of ATen's computeStride.)
bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape, Shape& out) {
  out = new_shape;
  if (shape.numel() == 0 || shape.ndim() == 0) {
    out = contiguous_strides(new_shape);
    return true;
  }
  int view_d = new_shape.ndim() - 1;
  int64_t chunk_base_stride = strides[shape.ndim() - 1];
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = shape.ndim() - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= shape[tensor_d];
    if (tensor_d == 0 ||
        (shape[tensor_d - 1] != 1 && strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

// ---- Factories -----------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return Tensor(make_impl(shape, dtype, device));
}

Tensor Tensor::empty_in_pool(const Shape& shape, DType dtype, CachingAllocator& pool) {
  return Tensor(make_impl(shape, dtype, Device::cpu(), &pool));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (!device.is_meta() && t.nbytes()) std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (!device.is_meta()) t.fill_(value);
  return t;
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  Tensor t = empty({n}, dtype);
  LOOM_DISPATCH_ALL(dtype, "arange", [&] {
    auto* p = t.data<scalar_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = cast_scalar<scalar_t>(static_cast<double>(i));
  });
  return t;
}

template <typename V>
static Tensor from_values(const std::vector<V>& values, const Shape& shape, DType dtype) {
  LOOM_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), ShapeError, "from_vector: ",
             values.size(), " values do not fill shape ", shape.str());
  Tensor t = Tensor::empty(shape, dtype);
  LOOM_DISPATCH_ALL(dtype, "from_vector", [&] {
    auto* p = t.data<scalar_t>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = cast_scalar<scalar_t>(values[i]);
  });
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& s, DType d) { return from_values(v, s, d); }
Tensor Tensor::from_vector(const std::vector<double>& v, const Shape& s, DType d) { return from_values(v, s, d); }
Tensor Tensor::from_vector(const std::vector<int64_t>& v, const Shape& s, DType d) { return from_values(v, s, d); }
Tensor Tensor::from_vector(const std::vector<int32_t>& v, const Shape& s, DType d) { return from_values(v, s, d); }

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype,
                         std::function<void(void*)> release) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, static_cast<size_t>(shape.numel()) * dtype_size(dtype),
                                            Device::cpu(), std::move(release));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::scalar(double value, DType dtype) { return full(Shape{}, value, dtype); }

// ---- Properties ----------------------------------------------------------------------------

bool Tensor::is_contiguous() const {
  const auto& im = impl();
  int64_t expected = 1;
  for (int i = im.shape.ndim() - 1; i >= 0; --i) {
    if (im.shape[i] == 1) continue;
    if (im.strides[i] != expected) return false;
    expected *= im.shape[i];
  }
  return true;
}

bool Tensor::shares_storage_with(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

void* Tensor::raw_data() const {
  const auto& im = impl();
  LOOM_CHECK(!im.device.is_meta(), DeviceError,
             "this tensor lives on the meta device (shapes only, no data): materialise the model "
             "before reading or writing its values");
  if (!im.storage || !im.storage->data()) return nullptr;
  return static_cast<char*>(im.storage->data()) + im.offset * static_cast<int64_t>(dtype_size(im.dtype));
}

// ---- Views ---------------------------------------------------------------------------------

Tensor Tensor::view(const Shape& shape) const {
  Shape target = infer_shape(shape, numel(), "view", this->shape());
  Shape strides;
  LOOM_CHECK(view_strides(this->shape(), this->strides(), target, strides), ShapeError,
             "view: cannot view a tensor of shape ", this->shape().str(), " with strides ",
             this->strides().str(), " as ", target.str(),
             " without copying; call reshape() (which copies) or contiguous() first");
  return make_view(*this, target, strides, offset());
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape target = infer_shape(shape, numel(), "reshape", this->shape());
  Shape strides;
  if (view_strides(this->shape(), this->strides(), target, strides))
    return make_view(*this, target, strides, offset());
  return contiguous().view(target);
}

Tensor Tensor::transpose(int d0, int d1) const {
  int a = normalize_dim(d0, dim(), "transpose"), b = normalize_dim(d1, dim(), "transpose");
  Shape s = shape(), st = strides();
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  return make_view(*this, s, st, offset());
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  LOOM_CHECK(static_cast<int>(order.size()) == dim(), ShapeError, "permute: order has ",
             order.size(), " entries for a ", dim(), "-d tensor");
  Shape s, st;
  std::vector<bool> seen(dim(), false);
  for (int o : order) {
    int d = normalize_dim(o, dim(), "permute");
    LOOM_CHECK(!seen[d], ShapeError, "permute: dimension ", d, " appears twice");
    seen[d] = true;
    s.push_back(shape()[d]);
    st.push_back(strides()[d]);
  }
  return make_view(*this, s, st, offset());
}

Tensor Tensor::slice(int d, int64_t start, int64_t end, int64_t step) const {
  int k = normalize_dim(d, dim(), "slice");
  int64_t n = shape()[k];
  LOOM_CHECK(step >= 1, ValueError, "slice: step must be >= 1, got ", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape(), st = strides();
  s[k] = (end - start + step - 1) / step;
  st[k] = strides()[k] * step;
  return make_view(*this, s, st, offset() + start * strides()[k]);
}

Tensor Tensor::narrow(int d, int64_t start, int64_t length) const {
  int k = normalize_dim(d, dim(), "narrow");
  LOOM_CHECK(start >= 0 && length >= 0 && start + length <= shape()[k], ShapeError,
             "narrow: range [", start, ", ", start + length, ") is outside dimension ", k,
             " of size ", shape()[k]);
  return slice(k, start, start + length);
}

Tensor Tensor::select(int d, int64_t index) const {
  int k = normalize_dim(d, dim(), "select");
  int64_t n = shape()[k];
  if (index < 0) index += n;
  LOOM_CHECK(index >= 0 && index < n, ShapeError, "select: index ", index,
             " out of range for dimension ", k, " of size ", n);
  Shape s = shape(), st = strides();
  int64_t off = offset() + index * st[k];
  s.erase(k);
  st.erase(k);
  return make_view(*this, s, st, off);
}

Tensor Tensor::expand(const Shape& target) const {
  LOOM_CHECK(target.ndim() >= dim(), ShapeError, "expand: cannot expand ", shape().str(), " to ",
             target.str(), " (fewer dimensions)");
  Shape s, st;
  const int lead = target.ndim() - dim();
  for (int i = 0; i < target.ndim(); ++i) {
    int64_t want = target[i];
    if (i < lead) {
      s.push_back(want);
      st.push_back(0);
      continue;
    }
    int64_t have = shape()[i - lead];
    if (want == -1) want = have;
    LOOM_CHECK(have == want || have == 1, ShapeError, "expand: dimension ", i, " of ",
               shape().str(), " is ", have, " and cannot be expanded to ", want,
               " (only size-1 dimensions broadcast)");
    s.push_back(want);
    st.push_back(have == want ? strides()[i - lead] : 0);
  }
  return make_view(*this, s, st, offset());
}

Tensor Tensor::squeeze(int d) const {
  int k = normalize_dim(d, dim(), "squeeze");
  LOOM_CHECK(shape()[k] == 1, ShapeError, "squeeze: dimension ", k, " of ", shape().str(),
             " has size ", shape()[k], ", not 1");
  Shape s = shape(), st = strides();
  s.erase(k);
  st.erase(k);
  return make_view(*this, s, st, offset());
}

Tensor Tensor::unsqueeze(int d) const {
  int k = normalize_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape(), st = strides();
  int64_t stride = k < dim() ? strides()[k] * shape()[k] : 1;
  s.insert(k, 1);
  st.insert(k, stride);
  return make_view(*this, s, st, offset());
}

Tensor Tensor::as_strided(const Shape& s, const Shape& st, int64_t off) const {
  LOOM_CHECK(s.ndim() == st.ndim(), ShapeError, "as_strided: shape ", s.str(), " and strides ",
             st.str(), " differ in length");
  // Bounds: the largest reachable element must lie inside the storage.
  int64_t max_off = off;
  for (int i = 0; i < s.ndim(); ++i)
    if (s[i] > 0) max_off += (s[i] - 1) * st[i];
  if (s.numel() > 0 && storage()) {
    int64_t cap = static_cast<int64_t>(storage()->nbytes() / element_size());
    LOOM_CHECK(off >= 0 && max_off < cap, ShapeError, "as_strided: view reaches element ", max_off,
               " but the storage holds ", cap);
  }
  return make_view(*this, s, st, off);
}

// ---- Copies --------------------------------------------------------------------------------

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  if (!is_meta()) out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target, device());
  if (!is_meta()) out.copy_(*this);
  return out;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->autograd.reset();
  return Tensor(std::move(impl));
}

Tensor& Tensor::copy_(const Tensor& src) {
  LOOM_CHECK(src.defined(), Error, "copy_: source tensor is undefined");
  check_device_supported(device(), "copy_");
  check_device_supported(src.device(), "copy_");
  Tensor s = src.shape() == shape() ? src : src.expand(shape());
  if (s.dtype() == dtype() && s.is_contiguous() && is_contiguous()) {
    if (nbytes()) std::memmove(raw_data(), s.raw_data(), nbytes());
    return *this;
  }
  LOOM_DISPATCH_ALL(dtype(), "copy_", [&] {
    using dst_t = scalar_t;
    auto* dst = static_cast<dst_t*>(raw_data());
    LOOM_DISPATCH_ALL(s.dtype(), "copy_", [&] {
      using src_t = scalar_t;
      const auto* sp = static_cast<const src_t*>(s.raw_data());
      for_each_row<2>(shape(), {strides(), s.strides()},
                      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& inc) {
                        dst_t* d = dst + off[0];
                        const src_t* p = sp + off[1];
                        if (inc[0] == 1 && inc[1] == 1) {
                          for (int64_t i = 0; i < n; ++i) d[i] = cast_scalar<dst_t>(p[i]);
                        } else {
                          for (int64_t i = 0; i < n; ++i) d[i * inc[0]] = cast_scalar<dst_t>(p[i * inc[1]]);
                        }
                      });
    });
  });
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_device_supported(device(), "fill_");
  LOOM_DISPATCH_ALL(dtype(), "fill_", [&] {
    const scalar_t v = cast_scalar<scalar_t>(value);
    auto* dst = static_cast<scalar_t*>(raw_data());
    for_each_row<1>(shape(), {strides()},
                    [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& inc) {
                      scalar_t* d = dst + off[0];
                      for (int64_t i = 0; i < n; ++i) d[i * inc[0]] = v;
                    });
  });
  return *this;
}

// ---- Element access ------------------------------------------------------------------------

double Tensor::item() const {
  LOOM_CHECK(numel() == 1, ShapeError, "item(): tensor of shape ", shape().str(), " has ", numel(),
             " elements, expected exactly 1");
  return LOOM_DISPATCH_ALL(dtype(), "item", [&]() -> double {
    return cast_scalar<double>(*static_cast<const scalar_t*>(raw_data()));
  });
}

double Tensor::at(const std::vector<int64_t>& index) const {
  LOOM_CHECK(static_cast<int>(index.size()) == dim(), ShapeError, "at(): ", index.size(),
             " indices for a ", dim(), "-d tensor");
  int64_t off = 0;
  for (int i = 0; i < dim(); ++i) {
    LOOM_CHECK(index[i] >= 0 && index[i] < shape()[i], ShapeError, "at(): index ", index[i],
               " out of range for dimension ", i, " of size ", shape()[i]);
    off += index[i] * strides()[i];
  }
  return LOOM_DISPATCH_ALL(dtype(), "at", [&]() -> double {
    return cast_scalar<double>(static_cast<const scalar_t*>(raw_data())[off]);
  });
}

std::vector<double> Tensor::to_double_vector() const {
  Tensor c = to(DType::f64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

std::vector<float> Tensor::to_float_vector() const {
  Tensor c = to(DType::f32).contiguous();
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

std::vector<int64_t> Tensor::to_int_vector() const {
  Tensor c = to(DType::i64).contiguous();
  const int64_t* p = c.data<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

std::string Tensor::str(int max_elements) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape().str() << ", dtype=" << dtype_name(dtype()) << ", device="
     << device().str();
  if (!is_meta() && numel() > 0) {
    std::vector<double> v = to_double_vector();
    os << ", values=[" << std::setprecision(6);
    int64_t n = std::min<int64_t>(numel(), max_elements);
    for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << v[i];
    if (n < numel()) os << ", ...";
    os << "]";
  }
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// ---- Autograd metadata ---------------------------------------------------------------------

AutogradMeta& Tensor::autograd_meta() const {
  LOOM_CHECK(impl_ != nullptr, Error, "use of an undefined tensor");
  if (!impl_->autograd) impl_->autograd = std::make_shared<AutogradMeta>();
  return *impl_->autograd;
}

bool Tensor::requires_grad() const { return impl_ && impl_->autograd && impl_->autograd->requires_grad; }

Tensor& Tensor::set_requires_grad(bool value) {
  if (value)
    LOOM_CHECK(is_floating(dtype()), DTypeError, "only floating-point tensors can require grad; got ",
               dtype_name(dtype()));
  LOOM_CHECK(!value || !impl_->autograd || !impl_->autograd->grad_fn, AutogradError,
             "set_requires_grad is for leaf tensors; this tensor was produced by an op");
  autograd_meta().requires_grad = value;
  return *this;
}

bool Tensor::is_leaf() const { return !impl_ || !impl_->autograd || !impl_->autograd->grad_fn; }

const Tensor& Tensor::grad() const {
  static const Tensor kUndefined;
  if (!impl_ || !impl_->autograd) return kUndefined;
  return impl_->autograd->grad;
}

Tensor& Tensor::mutable_grad() { return autograd_meta().grad; }
void Tensor::set_grad(const Tensor& g) { autograd_meta().grad = g; }

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> kNone;
  if (!impl_ || !impl_->autograd) return kNone;
  return impl_->autograd->grad_fn;
}

const std::string& Tensor::name() const {
  static const std::string kEmpty;
  if (!impl_ || !impl_->autograd) return kEmpty;
  return impl_->autograd->name;
}

Tensor& Tensor::set_name(const std::string& n) {
  autograd_meta().name = n;
  return *this;
}

// ---- Checks --------------------------------------------------------------------------------

void check_dtype(const Tensor& t, DType expected, const char* op, const char* arg) {
  LOOM_CHECK(t.dtype() == expected, DTypeError, op, ": ", arg, " must be ", dtype_name(expected),
             ", got ", dtype_name(t.dtype()));
}

void check_floating(const Tensor& t, const char* op, const char* arg) {
  LOOM_CHECK(is_floating(t.dtype()), DTypeError, op, ": ", arg,
             " must be a floating-point tensor, got ", dtype_name(t.dtype()));
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  LOOM_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": dtypes differ (", dtype_name(a.dtype()),
             " vs ", dtype_name(b.dtype()), "); cast one of them first");
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  LOOM_CHECK(a.device() == b.device(), DeviceError, op, ": tensors are on different devices (",
             a.device().str(), " vs ", b.device().str(), ")");
}

void check_ndim(const Tensor& t, int ndim, const char* op, const char* arg) {
  LOOM_CHECK(t.dim() == ndim, ShapeError, op, ": ", arg, " must be ", ndim, "-d, got shape ",
             t.shape().str());
}

}  // namespace loom
