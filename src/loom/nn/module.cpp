#include "loom/nn/module.h"

#include <sstream>

#include "loom/autograd/grad_mode.h"

namespace loom::nn {

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  LOOM_CHECK(name.find('.') == std::string::npos && !name.empty(), ValueError,
             "module name '", name, "' must be non-empty and contain no '.'");
  for (auto& [n, m] : children_)
    LOOM_CHECK(n != name, ValueError, type_name_, ": a submodule named '", name, "' already exists");
  children_.emplace_back(name, std::move(module));
}

void Module::unregister_module(const std::string& name) {
  for (auto it = children_.begin(); it != children_.end(); ++it)
    if (it->first == name) {
      children_.erase(it);
      return;
    }
  LOOM_CHECK(false, ValueError, type_name_, ": no submodule named '", name, "' to remove");
}

void ModuleList::retain(const std::function<bool(size_t index)>& keep) {
  // children() lists the items in append order, like items_.
  std::vector<std::shared_ptr<Module>> kept;
  std::vector<std::string> names;
  for (auto& [name, child] : children()) names.push_back(name);
  for (size_t i = 0; i < names.size(); ++i) {
    if (keep(static_cast<size_t>(std::stoul(names[i])))) kept.push_back(items_[i]);
    else unregister_module(names[i]);
  }
  items_ = std::move(kept);
}

Parameter& Module::register_parameter(const std::string& name, const Shape& shape, DType dtype, Init init,
                                      Device device, std::optional<bool> weight_decay) {
  for (auto& [n, p] : params_)
    LOOM_CHECK(n != name, ValueError, type_name_, ": a parameter named '", name, "' already exists");
  Parameter p;
  p.global_shape = shape;
  p.dtype = dtype;
  p.init = init;
  p.weight_decay = weight_decay.value_or(!(shape.ndim() <= 1 || ends_with(name, "bias")));
  p.tensor = Tensor::empty(shape, dtype, device);
  if (!device.is_meta()) {
    autograd::NoGradGuard no_grad;
    // Initialised later by materialize() when created on meta; here the caller fills it.
    p.tensor.zero_();
  }
  p.tensor.set_requires_grad(true);
  params_.emplace_back(name, std::move(p));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, const Tensor& value, bool persistent) {
  for (auto& [n, b] : buffers_)
    LOOM_CHECK(n != name, ValueError, type_name_, ": a buffer named '", name, "' already exists");
  buffers_.emplace_back(name, Buffer{value, persistent});
  return buffers_.back().second.tensor;
}

std::vector<std::pair<std::string, Module*>> Module::children() {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [n, m] : children_) out.emplace_back(n, m.get());
  return out;
}

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters(const std::string& prefix) {
  std::vector<std::pair<std::string, Parameter*>> out;
  // Iterative pre-order walk: parameters of a module before those of its children.
  std::vector<std::pair<std::string, Module*>> stack{{prefix, this}};
  while (!stack.empty()) {
    auto [path, m] = stack.back();
    stack.pop_back();
    for (auto& [n, p] : m->params_) out.emplace_back(join(path, n), &p);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(join(path, it->first), it->second.get());
  }
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out;
  std::vector<std::pair<std::string, Module*>> stack{{prefix, this}};
  while (!stack.empty()) {
    auto [path, m] = stack.back();
    stack.pop_back();
    out.emplace_back(path, m);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(join(path, it->first), it->second.get());
  }
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers(const std::string& prefix, bool persistent_only) {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& [path, m] : named_modules(prefix))
    for (auto& [n, b] : m->buffers_)
      if (b.persistent || !persistent_only) out.emplace_back(join(path, n), &b.tensor);
  return out;
}

Module* Module::find_module(const std::string& path) {
  if (path.empty()) return this;
  Module* m = this;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '.')) {
    Module* next = nullptr;
    for (auto& [n, c] : m->children_)
      if (n == part) next = c.get();
    if (!next) return nullptr;
    m = next;
  }
  return m;
}

Parameter* Module::find_parameter(const std::string& path) {
  auto dot = path.rfind('.');
  Module* m = dot == std::string::npos ? this : find_module(path.substr(0, dot));
  if (!m) return nullptr;
  std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
  for (auto& [n, p] : m->params_)
    if (n == leaf) return &p;
  return nullptr;
}

