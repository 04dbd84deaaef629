#include "loom/dist/fsdp_unit.h"

#include <algorithm>
#include <cstring>

#include "loom/autograd/function.h"
#include "loom/autograd/grad_mode.h"
#include "loom/core/allocator.h"
#include "loom/core/trace.h"
#include "loom/kernels/kernel_table.h"

namespace loom::dist {

namespace {

// What a released parameter points at: the meta device, so a stray use raises DeviceError
// instead of reading freed memory.
const std::shared_ptr<Storage>& released_storage() {
  static const auto s = std::make_shared<Storage>(0, Device::meta());
  return s;
}

Tensor flat_buffer(int64_t numel, DType dtype, bool host) {
  Tensor t = host ? Tensor::empty_in_pool({numel}, dtype, host_pool()) : Tensor::empty({numel}, dtype);
  if (t.nbytes()) std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

int64_t rows_of_rank(const FsdpSlot& s, int r) {
  return std::clamp<int64_t>(s.rows - static_cast<int64_t>(r) * s.rows_per_rank, 0, s.rows_per_rank);
}

// The slot's shard: rows [row_begin, row_begin + local_rows) of the local tensor FSDP found.
Shape local_shape(const FsdpSlot& s) {
  Shape out = s.leaf.shape();
  out[0] = s.local_rows;
  return out;
}

// Parameter views saved for backward are kept as positions in the unit's full buffers and
// re-gathered on use, so resharding after forward really frees the gathered parameters.
class ParamViewHooks final : public autograd::SavedTensorHooks {
 public:
  explicit ParamViewHooks(std::weak_ptr<FsdpUnit> unit) : unit_(std::move(unit)) {}

  struct Packed {
    Tensor kept;
    int bucket = -1;
    int64_t offset = 0;
    Shape shape, strides;
  };

  std::shared_ptr<void> pack(const Tensor& tensor, const char*) override {
    auto p = std::make_shared<Packed>();
    if (auto unit = unit_.lock()) {
      const auto& buckets = unit->buckets();
      for (size_t b = 0; b < buckets.size(); ++b) {
        if (!buckets[b].full.defined() || tensor.storage().get() != buckets[b].full.storage().get()) continue;
        p->bucket = static_cast<int>(b);
        p->offset = tensor.offset();
        p->shape = tensor.shape();
        p->strides = tensor.strides();
        return p;
      }
    }
    p->kept = tensor;
    return p;
  }

  Tensor unpack(const std::shared_ptr<void>& packed) override {
    auto* p = static_cast<Packed*>(packed.get());
    if (p->bucket < 0) return p->kept;
    auto unit = unit_.lock();
    LOOM_CHECK(unit != nullptr, AutogradError, "FSDP: a saved parameter view outlived its unit");
    unit->unshard();
    return unit->buckets()[static_cast<size_t>(p->bucket)].full.as_strided(p->shape, p->strides, p->offset);
  }

 private:
  std::weak_ptr<FsdpUnit> unit_;
};

}  // namespace

FsdpUnit::FsdpUnit(std::string name, FsdpUnitConfig config, std::shared_ptr<ProcessGroup> shard_group,
                   std::shared_ptr<ProcessGroup> replicate_group)
    : name_(std::move(name)), config_(config), shard_group_(std::move(shard_group)),
      replicate_group_(std::move(replicate_group)) {
  if (replicate_group_ && replicate_group_->size() == 1) replicate_group_.reset();
}

void FsdpUnit::add_param(const std::string& name, nn::Parameter* param) {
  add_param(name, param, {shard_group_, config_.shard_axis});
}

void FsdpUnit::add_param(const std::string& name, nn::Parameter* param, const FsdpShardGroup& shard) {
  const DType dt = param->dtype;
  LOOM_CHECK(dt == DType::f32 || dt == DType::bf16 || dt == DType::f16, DTypeError, "FSDP: parameter '", name,
             "' has dtype ", dtype_name(dt), "; FSDP shards float32, bfloat16 or float16 parameters");
  // FSDP shards whatever local tensor it finds: the whole parameter, or the slice an inner
  // strategy (TP, EP) left, as its placement says.
  const Shape local = param->local_shape();
  LOOM_CHECK(param->tensor.defined() && param->tensor.shape() == local, ShapeError, "FSDP: parameter '", name, "' is ",
             param->tensor.defined() ? param->tensor.shape().str() : std::string("undefined"),
             " but its placement says this rank holds ", local.str(), " of ", param->global_shape.str(),
             "; a strategy that splits a parameter must record the split in Parameter::placement");
  LOOM_CHECK(local.ndim() >= 1, ShapeError, "FSDP: parameter '", name, "' is a scalar; FSDP shards along dim 0, so "
             "register it as a [1] tensor");
  LOOM_CHECK(!param->local_shard.defined(), ValueError, "FSDP: parameter '", name, "' is already sharded by FSDP");
  LOOM_CHECK(param->tensor.is_contiguous(), ValueError, "FSDP: parameter '", name, "' is not contiguous");
  FsdpSlot s;
  s.name = name;
  s.param = param;
  s.leaf = param->tensor;
  s.trainable = param->trainable;
  s.rows = local[0];
  s.row_numel = s.rows ? local.numel() / s.rows : 1;
  const int n = shard.group->size(), k = shard.group->rank();
  s.rows_per_rank = (s.rows + n - 1) / n;
  s.row_begin = std::min<int64_t>(s.rows, static_cast<int64_t>(k) * s.rows_per_rank);
  s.local_rows = rows_of_rank(s, k);
  const DType gather = config_.compute_dtype && dt == DType::f32 && param->multiplied_in_compute_dtype
                           ? *config_.compute_dtype : dt;
  size_t b = 0;
  while (b < buckets_.size() && (buckets_[b].dtype != dt || buckets_[b].gather_dtype != gather ||
                                 buckets_[b].shard.group != shard.group))
    ++b;
  if (b == buckets_.size()) {
    buckets_.emplace_back();
    buckets_.back().dtype = dt;
    buckets_.back().gather_dtype = gather;
    buckets_.back().shard = shard;
  }
  s.bucket = b;
  FsdpBucket& bucket = buckets_[b];
  s.shard_offset = bucket.shard_numel;
  s.full_offset = bucket.full_numel;
  bucket.shard_numel += s.rows_per_rank * s.row_numel;
  bucket.full_numel += s.rows * s.row_numel;
  bucket.slots.push_back(slots_.size());
  if (s.trainable) ++trainable_count_;
  slots_.push_back(std::move(s));
}

void FsdpUnit::build() {
  autograd::NoGradGuard no_grad;
  for (FsdpBucket& b : buckets_) {
    b.shard_flat = flat_buffer(b.shard_numel, b.dtype, config_.cpu_offload);
    b.grad_flat = flat_buffer(b.shard_numel, DType::f32, config_.cpu_offload);
  }
  for (FsdpSlot& s : slots_) {
    FsdpBucket& b = buckets_[s.bucket];
    s.shard = b.shard_flat.narrow(0, s.shard_offset, s.local_rows * s.row_numel).view(local_shape(s));
    if (!s.leaf.is_meta() && s.local_rows > 0) {
      // A materialised model keeps its values: this rank's rows become its shard.
      Tensor rows = s.leaf.reshape({s.rows, s.row_numel}).narrow(0, s.row_begin, s.local_rows);
      s.shard.view({s.local_rows, s.row_numel}).copy_(rows);
    }
    s.shard.set_requires_grad(s.trainable);
    s.leaf.set_requires_grad(s.trainable);
    // The shard is what this rank owns now: the optimizer, checkpoints and the grad norm find it
    // through the parameter, with its rows recorded on the shard group's mesh axis.
    s.param->local_shard = s.shard;
    s.param->placement.add(s.param->global_shape,
                           nn::AxisPlacement::shard(b.shard.axis, 0, {{s.row_begin, s.local_rows}}));
  }
  release_leaves();
}

void FsdpUnit::register_grad_hooks() {
  std::weak_ptr<FsdpUnit> self = weak_from_this();
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].trainable) continue;
    autograd::register_post_accumulate_hook(slots_[i].leaf, [self, i](Tensor&) {
      if (auto unit = self.lock()) unit->on_grad_accumulated(i);
    });
  }
}

