#include "loom/optim/optimizer.h"

#include <cmath>

#include "loom/core/log.h"
#include "loom/kernels/kernel_table.h"

namespace loom::optim {

namespace {

// Views of `numel`-sized pieces of one flat fp32 buffer, in parameter order.
Tensor carve(const Tensor& flat, int64_t& offset, const Shape& shape) {
  const int64_t n = shape.numel();
  Tensor view = flat.narrow(0, offset, n).view(shape);
  offset += n;
  return view;
}

void check_entry(const std::map<std::string, Tensor>& state, const std::string& key,
                 const Tensor& expected) {
  auto it = state.find(key);
  LOOM_CHECK(it != state.end() && it->second.defined(), CheckpointError,
             "optimizer state: entry '", key, "' is missing; the checkpoint was written for a "
             "different optimizer or model (load with no_load_optim to start the optimizer fresh)");
  LOOM_CHECK(it->second.shape() == expected.shape(), CheckpointError, "optimizer state: entry '",
             key, "' has shape ", it->second.shape().str(), " but this model needs ",
             expected.shape().str(), "; the checkpoint belongs to a different model configuration");
  LOOM_CHECK(is_floating(it->second.dtype()), CheckpointError, "optimizer state: entry '", key,
             "' has dtype ", dtype_name(it->second.dtype()), "; expected float32");
}

}  // namespace

kernels::AdamWScalars adamw_scalars(double lr, double weight_decay, double beta1, double beta2,
                                    double eps, int64_t t) {
  kernels::AdamWScalars s;
  s.decay = static_cast<float>(1.0 - lr * weight_decay);
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  const double td = static_cast<double>(t);
  s.bias_correction2 = static_cast<float>(1.0 - std::pow(beta2, td));
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, td)));
  s.eps = static_cast<float>(eps);
  return s;
}

NamedParams trainable_params(const NamedParams& params) {
  NamedParams out;
  for (const auto& p : params) {
    LOOM_CHECK(p.param.defined(), ValueError, "optimizer: parameter '", p.name, "' is undefined");
    if (p.name.find("max_logits_val") != std::string::npos) continue;
    if (!p.param.requires_grad()) continue;
    out.push_back(p);
  }
  return out;
}

void Optimizer::add_param(const NamedParam& p, double weight_decay, UpdateRule rule) {
  const DType dt = p.param.dtype();
  LOOM_CHECK(dt == DType::f32 || dt == DType::bf16 || dt == DType::f16, DTypeError,
             "optimizer: parameter '", p.name, "' has dtype ", dtype_name(dt),
             "; optimizers update float32, bfloat16 or float16 parameters (set model.params_dtype)");
  LOOM_CHECK(p.param.is_contiguous(), ValueError, "optimizer: parameter '", p.name,
             "' is not contiguous; parameters must own dense storage");
  for (const auto& s : params_)
    LOOM_CHECK(s.name != p.name, ValueError, "optimizer: parameter name '", p.name,
               "' appears twice; names must be unique");
  ParamState s;
  s.name = p.name;
  s.param = p.param;
  s.weight_decay = weight_decay;
  s.rule = rule;
  params_.push_back(std::move(s));
}

void Optimizer::allocate_state() {
  int64_t n_master = 0, n_adam = 0, n_muon = 0;
  for (const auto& s : params_) {
    const int64_t n = s.param.numel();
    if (s.has_own_master()) n_master += n;
    (s.rule == UpdateRule::adamw ? n_adam : n_muon) += n;
  }
  flat_masters_ = Tensor::zeros({n_master});
  flat_exp_avg_ = Tensor::zeros({n_adam});
  flat_exp_avg_sq_ = Tensor::zeros({n_adam});
  flat_momentum_ = Tensor::zeros({n_muon});
  int64_t off_master = 0, off_m = 0, off_v = 0, off_mu = 0;
  for (auto& s : params_) {
    const Shape& shape = s.param.shape();
    if (s.has_own_master()) {
      s.master = carve(flat_masters_, off_master, shape);
      s.master.copy_(s.param);  // exact: bf16/f16 values are representable in fp32
    } else {
      s.master = s.param.detach();
    }
    if (s.rule == UpdateRule::adamw) {
      s.exp_avg = carve(flat_exp_avg_, off_m, shape);
      s.exp_avg_sq = carve(flat_exp_avg_sq_, off_v, shape);
    } else {
      s.momentum = carve(flat_momentum_, off_mu, shape);
    }
  }
}

void Optimizer::relocate_state(CachingAllocator& pool) {
  auto move = [&pool](Tensor& flat) {
    Tensor moved = Tensor::empty_in_pool(flat.shape(), flat.dtype(), pool);
    moved.copy_(flat);
    flat = moved;
  };
  move(flat_masters_);
  move(flat_exp_avg_);
  move(flat_exp_avg_sq_);
  move(flat_momentum_);
  int64_t off_master = 0, off_m = 0, off_v = 0, off_mu = 0;
  for (auto& s : params_) {
    const Shape& shape = s.param.shape();
    if (s.has_own_master()) s.master = carve(flat_masters_, off_master, shape);
    if (s.rule == UpdateRule::adamw) {
      s.exp_avg = carve(flat_exp_avg_, off_m, shape);
      s.exp_avg_sq = carve(flat_exp_avg_sq_, off_v, shape);
    } else {
      s.momentum = carve(flat_momentum_, off_mu, shape);
    }
  }
}

