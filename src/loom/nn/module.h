// Module tree. A model is a tree of Modules with dotted paths ("decoder.layers.3.mlp.linear_fc1");
// parameters are registered with their global shape, dtype, initialiser and weight-decay default,
// and can live on the meta device (shapes only) until materialise() allocates and initialises
// them. Strategies (FSDP, recompute, swap, profiling) act on a built model from outside, by path:
// they replace parameter tensors and wrap module forwards; a model file knows nothing of them.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/rng.h"
#include "loom/core/tensor.h"
#include "loom/nn/placement.h"

namespace loom::nn {

// How a parameter is initialised when materialised.
struct Init {
  enum class Kind { normal, uniform, zeros, ones, constant };
  Kind kind = Kind::normal;
  double a = 0.0;  // normal: mean; uniform: low; constant: value
  double b = 0.02;  // normal: std; uniform: high
  static Init normal(double std, double mean = 0.0) { return {Kind::normal, mean, std}; }
  static Init uniform(double low, double high) { return {Kind::uniform, low, high}; }
  static Init zeros() { return {Kind::zeros, 0, 0}; }
  static Init ones() { return {Kind::ones, 1, 0}; }
  static Init constant(double v) { return {Kind::constant, v, 0}; }
};

struct Parameter {
  // The tensor forward uses: the whole parameter, or this rank's slice when a strategy splits it
  // (tensor parallelism). Under FSDP it is a leaf whose storage FSDP points at the gathered copy
  // around forward and backward (and at nothing in between).
  Tensor tensor;
  // The full logical shape: what checkpoints and HF weights hold.
  Shape global_shape;
  // How local() sits in global_shape (placement.h); empty = the whole parameter.
  Placement placement;
  // The persistent piece this rank owns, when a strategy keeps one apart from `tensor` (FSDP's
  // shard); local() is what the optimizer updates and checkpoints store.
  Tensor local_shard;
  DType dtype = DType::f32;
  Init init;
  // Default: decayed unless 1-D or a bias (the optimizer's include/exclude rules override).
  bool weight_decay = true;
  bool trainable = true;
  // The module only ever uses it cast to the compute dtype (matmul weights and biases), so under
  // mixed precision a strategy may hand it over already cast (FSDP all-gathers it in bf16): the
  // same values, and its grad still accumulates in fp32 (AccumulateGrad of a bf16 leaf).
  bool multiplied_in_compute_dtype = false;

  const Tensor& local() const { return local_shard.defined() ? local_shard : tensor; }
  Shape local_shape() const { return placement.local_shape(global_shape); }
  std::vector<Piece> pieces() const { return placement.pieces(global_shape); }
};

// Allocates p.local() (its local shape, on `device`) when it is still on the meta device, with
// requires_grad when the parameter is trainable; returns it. A meta tensor that already has the
// local shape keeps its identity (and the grad hooks strategies registered on it).
Tensor& allocate_local(Parameter& p, Device device = Device::cpu());

// Fills p.local() (allocated) from p.init with the Philox stream of `name` by global element
// index: every slice of every layout gets the numbers the whole tensor has at those positions.
void initialize_parameter(Parameter& p, const std::string& name, uint64_t seed);

using TensorFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
// Wraps a module's forward: gets the inner forward and the tensor inputs, returns the outputs.
using ForwardWrapper = std::function<std::vector<Tensor>(const TensorFn& inner, const std::vector<Tensor>& inputs)>;

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  // ---- Tree traversal (paths are dotted; `prefix` is prepended) ----------------------------
  std::vector<std::pair<std::string, Parameter*>> named_parameters(const std::string& prefix = "");
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");
  std::vector<std::pair<std::string, Tensor*>> named_buffers(const std::string& prefix = "", bool persistent_only = true);
  std::vector<std::pair<std::string, Module*>> children();
  // Submodule by dotted path ("decoder.layers.3"); nullptr when absent.
  Module* find_module(const std::string& path);
  Parameter* find_parameter(const std::string& path);