void FsdpUnit::point_leaves_at_full() {
  for (FsdpSlot& s : slots_) {
    const Tensor& full = buckets_[s.bucket].full;
    TensorImpl* impl = s.leaf.impl_ptr();
    impl->storage = full.storage();
    impl->offset = full.offset() + s.full_offset;
    impl->device = full.device();
    impl->dtype = full.dtype();  // the compute dtype while gathered in it
  }
}

void FsdpUnit::release_leaves() {
  for (FsdpSlot& s : slots_) {
    TensorImpl* impl = s.leaf.impl_ptr();
    impl->storage = released_storage();
    impl->offset = 0;
    impl->device = Device::meta();
    impl->dtype = buckets_[s.bucket].dtype;
  }
}

void FsdpUnit::unshard() {
  if (gathered_) return;
  LOOM_TRACE("fsdp", "all_gather");
  for (FsdpBucket& b : buckets_) {
    const int n = b.shard.group->size();
    // Mixed precision: the shard is cast before the gather (the model's own cast, on 1/n of it).
    const Tensor shard = b.gather_dtype == b.dtype ? b.shard_flat : b.shard_flat.to(b.gather_dtype);
    b.full = Tensor::empty({b.full_numel}, b.gather_dtype);
    Tensor gathered = shard;
    if (n > 1) {
      gathered = Tensor::empty({b.shard_numel * n}, b.gather_dtype);
      const int64_t sent_before = b.shard.group->stats().bytes_sent;
      b.shard.group->all_gather(shard, gathered);
      gather_bytes_sent_ += b.shard.group->stats().bytes_sent - sent_before;
    }
    // Rank r's block of each parameter is rows [r·c, r·c + len_r): contiguous in both layouts.
    const size_t es = dtype_size(b.gather_dtype);
    const char* src = static_cast<const char*>(gathered.raw_data());
    char* dst = static_cast<char*>(b.full.raw_data());
    for (size_t idx : b.slots) {
      const FsdpSlot& s = slots_[idx];
      for (int r = 0; r < n; ++r) {
        const int64_t len = rows_of_rank(s, r);
        if (len == 0) continue;
        std::memcpy(dst + static_cast<size_t>(s.full_offset + r * s.rows_per_rank * s.row_numel) * es,
                    src + static_cast<size_t>(r * b.shard_numel + s.shard_offset) * es,
                    static_cast<size_t>(len * s.row_numel) * es);
      }
    }
  }
  point_leaves_at_full();
  gathered_ = true;
}

