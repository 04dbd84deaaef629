#include "loom/optim/muon.h"

#include <algorithm>
#include <cmath>

#include "loom/core/log.h"
#include "loom/kernels/kernel_table.h"
#include "loom/optim/adamw.h"
#include "loom/optim/option_reader.h"

namespace loom::optim {

namespace {

const char* kMuonKeys =
    "type, learning_rate, weight_decay, matched_adamw_rms, momentum, eps, nesterov, ns_steps, "
    "ns_coefficients, adamw_betas, adamw_eps, qk_clip_enabled, qk_clip_threshold, comm_strategy, "
    "use_fused_adamw, adamw_include, weight_decay_include, weight_decay_exclude, swap";

}  // namespace

void MuonOptions::validate() const {
  LOOM_CHECK(weight_decay >= 0.0, ConfigError, "optimizer.weight_decay must be >= 0, got ",
             weight_decay);
  LOOM_CHECK(matched_adamw_rms > 0.0, ConfigError, "optimizer.matched_adamw_rms must be > 0, got ",
             matched_adamw_rms, "; the default is 0.2");
  LOOM_CHECK(momentum >= 0.0 && momentum < 1.0, ConfigError,
             "optimizer.momentum must be in [0, 1), got ", momentum, "; the default is 0.95");
  LOOM_CHECK(eps > 0.0, ConfigError, "optimizer.eps must be > 0, got ", eps,
             "; the default is 1.e-7");
  LOOM_CHECK(ns_steps > 0, ConfigError, "optimizer.ns_steps must be positive, got ", ns_steps);
  LOOM_CHECK(!ns_schedule.empty(), ConfigError,
             "optimizer.ns_coefficients gives no Newton-Schulz iterations");
  check_betas(adamw_betas, "optimizer.adamw_betas");
  LOOM_CHECK(adamw_eps > 0.0, ConfigError, "optimizer.adamw_eps must be > 0, got ", adamw_eps);
  LOOM_CHECK(!qk_clip_enabled || qk_clip_threshold > 0.0, ConfigError,
             "optimizer.qk_clip_threshold must be positive, got ", qk_clip_threshold,
             " (or set qk_clip_enabled: False)");
  LOOM_CHECK(comm_strategy == "allgather" || comm_strategy == "allgather_deredundency",
             ConfigError, "optimizer.comm_strategy must be \"allgather\" or "
             "\"allgather_deredundency\", got \"", comm_strategy, "\"");
  LOOM_CHECK(learning_rate >= 0.0, ConfigError, "optimizer.learning_rate must be >= 0, got ",
             learning_rate);
}

MuonOptions MuonOptions::from_json(const nlohmann::ordered_json& section) {
  OptionReader r(section, "optimizer");
  MuonOptions o;
  r.mark_read("type");
  o.learning_rate = r.number("learning_rate", o.learning_rate);
  o.weight_decay = r.number("weight_decay", o.weight_decay);
  o.matched_adamw_rms = r.number("matched_adamw_rms", o.matched_adamw_rms);
  o.momentum = r.number("momentum", o.momentum);
  o.eps = r.number("eps", o.eps);
  o.nesterov = r.boolean("nesterov", o.nesterov);
  o.ns_steps = r.integer("ns_steps", o.ns_steps);
  LOOM_CHECK(o.ns_steps > 0, ConfigError, "optimizer.ns_steps must be positive, got ", o.ns_steps);
  const nlohmann::ordered_json* coeffs = r.raw("ns_coefficients");
  o.ns_schedule = make_ns_schedule(coeffs ? *coeffs : nlohmann::ordered_json(), o.ns_steps,
                                   "optimizer.ns_coefficients");
  o.adamw_betas = parse_betas(r, "adamw_betas", o.adamw_betas);
  o.adamw_eps = r.number("adamw_eps", o.adamw_eps);
  o.qk_clip_enabled = r.boolean("qk_clip_enabled", o.qk_clip_enabled);
  o.qk_clip_threshold = r.number("qk_clip_threshold", o.qk_clip_threshold);
  o.comm_strategy = r.string("comm_strategy", o.comm_strategy);
  o.use_fused_adamw = r.boolean("use_fused_adamw", o.use_fused_adamw);
  if (auto inc = r.optional_string_list("adamw_include")) o.adamw_include = *inc;
  o.weight_decay_include = r.optional_string_list("weight_decay_include").value_or(std::vector<std::string>{});
  o.weight_decay_exclude = r.optional_string_list("weight_decay_exclude").value_or(std::vector<std::string>{});
  o.swap = r.boolean("swap", false);
  r.warn_unread("Muon", kMuonKeys);
  // Validation (after the swap flag is known) happens in the constructor, in the reference's
  // order: swap, model, then hyper-parameters.
  return o;
}

Muon::Muon(const NamedParams& params, const MuonOptions& options,
           const std::optional<MuonModelInfo>& model, bool swap,
           const WeightDecayRules& model_rules)
    : Optimizer(options.learning_rate), options_(options) {
  LOOM_CHECK(!(swap || options.swap), ValueError,
             "Muon does not support swap. Disable swap in the memory section or use AdamW.");
  LOOM_CHECK(model.has_value(), ValueError, "Model must be provided for Muon optimizer.");
  LOOM_CHECK(!model->legacy, ValueError, "Muon does not support Legacy Model.");
  LOOM_CHECK(model->multi_latent_attention, ValueError,
             "Current Muon implementation only supports models with Multi-Latent Attention "
             "enabled. Set model.multi_latent_attention: True or use optimizer.type: AdamW.");
  options_.validate();
  mla_ = model->mla;
  schema_ = model->schema ? *model->schema : MuonSplitSchema::standard(mla_);

  WeightDecayRules rules = model_rules;
  rules.include = options_.weight_decay_include;
  rules.exclude = options_.weight_decay_exclude;
  for (const auto& p : trainable_params(params)) {
    const bool decay = applies_weight_decay(p.name, p.param.shape(), rules);
    const int nd = p.param.dim();
    const bool use_muon = (nd == 2 || nd == 3) && !matches_any(options_.adamw_include, p.name);
    if (use_muon) schema_.blocks(p.name, p.param.shape());  // fail at construction, not step 1
    add_param(p, decay ? options_.weight_decay : 0.0, use_muon ? UpdateRule::muon : UpdateRule::adamw);
  }
  allocate_state();
}

UpdateRule Muon::rule_of(const std::string& name) const {
  for (const auto& s : params_)
    if (s.name == name) return s.rule;
  LOOM_THROW(ValueError, "Muon: no parameter named '", name, "'");
}

void Muon::apply_update(double lr, int64_t t) {
  for (auto& s : params_) {
    Tensor grad = fp32_grad(s);
    if (!grad.defined()) continue;
    if (s.rule == UpdateRule::muon)
      muon_step(s, grad, lr);
    else
      adamw_step(s, grad, lr, options_.adamw_betas[0], options_.adamw_betas[1], options_.adamw_eps, t);
  }
  last_qk_clip_ = QkClipResult{};
  if (options_.qk_clip_enabled && !qk_inputs_.empty()) {
    auto master_of = [this](const std::string& name) -> Tensor {
      for (const auto& s : params_)
        if (s.name == name) return s.master;
      return Tensor();
    };
    last_qk_clip_ = apply_qk_clip(qk_inputs_, static_cast<float>(options_.qk_clip_threshold), mla_,
                                  master_of);
    for (const auto& name : last_qk_clip_.scaled)
      for (const auto& s : params_)
        if (s.name == name) copy_master_to_param(s);
    if (last_qk_clip_.fired)
      log::debug("QK-clip: ", last_qk_clip_.heads_clipped, " heads clipped, max logit ",
                 last_qk_clip_.max_logit, " >= threshold ", options_.qk_clip_threshold);
  }
  qk_inputs_.clear();
}

void Muon::muon_step(ParamState& s, const Tensor& grad, double lr) {
  const kernels::KernelTable& k = kernels::for_tensor(s.master, "Muon");
  const Shape& shape = s.param.shape();
  const int64_t rows = shape[shape.ndim() - 2], cols = shape[shape.ndim() - 1];
  const int64_t matrices = s.param.numel() / (rows * cols);

  // M = μM + G; U = G + μM (Nesterov) or M; X0 = bf16(U). U is then overwritten piece by piece
  // with the scaled orthogonalised update O.
  Tensor u = Tensor::empty({matrices, rows, cols}, DType::f32, s.master.device());
  k.muon_momentum(s.momentum, grad, static_cast<float>(options_.momentum), options_.nesterov, u);

  // Moonlight's RMS matching, per piece: lr · sqrt(max(a, b)) · matched_adamw_rms.
  const float rms = static_cast<float>(options_.matched_adamw_rms);
  const float lr_f = static_cast<float>(lr);
  std::vector<kernels::MuonPiece> pieces;
  for (const MuonBlock& b : schema_.blocks(s.name, shape)) {
    const float adjusted_lr = lr_f * (std::sqrt(static_cast<float>(std::max(b.rows, b.cols))) * rms);
    pieces.push_back({b.row0, b.rows, b.col0, b.cols, adjusted_lr});
  }
  k.muon_orthogonalize(u, pieces, options_.ns_schedule, static_cast<float>(options_.eps));

  // W = W·(1 − lr·wd) − O, then the rounded copy to a bf16/f16 model parameter.
  const float decay = static_cast<float>(1.0 - lr * s.weight_decay);
  k.muon_apply(s.master, u, decay);
  copy_master_to_param(s);
}

}  // namespace loom::optim