int64_t Optimizer::state_bytes() const {
  return static_cast<int64_t>(flat_masters_.nbytes() + flat_exp_avg_.nbytes() + flat_exp_avg_sq_.nbytes() +
                              flat_momentum_.nbytes());
}

void Optimizer::set_lr_scheduler(std::shared_ptr<const LrScheduler> scheduler) {
  scheduler_ = std::move(scheduler);
}

double Optimizer::lr_at(int64_t step) const {
  return scheduler_ ? scheduler_->lr_at(step) : learning_rate_;
}

void Optimizer::set_global_step(int64_t step) {
  LOOM_CHECK(step >= 0, ValueError, "optimizer: global_step must be >= 0, got ", step);
  global_step_ = step;
}

double Optimizer::step() { return step_with_lr(lr_at(global_step_)); }

double Optimizer::step_with_lr(double lr) {
  if (pre_step_) pre_step_(*this);
  global_step_ += 1;
  const std::string local = prepare_update(lr, global_step_);
  last_skip_ = agree_ ? agree_(local) : (local.empty() ? "" : "'" + local + "'");
  if (last_skip_.empty())
    apply_update(lr, global_step_);
  else
    discard_update();
  return lr;
}

NamedParams Optimizer::named_params() const {
  NamedParams out;
  out.reserve(params_.size());
  for (const auto& s : params_) out.push_back({s.name, s.param});
  return out;
}

void Optimizer::zero_grad() {
  for (auto& s : params_) {
    const Tensor& g = s.param.grad();
    if (g.defined()) Tensor(g).zero_();
  }
}

Tensor Optimizer::fp32_grad(const ParamState& s) {
  const Tensor& g = s.param.grad();
  if (!g.defined()) return Tensor();
  LOOM_CHECK(g.shape() == s.param.shape(), ShapeError, "optimizer: grad of '", s.name,
             "' has shape ", g.shape().str(), " but the parameter has ", s.param.shape().str());
  LOOM_CHECK(is_floating(g.dtype()), DTypeError, "optimizer: grad of '", s.name, "' has dtype ",
             dtype_name(g.dtype()));
  return g.to(DType::f32).contiguous();
}

void Optimizer::copy_master_to_param(const ParamState& s) {
  if (!s.has_own_master()) return;
  Tensor param = s.param;
  kernels::for_tensor(s.master, "optimizer").copy_master_to_param(s.master, param);
}

bool Optimizer::adamw_step_is_finite(const ParamState& s, const Tensor& grad, double lr, double beta1,
                                     double beta2, double eps, int64_t t) const {
  const kernels::AdamWScalars k = adamw_scalars(lr, s.weight_decay, beta1, beta2, eps, t);
  return kernels::for_tensor(s.master, "AdamW")
      .adamw_update_is_finite(s.master, grad, s.exp_avg, s.exp_avg_sq, s.param.dtype(), k);
}

void Optimizer::adamw_step(ParamState& s, const Tensor& grad, double lr, double beta1,
                           double beta2, double eps, int64_t t) {
  const kernels::AdamWScalars k = adamw_scalars(lr, s.weight_decay, beta1, beta2, eps, t);
  Tensor param = s.param;
  kernels::for_tensor(s.master, "AdamW")
      .adamw_update(s.master, grad, s.exp_avg, s.exp_avg_sq, s.has_own_master() ? &param : nullptr, k);
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const auto& s : params_) {
    if (s.has_own_master()) out["main_param." + s.name] = s.master;
    if (s.rule == UpdateRule::adamw) {
      out["adam_m." + s.name] = s.exp_avg;
      out["adam_v." + s.name] = s.exp_avg_sq;
    } else {
      out["muon_m." + s.name] = s.momentum;
    }
  }
  out["global_step"] = Tensor::scalar(static_cast<double>(global_step_), DType::i64);
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  const std::map<std::string, Tensor> expected = state_dict();
  for (const auto& [key, target] : expected) {
    if (key == "global_step") continue;
    check_entry(state, key, target);
  }
  auto gs = state.find("global_step");
  LOOM_CHECK(gs != state.end() && gs->second.defined(), CheckpointError,
             "optimizer state: entry 'global_step' is missing");
  LOOM_CHECK(gs->second.numel() == 1 &&
                 (gs->second.dtype() == DType::i64 || gs->second.dtype() == DType::i32),
             CheckpointError, "optimizer state: 'global_step' must be one int64 value, got ",
             gs->second.str());
  const auto step = static_cast<int64_t>(gs->second.item());
  LOOM_CHECK(step >= 0, CheckpointError, "optimizer state: 'global_step' is negative (", step, ")");

  std::vector<std::string> unknown;
  for (const auto& [key, value] : state)
    if (!expected.count(key)) unknown.push_back(key);
  if (!unknown.empty()) {
    std::string list;
    for (size_t i = 0; i < unknown.size() && i < 8; ++i) list += (i ? ", " : "") + unknown[i];
    if (unknown.size() > 8) list += ", ... (" + std::to_string(unknown.size()) + " in all)";
    log::warn("optimizer state: ignoring ", unknown.size(), " entr", unknown.size() > 1 ? "ies" : "y",
              " this ", type(), " optimizer does not use: ", list);
  }

  for (const auto& [key, target] : expected) {
    if (key == "global_step") continue;
    Tensor(target).copy_(state.at(key));
  }
  global_step_ = step;
  for (const auto& s : params_) copy_master_to_param(s);
}

void Optimizer::refresh_masters_from_params() {
  for (auto& s : params_)
    if (s.has_own_master()) s.master.copy_(s.param);
}

}  // namespace loom::optim