  // ---- Parameters and state ------------------------------------------------------------------
  // Every parameter's local tensor (Parameter::local()) and persistent buffer by dotted name; the
  // tensors share storage with the model.
  std::map<std::string, Tensor> state_dict();
  // Copies whole (global-shape) tensors in: each parameter takes the pieces its placement owns.
  // strict: missing and unexpected names are errors. Every problem (missing, unexpected, wrong
  // shape) is listed in one CheckpointError naming `source`.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true,
                       const std::string& source = "state dict");
  // Allocates every meta parameter (its local shape) and buffer on `device` and initialises the
  // parameters with initialize_parameter: the same values whatever the parallel layout.
  void materialize(uint64_t seed, Device device = Device::cpu());
  bool is_materialized();
  int64_t num_parameters(bool trainable_only = false);
  // (name, local tensor) of every trainable parameter in model order: what an optimizer steps.
  std::vector<std::pair<std::string, Tensor>> local_parameters();
  void zero_grad();

  // ---- Forward interception (used by parallelism / memory / profiler strategies) --------------
  // Wrappers run outermost-last-added: the newest wrapper sees the others as its inner function.
  void add_forward_wrapper(ForwardWrapper wrapper) { wrappers_.push_back(std::move(wrapper)); }
  void clear_forward_wrappers() { wrappers_.clear(); }
  size_t num_forward_wrappers() const { return wrappers_.size(); }

  // ---- Named operations ----------------------------------------------------------------------
  // Functions a module calls by name (e.g. the all_gather a tensor-parallel strategy inserts),
  // addressable as "<module path>.<operation>" so memory policies can wrap them like modules
  // (communication recompute). Registered at construction so they are known before forward.
  const std::vector<std::string>& operation_names() const { return operation_names_; }
  void add_operation_wrapper(const std::string& operation, ForwardWrapper wrapper);
  // A strategy that inserts communication into a module's forward from outside (the all-gather
  // of sequence parallelism) declares it here and runs it through call_operation, so memory
  // policies applied after it (communication recompute) can address it by path.
  void add_operation(const std::string& name) { register_operation(name); }
  // Runs a registered operation through its wrappers.
  std::vector<Tensor> call_operation(const std::string& name, const std::vector<Tensor>& inputs,
                                     const TensorFn& body);

 protected:
  // Registers a parameter created on `device` (meta by default: nothing allocated). 1-D tensors
  // and names ending in "bias" default to no weight decay.
  Parameter& register_parameter(const std::string& name, const Shape& shape, DType dtype, Init init,
                                Device device, std::optional<bool> weight_decay = std::nullopt);
  // Non-trainable state (e.g. MoE expert bias, counters). Persistent buffers are saved.
  Tensor& register_buffer(const std::string& name, const Tensor& value, bool persistent = true);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // Every module's forward goes through here so that wrappers apply. The body may be called
  // again later (recompute re-runs it during backward), so it must own what it captures:
  // capture by value ([this, ctx, x]), never [&] to locals of the caller.
  std::vector<Tensor> invoke(const std::vector<Tensor>& inputs, const TensorFn& body);
  Tensor invoke1(const Tensor& input, const std::function<Tensor(const Tensor&)>& body);
  void register_operation(const std::string& name);
  // Drops a submodule (its parameters, buffers and children leave every named_* listing): a
  // model that lets a strategy keep part of it (a pipeline stage) removes the rest with this.
  void unregister_module(const std::string& name);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);

  std::string type_name_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  // deques: registration returns references that must stay valid as more are added
  std::deque<std::pair<std::string, Parameter>> params_;
  struct Buffer {
    Tensor tensor;
    bool persistent;
  };
  std::deque<std::pair<std::string, Buffer>> buffers_;
  std::vector<ForwardWrapper> wrappers_;
  std::vector<std::string> operation_names_;
  std::map<std::string, std::vector<ForwardWrapper>> operation_wrappers_;
};

// A list of modules addressed by index ("layers.0", "layers.1", ...).
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  template <typename M>
  std::shared_ptr<M> append(std::shared_ptr<M> module) {
    LOOM_CHECK(items_.size() == next_index_, ValueError, "ModuleList: append after retain() would reuse a name");
    items_.push_back(module);
    return register_module(std::to_string(next_index_++), module);
  }
  size_t size() const { return items_.size(); }
  const std::shared_ptr<Module>& at(size_t i) const { return items_.at(i); }
  // Keeps the items whose index (the name they were appended under) `keep` accepts; the kept
  // items keep their names, so "layers.5" stays "layers.5" when layers 0-4 go.
  void retain(const std::function<bool(size_t index)>& keep);

 private:
  std::vector<std::shared_ptr<Module>> items_;
  size_t next_index_ = 0;
};

}  // namespace loom::nn