std::map<std::string, Tensor> Module::state_dict() {
  std::map<std::string, Tensor> out;
  for (auto& [n, p] : named_parameters()) out[n] = p->local().detach();
  for (auto& [n, b] : named_buffers()) out[n] = b->detach();
  return out;
}

namespace {

// The box of `t` a piece names, in local or global coordinates.
Tensor box(Tensor t, const std::vector<int64_t>& offset, const Shape& shape) {
  for (int d = 0; d < shape.ndim(); ++d) t = t.narrow(d, offset[static_cast<size_t>(d)], shape[d]);
  return t;
}

}  // namespace

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict, const std::string& source) {
  std::vector<std::string> problems;
  auto params = named_parameters();
  auto buffers = named_buffers();
  std::map<std::string, Shape> shapes;
  for (auto& [n, p] : params) shapes[n] = p->global_shape;
  for (auto& [n, b] : buffers) shapes[n] = b->shape();
  for (auto& [n, shape] : shapes) {
    auto it = state.find(n);
    if (it == state.end()) {
      if (strict) problems.push_back("missing: " + n + " " + shape.str());
      continue;
    }
    if (it->second.shape() != shape)
      problems.push_back("shape mismatch: " + n + " is " + it->second.shape().str() + " in the source but " +
                         shape.str() + " in the model");
  }
  if (strict)
    for (auto& [n, t] : state)
      if (!shapes.count(n)) problems.push_back("unexpected: " + n + " " + t.shape().str());
  if (!problems.empty()) {
    std::ostringstream os;
    os << "cannot load " << source << " into the model (" << problems.size() << " problem"
       << (problems.size() > 1 ? "s" : "") << "):";
    for (size_t i = 0; i < problems.size() && i < 50; ++i) os << "\n  " << problems[i];
    if (problems.size() > 50) os << "\n  ... and " << problems.size() - 50 << " more";
    os << "\nCheck that the checkpoint was saved from the same model configuration "
          "(model_type, sizes, num_hidden_layers, tie_word_embeddings).";
    throw CheckpointError(os.str());
  }
  autograd::NoGradGuard no_grad;
  for (auto& [n, p] : params) {
    auto it = state.find(n);
    if (it == state.end()) continue;
    Tensor& local = allocate_local(*p);
    for (const Piece& piece : p->pieces())
      box(local, piece.local_offset, piece.shape).copy_(box(it->second, piece.global_offset, piece.shape));
  }
  for (auto& [n, b] : buffers) {
    auto it = state.find(n);
    if (it == state.end()) continue;
    if (b->is_meta()) *b = it->second.to(b->dtype()).clone();
    else b->copy_(it->second);
  }
}

Tensor& allocate_local(Parameter& p, Device device) {
  Tensor& local = p.local_shard.defined() ? p.local_shard : p.tensor;
  if (!local.is_meta()) return local;
  Tensor fresh = Tensor::empty(p.local_shape(), p.dtype, device);
  if (local.shape() == fresh.shape()) {
    // The same tensor gets storage: grad hooks a strategy registered on it stay.
    TensorImpl* impl = local.impl_ptr();
    impl->storage = fresh.storage();
    impl->offset = fresh.offset();
    impl->strides = fresh.strides();
    impl->device = fresh.device();
  } else {
    local = fresh;
  }
  local.set_requires_grad(p.trainable);
  return local;
}