void FsdpUnit::reshard() {
  if (!gathered_) return;
  release_leaves();
  for (FsdpBucket& b : buckets_) b.full = Tensor();
  gathered_ = false;
}

int64_t FsdpUnit::gathered_bytes() const {
  int64_t bytes = 0;
  for (const FsdpBucket& b : buckets_)
    if (b.full.defined()) bytes += static_cast<int64_t>(b.full.nbytes());
  return bytes;
}

int64_t FsdpUnit::full_param_bytes() const {
  int64_t bytes = 0;
  for (const FsdpBucket& b : buckets_) bytes += b.full_numel * static_cast<int64_t>(dtype_size(b.gather_dtype));
  return bytes;
}

std::shared_ptr<autograd::SavedTensorHooks> FsdpUnit::saved_tensor_hooks() {
  if (!hooks_) hooks_ = std::make_shared<ParamViewHooks>(weak_from_this());
  return hooks_;
}

std::vector<Tensor> FsdpUnit::attach_pre_backward(const std::vector<Tensor>& outputs) {
  std::vector<const Tensor*> inputs;
  std::vector<Tensor> aliases;
  std::vector<size_t> where;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !outputs[i].requires_grad()) continue;
    inputs.push_back(&outputs[i]);
    aliases.push_back(outputs[i].detach());
    where.push_back(i);
  }
  if (inputs.empty()) return outputs;
  std::vector<Tensor*> outs;
  for (Tensor& a : aliases) outs.push_back(&a);
  std::weak_ptr<FsdpUnit> self = weak_from_this();
  const bool recorded = autograd::record(
      "fsdp_pre_backward", inputs, outs, {},
      [self](const std::vector<Tensor>& grads, const autograd::BackwardContext&) {
        if (auto unit = self.lock()) unit->unshard();
        return grads;
      });
  if (!recorded) return outputs;
  std::vector<Tensor> result = outputs;
  for (size_t j = 0; j < where.size(); ++j) result[where[j]] = aliases[j];
  return result;
}

