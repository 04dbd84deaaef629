// Tensor: a cheap handle (shared storage + element offset + shape + strides + dtype + device).
// Copies share data. The view methods here (view/reshape/transpose/permute/slice/narrow/expand/
// squeeze/unsqueeze) are raw: they never record autograd history. Models use the differentiable
// versions in loom/ops/ instead.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/device.h"
#include "loom/core/dtype.h"
#include "loom/core/error.h"
#include "loom/core/shape.h"
#include "loom/core/storage.h"

namespace loom {

namespace autograd { class Node; }
struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;       // in elements
  DType dtype = DType::f32;
  Device device;
  std::shared_ptr<AutogradMeta> autograd;  // null for tensors that never took part in autograd
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- Factories ---------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor empty_in_pool(const Shape& shape, DType dtype, CachingAllocator& pool);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  // 0, 1, ..., n-1
  static Tensor arange(int64_t n, DType dtype = DType::i64);
  // Copies `values` into a new tensor of `shape` (numel must match), cast to `dtype`.
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                            DType dtype = DType::f32);
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::f64);
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape,
                            DType dtype = DType::i64);
  static Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape,
                            DType dtype = DType::i32);
  // Wraps external memory (not copied); `release` runs when the storage dies.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype,
                          std::function<void(void*)> release = {});
  static Tensor scalar(double value, DType dtype = DType::f32);

  // ---- Properties --------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int dim() const { return impl().shape.ndim(); }
  int64_t size(int d) const { return impl().shape.at(d); }
  int64_t stride(int d) const { return impl().strides.at(d); }
  int64_t numel() const { return impl().shape.numel(); }
  DType dtype() const { return impl().dtype; }
  const Device& device() const { return impl().device; }
  int64_t offset() const { return impl().offset; }
  size_t element_size() const { return dtype_size(impl().dtype); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  bool is_meta() const { return defined() && impl().device.is_meta(); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  bool shares_storage_with(const Tensor& other) const;
  TensorImpl* impl_ptr() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_shared() const { return impl_; }

  // Pointer to element 0 (storage base + offset). Typed access checks the dtype.
  void* raw_data() const;
  template <typename T>
  T* data() const {
    LOOM_CHECK(dtype_of<T>::value == dtype(), DTypeError, "data<", dtype_name(dtype_of<T>::value),
               ">() called on a ", dtype_name(dtype()), " tensor");
    return static_cast<T*>(raw_data());
  }

  // ---- Raw views (share storage, no autograd) ----------------------------------------------
  Tensor view(const Shape& shape) const;      // needs a compatible (contiguous) layout; -1 infers
  Tensor reshape(const Shape& shape) const;   // view when possible, else a contiguous copy
  Tensor transpose(int d0, int d1) const;
  Tensor permute(const std::vector<int>& order) const;
  Tensor slice(int dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int dim, int64_t start, int64_t length) const;
  Tensor select(int dim, int64_t index) const;  // removes dim
  Tensor expand(const Shape& shape) const;      // broadcast size-1 dims (stride 0)
  Tensor squeeze(int dim) const;
  Tensor unsqueeze(int dim) const;
  Tensor flatten() const { return reshape({numel()}); }
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;

  // ---- Copies and conversions --------------------------------------------------------------
  Tensor contiguous() const;  // self when already contiguous
  Tensor clone() const;       // always a new contiguous tensor
  Tensor to(DType dtype) const;  // self when already that dtype
  // Same data, no autograd history (shares storage).
  Tensor detach() const;
  // Elementwise copy from src (broadcast to this shape, any dtypes), in place.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  // ---- Element access (tests, small tensors) -----------------------------------------------
  double item() const;                                  // numel must be 1
  double at(const std::vector<int64_t>& index) const;   // one element as double
  std::vector<float> to_float_vector() const;
  std::vector<double> to_double_vector() const;
  std::vector<int64_t> to_int_vector() const;

  std::string str(int max_elements = 64) const;  // shape, dtype and (some) values

  // ---- Autograd metadata (the engine lives in loom/autograd) -------------------------------
  bool requires_grad() const;
  // Marks a leaf as needing grads. Throws on non-floating dtypes.
  Tensor& set_requires_grad(bool value);
  bool is_leaf() const;
  const Tensor& grad() const;   // undefined tensor when no grad yet
  Tensor& mutable_grad();
  void set_grad(const Tensor& grad);
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  const std::string& name() const;
  Tensor& set_name(const std::string& name);
  AutogradMeta& autograd_meta() const;  // creates the metadata on first use
  bool has_autograd_meta() const { return impl_ && impl_->autograd != nullptr; }

 private:
  const TensorImpl& impl() const {
    LOOM_CHECK(impl_ != nullptr, Error, "use of an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

// Autograd state carried by a tensor. `grad` of a bf16/f16 leaf is fp32 (main grad).
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;  // producer; null for leaves
  uint32_t output_nr = 0;                   // which output of grad_fn this tensor is
  Tensor grad;
  std::string name;
  // Transform each grad contribution of a leaf before it accumulates (e.g. summing a replicated
  // parameter's partial grads over the ranks that share it).
  std::vector<std::function<Tensor(const Tensor& grad)>> grad_hooks;
  // Runs after a leaf's grad has been accumulated (FSDP/DP reduce per bucket while backward runs).
  std::vector<std::function<void(Tensor& param)>> post_accumulate_hooks;
  std::weak_ptr<autograd::Node> grad_accumulator;  // the leaf's AccumulateGrad node, reused
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Throws ShapeError/DTypeError naming `op` unless the tensor matches.
void check_dtype(const Tensor& t, DType expected, const char* op, const char* arg);
void check_floating(const Tensor& t, const char* op, const char* arg);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_ndim(const Tensor& t, int ndim, const char* op, const char* arg);

}  // namespace loom