void initialize_parameter(Parameter& p, const std::string& name, uint64_t seed) {
  autograd::NoGradGuard no_grad;
  Tensor local = p.local();
  LOOM_CHECK(!local.is_meta(), DeviceError, "initialize_parameter: '", name, "' is on the meta device; allocate it first");
  const Init& init = p.init;
  if (init.kind != Init::Kind::normal && init.kind != Init::Kind::uniform) {
    if (init.kind == Init::Kind::zeros) local.zero_();
    else local.fill_(init.kind == Init::Kind::ones ? 1.0 : init.a);
    return;
  }
  const RngState stream{seed, stream_id(name), 0};
  const Shape& g = p.global_shape;
  const int nd = g.ndim();
  auto fill = [&](Tensor t, int64_t first) {
    if (init.kind == Init::Kind::normal) fill_normal(t, init.a, init.b, stream, first);
    else fill_uniform(t, init.a, init.b, stream, first);
  };
  if (nd == 0) return fill(local, 0);
  const Shape strides = contiguous_strides(g);
  for (const Piece& piece : p.pieces()) {
    Tensor view = box(local, piece.local_offset, piece.shape);
    // The trailing dims the piece covers whole are one run of consecutive global indices; the
    // leading dims are walked index by index.
    int run_dims = 0;
    while (run_dims < nd && (run_dims == 0 || piece.shape[nd - run_dims] == g[nd - run_dims])) ++run_dims;
    const int lead = nd - run_dims;
    std::vector<int64_t> idx(static_cast<size_t>(lead), 0);
    while (true) {
      Tensor run = view;
      int64_t first = 0;
      for (int d = 0; d < nd; ++d) {
        const int64_t at = d < lead ? idx[static_cast<size_t>(d)] : 0;
        first += (piece.global_offset[static_cast<size_t>(d)] + at) * strides[d];
      }
      for (int d = lead - 1; d >= 0; --d) run = run.select(d, idx[static_cast<size_t>(d)]);
      fill(run, first);
      int d = lead - 1;
      while (d >= 0 && ++idx[static_cast<size_t>(d)] == piece.shape[d]) idx[static_cast<size_t>(d--)] = 0;
      if (d < 0) break;
    }
  }
}

void Module::materialize(uint64_t seed, Device device) {
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters()) {
    if (!p->local().is_meta()) continue;
    allocate_local(*p, device);
    initialize_parameter(*p, name, seed);
  }
  for (auto& [path, m] : named_modules())
    for (auto& [n, b] : m->buffers_)
      if (b.tensor.is_meta()) b.tensor = Tensor::zeros(b.tensor.shape(), b.tensor.dtype(), device);
}

bool Module::is_materialized() {
  for (auto& [n, p] : named_parameters())
    if (p->local().is_meta()) return false;
  return true;
}

std::vector<std::pair<std::string, Tensor>> Module::local_parameters() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [n, p] : named_parameters())
    if (p->trainable) out.emplace_back(n, p->local());
  return out;
}

int64_t Module::num_parameters(bool trainable_only) {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters())
    if (!trainable_only || p->trainable) n += p->global_shape.numel();
  return n;
}

void Module::zero_grad() {
  for (auto& [n, p] : named_parameters()) p->tensor.set_grad(Tensor());
}

namespace {
// Composes wrappers around body: wrapper[k] gets as inner the composition of wrappers[0..k-1].
std::vector<Tensor> run_wrapped(const std::vector<ForwardWrapper>& wrappers, const std::vector<Tensor>& inputs,
                                const TensorFn& body) {
  if (wrappers.empty()) return body(inputs);
  TensorFn fn = body;
  for (auto& w : wrappers) {
    TensorFn inner = fn;
    fn = [w, inner](const std::vector<Tensor>& in) { return w(inner, in); };
  }
  return fn(inputs);
}
}  // namespace

std::vector<Tensor> Module::invoke(const std::vector<Tensor>& inputs, const TensorFn& body) {
  return run_wrapped(wrappers_, inputs, body);
}

void Module::register_operation(const std::string& name) {
  for (const auto& n : operation_names_)
    LOOM_CHECK(n != name, ValueError, type_name_, ": an operation named '", name, "' already exists");
  for (auto& [n, c] : children_)
    LOOM_CHECK(n != name, ValueError, type_name_, ": '", name, "' is already a submodule name");
  operation_names_.push_back(name);
}

void Module::add_operation_wrapper(const std::string& operation, ForwardWrapper wrapper) {
  bool known = false;
  for (const auto& n : operation_names_) known = known || n == operation;
  LOOM_CHECK(known, ValueError, type_name_, " has no operation '", operation, "'");
  operation_wrappers_[operation].push_back(std::move(wrapper));
}

std::vector<Tensor> Module::call_operation(const std::string& name, const std::vector<Tensor>& inputs,
                                           const TensorFn& body) {
  auto it = operation_wrappers_.find(name);
  if (it == operation_wrappers_.end()) return body(inputs);
  return run_wrapped(it->second, inputs, body);
}

Tensor Module::invoke1(const Tensor& input, const std::function<Tensor(const Tensor&)>& body) {
  // `body` is copied, not referenced: recompute may call it again during backward.
  return invoke({input}, [body](const std::vector<Tensor>& in) { return std::vector<Tensor>{body(in[0])}; })[0];
}

}  // namespace loom::nn
