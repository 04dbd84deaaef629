#include "loom/dist/fsdp.h"

#include <algorithm>
#include <set>

#include "loom/autograd/checkpoint.h"
#include "loom/autograd/grad_mode.h"
#include "loom/autograd/saved_tensor.h"
#include "loom/dist/fsdp_unit.h"

namespace loom::dist {

namespace {

std::string parent_path(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

bool matches_unit_pattern(const std::string& path, const std::string& pattern) {
  if (pattern.size() > 2 && pattern.compare(pattern.size() - 2, 2, ".*") == 0) {
    const std::string prefix = pattern.substr(0, pattern.size() - 2);
    return !path.empty() && parent_path(path) == prefix;
  }
  return path == pattern;
}


// The wrapper every module owning parameters of `unit` (and the unit's top module) gets. The
// outermost wrapped call of a unit gathers, runs the forward with the parameter-view hooks,
// puts the pre-backward gather on the outputs and reshards; nested calls just run.
nn::ForwardWrapper fsdp_wrapper(const std::shared_ptr<FsdpUnit>& unit_ptr) {
  std::weak_ptr<FsdpUnit> weak = unit_ptr;
  return [weak](const nn::TensorFn& inner, const std::vector<Tensor>& inputs) {
    auto unit = weak.lock();
    if (!unit) return inner(inputs);
    unit->unshard();
    if (unit->active || autograd::is_recomputing()) return inner(inputs);
    const bool reshard = unit->config().reshard_after_forward;
    std::vector<Tensor> outputs;
    unit->active = true;
    try {
      if (reshard) {
        autograd::SavedTensorHooksGuard guard(unit->saved_tensor_hooks());
        outputs = inner(inputs);
      } else {
        outputs = inner(inputs);
      }
    } catch (...) {
      unit->active = false;
      throw;
    }
    unit->active = false;
    if (!unit->config().is_root && autograd::grad_enabled()) outputs = unit->attach_pre_backward(outputs);
    if (reshard) unit->reshard();
    return outputs;
  };
}

}  // namespace

FullyShardedModel::~FullyShardedModel() = default;

std::optional<DType> mixed_precision_compute_dtype(DType model_compute_dtype) {
  if (model_compute_dtype == DType::bf16 || model_compute_dtype == DType::f16) return model_compute_dtype;
  return std::nullopt;
}

DType fsdp_gather_dtype(const nn::Parameter& param, std::optional<DType> compute_dtype) {
  return compute_dtype && param.dtype == DType::f32 && param.multiplied_in_compute_dtype ? *compute_dtype : param.dtype;
}

bool reshard_after_forward(const FsdpOptions& o) {
  const std::string& p = o.reshard_after_forward_policy;
  if (p == "always") return true;
  if (p == "never") return false;
  LOOM_CHECK(p == "default", ConfigError, "parallelism.reshard_after_forward_policy must be 'always', 'never' or "
             "'default', got '", p, "'");
  return !o.pipeline_parallel;  // spec parallel_training.md §1.3: default = never under PP
}

std::shared_ptr<FullyShardedModel> apply_fsdp(nn::Module& model, std::shared_ptr<DeviceMesh> mesh,
                                              const FsdpOptions& options) {
  LOOM_CHECK(mesh != nullptr, ValueError, "apply_fsdp: the device mesh is null");
  auto fsdp = std::shared_ptr<FullyShardedModel>(new FullyShardedModel());
  fsdp->model_ = &model;
  fsdp->mesh_ = mesh;
  fsdp->options_ = options;
  fsdp->reshard_after_forward_ = reshard_after_forward(options);

  FsdpUnitConfig layer_config;
  layer_config.shard_axis = "fsdp";
  layer_config.reshard_after_forward = fsdp->reshard_after_forward_;
  layer_config.divide_gradients = !options.disable_gradient_division;
  layer_config.cpu_offload = options.cpu_offload;
  layer_config.compute_dtype = options.compute_dtype;
  layer_config.data_parallel_ranks = static_cast<double>(mesh->size("batch"));  // dp_replicate·dp_shard
  FsdpUnitConfig root_config = layer_config;
  root_config.is_root = true;
  root_config.reshard_after_forward = false;  // backward starts with the head: keep it gathered
  auto shard_group = mesh->group_ptr("fsdp");
  auto replicate_group = mesh->group_ptr("dp_replicate");

  // Units, in module order.
  const std::vector<std::string> patterns =
      options.unit_paths.empty() ? std::vector<std::string>{"decoder.layers.*", "mtp.layers.*"} : options.unit_paths;
  std::vector<std::pair<std::string, std::shared_ptr<FsdpUnit>>> units;
  std::map<std::string, nn::Module*> unit_modules;
  for (auto& [path, m] : model.named_modules()) {
    for (const auto& pattern : patterns) {
      if (!matches_unit_pattern(path, pattern)) continue;
      units.emplace_back(path, std::make_shared<FsdpUnit>(path, layer_config, shard_group, replicate_group));
      unit_modules[path] = m;
      break;
    }
  }
  auto root = std::make_shared<FsdpUnit>("(root)", root_config, shard_group, replicate_group);

  // Each parameter goes to the deepest unit whose path prefixes it, else to the root. Routed
  // experts split by expert parallelism (placed on "ep") go to buckets of their own in that unit,
  // sharded over "efsdp" (expert_parallel.h).
  const FsdpShardGroup expert_group{mesh->group_ptr("efsdp"), "efsdp"};
  std::map<FsdpUnit*, std::set<std::string>> owners;  // modules that own a unit's parameters
  for (auto& [name, p] : model.named_parameters()) {
    FsdpUnit* best = nullptr;
    size_t best_len = 0;
    for (auto& [path, u] : units)
      if (name.size() > path.size() && name.compare(0, path.size(), path) == 0 && name[path.size()] == '.' &&
          path.size() >= best_len) {
        best = u.get();
        best_len = path.size();
      }
    FsdpUnit* unit = best ? best : root.get();
    if (p->placement.on("ep")) unit->add_param(name, p, expert_group);
    else unit->add_param(name, p);
    owners[unit].insert(parent_path(name));
  }
  for (auto& [path, u] : units)
    if (!u->slots().empty()) fsdp->units_.push_back(u);
  if (!root->slots().empty()) fsdp->units_.push_back(root);

  for (auto& unit : fsdp->units_) {
    unit->build();
    unit->register_grad_hooks();
    std::set<nn::Module*> wrapped;
    if (!unit->config().is_root) wrapped.insert(unit_modules.at(unit->name()));
    for (const std::string& owner : owners[unit.get()]) {
      nn::Module* m = model.find_module(owner);
      LOOM_ASSERT(m != nullptr, "owner module '", owner, "' not found");
      wrapped.insert(m);
    }
    for (nn::Module* m : wrapped) m->add_forward_wrapper(fsdp_wrapper(unit));
  }
  return fsdp;
}

void FullyShardedModel::materialize(uint64_t seed) {
  for (auto& unit : units_)
    for (FsdpSlot& s : unit->slots()) nn::initialize_parameter(*s.param, s.name, seed);
  // Buffers are not sharded: materialise them as Module::materialize does.
  for (auto& [name, b] : model_->named_buffers("", /*persistent_only=*/false))
    if (b->is_meta()) *b = Tensor::zeros(b->shape(), b->dtype());
}

void FullyShardedModel::load_full_state_dict(const std::map<std::string, Tensor>& state) {
  model_->load_state_dict(state, /*strict=*/true, "the state dict");
  reshard_all();  // gathered copies are stale now
}

void FullyShardedModel::zero_grad() {
  for (auto& unit : units_) unit->zero_grad();
}

void FullyShardedModel::set_requires_gradient_sync(bool on) {
  for (auto& unit : units_) unit->set_requires_gradient_sync(on);
}

void FullyShardedModel::finish_backward() {
  // Same order on every rank: units whose grads were not all reduced during backward.
  for (auto& unit : units_)
    if (unit->has_unreduced_grads()) unit->reduce_grads();
  reshard_all();
}

void FullyShardedModel::reshard_all() {
  for (auto& unit : units_) unit->reshard();
}

std::vector<std::string> FullyShardedModel::unit_names() const {
  std::vector<std::string> out;
  for (auto& unit : units_) out.push_back(unit->name());
  return out;
}

FsdpMemory FullyShardedModel::memory() const {
  FsdpMemory m;
  for (auto& unit : units_) {
    for (const FsdpBucket& b : unit->buckets()) {
      m.sharded_param_bytes += static_cast<int64_t>(b.shard_flat.nbytes());
      m.sharded_grad_bytes += static_cast<int64_t>(b.grad_flat.nbytes());
    }
    m.gathered_param_bytes += unit->gathered_bytes();
    m.largest_unit_param_bytes = std::max(m.largest_unit_param_bytes, unit->full_param_bytes());
  }
  return m;
}

CommStats FullyShardedModel::comm_stats() const {
  CommStats s = mesh_->group("fsdp").stats();
  if (&mesh_->group("dp_replicate") != &mesh_->group("fsdp")) s += mesh_->group("dp_replicate").stats();
  return s;
}

int64_t FullyShardedModel::grad_reduce_bytes() const {
  int64_t bytes = 0;
  for (const auto& unit : units_) bytes += unit->reduce_bytes_sent();
  return bytes;
}

int64_t FullyShardedModel::param_gather_bytes() const {
  int64_t bytes = 0;
  for (const auto& unit : units_) bytes += unit->gather_bytes_sent();
  return bytes;
}

void FullyShardedModel::reset_comm_stats() {
  mesh_->group("fsdp").reset_stats();
  mesh_->group("dp_replicate").reset_stats();
  for (auto& unit : units_) unit->reset_reduce_bytes();
}

}  // namespace loom::dist