void FsdpUnit::on_grad_accumulated(size_t slot) {
  FsdpSlot& s = slots_[slot];
  if (s.grad_ready) return;
  s.grad_ready = true;
  ++ready_count_;
  // The root unit waits for finish_backward: its parameters (tied embeddings, MTP's shared
  // embedding) may receive grads from several places until the very end of backward.
  if (config_.is_root || ready_count_ < trainable_count_) return;
  if (!requires_gradient_sync_) {
    // Another micro-batch's backward adds to these full grads; the parameters stay gathered
    // for it unless the policy frees them after every forward anyway.
    for (FsdpSlot& s : slots_) s.grad_ready = false;
    ready_count_ = 0;
    if (config_.reshard_after_forward) reshard();
    return;
  }
  reduce_grads();
  reshard();
}

bool FsdpUnit::has_unreduced_grads() const {
  for (const FsdpSlot& s : slots_)
    if (s.trainable && s.leaf.grad().defined()) return true;
  return false;
}

void FsdpUnit::reduce_grads() {
  LOOM_TRACE("fsdp", "reduce_scatter");
  autograd::NoGradGuard no_grad;
  for (FsdpBucket& b : buckets_) {
    const int n = b.shard.group->size();
    bool any_trainable = false;
    for (size_t idx : b.slots) any_trainable = any_trainable || slots_[idx].trainable;
    if (!any_trainable) continue;
    // Pack rank-major: rank r's part is, per parameter, its rows [r·c, r·c + c) (zeros past the end).
    Tensor send = Tensor::empty({b.shard_numel * n}, DType::f32);
    float* dst = send.data<float>();
    for (size_t idx : b.slots) {
      const FsdpSlot& s = slots_[idx];
      Tensor g = s.trainable ? s.leaf.grad() : Tensor();
      if (g.defined() && (g.dtype() != DType::f32 || !g.is_contiguous())) g = g.to(DType::f32).contiguous();
      const float* src = g.defined() ? g.data<float>() : nullptr;
      for (int r = 0; r < n; ++r) {
        const int64_t len = rows_of_rank(s, r) * s.row_numel, block = s.rows_per_rank * s.row_numel;
        float* out = dst + r * b.shard_numel + s.shard_offset;
        if (src && len) std::memcpy(out, src + r * block, static_cast<size_t>(len) * sizeof(float));
        else if (len) std::memset(out, 0, static_cast<size_t>(len) * sizeof(float));
        if (block > len) std::memset(out + len, 0, static_cast<size_t>(block - len) * sizeof(float));
      }
    }
    // First reduction of the step writes the main grads; later ones (micro-batches, a unit
    // reduced twice) add to them.
    bool fresh = true;
    for (size_t idx : b.slots)
      if (slots_[idx].trainable) fresh = fresh && !slots_[idx].shard.grad().defined();
    Tensor reduced = fresh ? b.grad_flat : Tensor::empty({b.shard_numel}, DType::f32);
    const int64_t sent_before = b.shard.group->stats().bytes_sent +
                                (replicate_group_ ? replicate_group_->stats().bytes_sent : 0);
    b.shard.group->reduce_scatter(send, reduced);
    if (replicate_group_) replicate_group_->all_reduce(reduced);
    reduce_bytes_sent_ += b.shard.group->stats().bytes_sent +
                          (replicate_group_ ? replicate_group_->stats().bytes_sent : 0) - sent_before;
    if (config_.divide_gradients) {
      kernels::for_tensor(reduced, "fsdp gradient division").scale_(reduced, 1.0 / config_.data_parallel_ranks);
    }
    if (!fresh) kernels::for_tensor(b.grad_flat, "fsdp gradient accumulation").add_(b.grad_flat, reduced, 1.0);
    for (size_t idx : b.slots) {
      FsdpSlot& s = slots_[idx];
      if (!s.trainable) continue;
      if (fresh)
        s.shard.set_grad(b.grad_flat.narrow(0, s.shard_offset, s.local_rows * s.row_numel).view(local_shape(s)));
    }
  }
  for (FsdpSlot& s : slots_) {
    s.leaf.set_grad(Tensor());
    s.grad_ready = false;
  }
  ready_count_ = 0;
}

void FsdpUnit::zero_grad() {
  for (FsdpSlot& s : slots_) {
    s.shard.set_grad(Tensor());
    s.leaf.set_grad(Tensor());
    s.grad_ready = false;
  }
  ready_count_ = 0;
}

}  // namespace loom::dist
