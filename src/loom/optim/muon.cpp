#include "loom/optim/muon.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "loom/core/log.h"
#include "loom/core/text.h"
#include "loom/kernels/kernel_table.h"
#include "loom/optim/adamw.h"
#include "loom/optim/option_reader.h"

namespace loom::optim {

namespace {

// Muon's own hyper-parameters (optimizer.<key>), read into `o`.
void read_muon_keys(OptionReader& r, MuonOptions& o) {
  o.matched_adamw_rms = r.number("matched_adamw_rms").value_or(o.matched_adamw_rms);
  o.momentum = r.number("momentum").value_or(o.momentum);
  o.nesterov = r.boolean("nesterov").value_or(o.nesterov);
  o.ns_steps = r.integer("ns_steps").value_or(o.ns_steps);
  const nlohmann::ordered_json* coefficients = r.raw("ns_coefficients");
  const std::string problem = coefficients ? ns_coefficients_problem(*coefficients) : "";
  const bool segmented = coefficients && problem.empty() && (*coefficients)[0].is_array();
  if (!problem.empty()) r.error("ns_coefficients", problem);
  else if (o.ns_steps >= 1 || segmented)  // segments ignore ns_steps; check() reports a bad one
    o.ns_schedule = make_ns_schedule(coefficients ? *coefficients : nlohmann::ordered_json(), o.ns_steps,
                                     r.path("ns_coefficients"));
  o.adamw_betas = read_betas(r, "adamw_betas").value_or(o.adamw_betas);
  o.adamw_eps = r.number("adamw_eps").value_or(o.adamw_eps);
  o.qk_clip_enabled = r.boolean("qk_clip_enabled").value_or(o.qk_clip_enabled);
  o.qk_clip_threshold = r.number("qk_clip_threshold").value_or(o.qk_clip_threshold);
  o.comm_strategy = r.string("comm_strategy").value_or(o.comm_strategy);
  o.use_fused_adamw = r.boolean("use_fused_adamw").value_or(o.use_fused_adamw);
  o.adamw_include = r.string_list("adamw_include").value_or(o.adamw_include);
}

}  // namespace

MuonOptions MuonOptions::read(OptionReader& r) {
  MuonOptions o;
  r.mark_read("type");  // the factory's
  r.reject_null("eps", "float", format_float(o.eps));
  r.reject_null("weight_decay", "float", format_float(o.weight_decay));
  r.reject_null("betas", "List[float]", "[0.9, 0.95]");
  o.learning_rate = read_unused_learning_rate(r).value_or(o.learning_rate);
  o.weight_decay = r.number("weight_decay").value_or(o.weight_decay);
  o.eps = r.number("eps").value_or(o.eps);
  // optimizer.betas belongs to AdamW (the effective configuration writes its default back).
  if (auto betas = read_betas(r, "betas"); betas && *betas != AdamWOptions{}.betas)
    r.warn("betas", "is not used by Muon; its AdamW fallback (embeddings, output layer, 1-D parameters) takes "
                    "optimizer.adamw_betas");
  read_muon_keys(r, o);
  read_weight_decay_rules(r, o.weight_decay_include, o.weight_decay_exclude);
  // Refused with the model checks (the constructor; config for check-config), in the reference's
  // order: swap, model, then the hyper-parameters.
  o.swap = r.boolean("swap").value_or(false);
  o.check(r.problems());
  r.warn_unread("Muon");
  return o;
}

MuonOptions MuonOptions::from_json(const nlohmann::ordered_json& section) {
  OptionProblems problems;
  OptionReader reader(section, "optimizer", problems);
  MuonOptions o = read(reader);
  problems.throw_if_errors();
  return o;
}

void MuonOptions::check(OptionProblems& problems) const {
  const MuonOptions defaults;
  auto positive = [&problems](const char* key, double value, double fallback) {
    if (!(value > 0.0))
      problems.error(std::string("optimizer.") + key,
                     "must be > 0, got " + format_float(value) + "; the default is " + format_float(fallback));
  };
  if (!(weight_decay >= 0.0))
    problems.error("optimizer.weight_decay",
                   "must be >= 0, got " + format_float(weight_decay) + "; use 0 to disable weight decay");
  positive("matched_adamw_rms", matched_adamw_rms, defaults.matched_adamw_rms);
  if (!(momentum >= 0.0 && momentum < 1.0))
    problems.error("optimizer.momentum", "must be in [0, 1), got " + format_float(momentum) + "; the default is " +
                                             format_float(defaults.momentum));
  positive("eps", eps, defaults.eps);
  if (ns_steps < 1) problems.error("optimizer.ns_steps", "must be >= 1, got " + std::to_string(ns_steps));
  else if (ns_schedule.empty())
    problems.error("optimizer.ns_coefficients", "gives no Newton-Schulz iterations");
  check_betas(adamw_betas, "optimizer.adamw_betas", problems);
  positive("adamw_eps", adamw_eps, defaults.adamw_eps);
  if (qk_clip_enabled && !(qk_clip_threshold > 0.0))
    problems.error("optimizer.qk_clip_threshold", "must be > 0 while qk_clip_enabled is true, got " +
                                                      format_float(qk_clip_threshold) +
                                                      " (or set qk_clip_enabled: False)");
  if (const std::string problem = muon_comm_strategy_problem(comm_strategy); !problem.empty())
    problems.error("optimizer.comm_strategy", problem);
  if (!(learning_rate >= 0.0))
    problems.error("optimizer.learning_rate", "must be >= 0, got " + format_float(learning_rate));
}

void MuonOptions::validate() const {
  OptionProblems problems;
  check(problems);
  problems.throw_if_errors();
}

bool uses_newton_schulz(const MuonOptions& options, const std::string& name, const Shape& global_shape) {
  const int nd = global_shape.ndim();
  return (nd == 2 || nd == 3) && !matches_any(options.adamw_include, name);
}

Muon::Muon(const NamedParams& params, const MuonOptions& options,
           const std::optional<MuonModelInfo>& model, bool swap,
           const WeightDecayRules& model_rules, std::shared_ptr<MuonSharding> sharding)
    : Optimizer(options.learning_rate), options_(options), sharding_(std::move(sharding)) {
  LOOM_CHECK(!(swap || options.swap), ValueError,
             "Muon does not support swap. Disable swap in the memory section or use AdamW.");
  LOOM_CHECK(model.has_value(), ValueError, "Model must be provided for Muon optimizer.");
  LOOM_CHECK(!model->legacy, ValueError, "Muon does not support Legacy Model.");
  LOOM_CHECK(model->multi_latent_attention, ValueError,
             "Current Muon implementation only supports models with Multi-Latent Attention "
             "enabled. Set model.multi_latent_attention: True or use optimizer.type: AdamW.");
  options_.validate();
  strategy_ = parse_muon_comm_strategy(options_.comm_strategy);
  mla_ = model->mla;
  schema_ = model->schema ? *model->schema : MuonSplitSchema::standard(mla_);

  WeightDecayRules rules = model_rules;
  rules.include = options_.weight_decay_include;
  rules.exclude = options_.weight_decay_exclude;
  const auto ns_steps = static_cast<int64_t>(options_.ns_schedule.size());
  std::vector<SplitMatrix> split;
  for (const auto& p : trainable_params(params)) {
    Matrix m;
    m.layout = sharding_ ? sharding_->layout(p.name) : ShardLayout::whole(p.param.shape());
    const Shape& shape = m.layout.global_shape;
    LOOM_CHECK(shape.ndim() == p.param.dim(), ShapeError, "Muon: parameter '", p.name, "' is ",
               p.param.shape().str(), " locally but its global shape is ", shape.str());
    const bool decay = applies_weight_decay(p.name, shape, rules);
    const bool use_muon = uses_newton_schulz(options_, p.name, shape);
    add_param(p, decay ? options_.weight_decay : 0.0, use_muon ? UpdateRule::muon : UpdateRule::adamw);
    if (use_muon) {
      m.blocks = schema_.blocks(p.name, shape);  // of the whole matrix; fails here, not at step 1
      if (m.layout.split_matrices) {
        // Estimated from the global shape, so every rank plans the same owners.
        m.split = static_cast<int64_t>(split.size());
        split.push_back({p.name, newton_schulz_work(m.blocks, shape.ndim() == 3 ? shape[0] : 1, ns_steps)});
        split_params_.push_back(params_.size() - 1);
      }
    }
    matrices_.push_back(std::move(m));
  }
  allocate_state();
  if (sharding_) sharding_->plan(split, strategy_);
}

UpdateRule Muon::rule_of(const std::string& name) const {
  for (const auto& s : params_)
    if (s.name == name) return s.rule;
  LOOM_THROW(ValueError, "Muon: no parameter named '", name, "'");
}

std::string Muon::prepare_update(double lr, int64_t t) {
  // Everything up to the write runs on scratch: U (momentum, Newton–Schulz, scales) is kept per
  // parameter for apply_update; the AdamW fallback only checks here.
  last_stats_ = MuonStepStats{};
  pending_.assign(params_.size(), Tensor());
  std::vector<bool> overflows(params_.size(), false);
  auto note = [&overflows](bool finite, size_t i) {
    if (!finite) overflows[i] = true;
  };
  std::vector<SplitUpdate> split;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamState& s = params_[i];
    Tensor grad = fp32_grad(s);
    if (!grad.defined()) continue;
    if (s.rule == UpdateRule::adamw) {
      note(adamw_step_is_finite(s, grad, lr, options_.adamw_betas[0], options_.adamw_betas[1], options_.adamw_eps, t),
           i);
      continue;
    }
    const Matrix& m = matrices_[i];
    Tensor u = Tensor::empty(s.param.shape(), DType::f32, s.master.device());
    note(kernels::for_tensor(s.master, "Muon")
             .muon_momentum(s.momentum, grad, static_cast<float>(options_.momentum), options_.nesterov, u),
         i);
    pending_[i] = u;
    if (m.split >= 0) {
      split.push_back({static_cast<size_t>(m.split), u});
      continue;
    }
    newton_schulz(m, u, piece_scales(m, lr));
  }
  if (!split.empty()) {
    // Whole matrices are orthogonalised unscaled (wherever the strategy runs them); each rank
    // then scales its own slice. x·s rounds the same whether the kernel or scale_ multiplies.
    sharding_->orthogonalize(split, [this](size_t matrix, Tensor& full) {
      const Matrix& m = matrices_[split_params_[matrix]];
      newton_schulz(m, full, std::vector<float>(m.blocks.size(), 1.f));
    });
    for (SplitUpdate& update : split) {
      const size_t i = split_params_[update.matrix];
      scale_local_pieces(matrices_[i], update.local, piece_scales(matrices_[i], lr));
      pending_[i] = update.local;
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!pending_[i].defined()) continue;
    const ParamState& s = params_[i];
    note(kernels::for_tensor(s.master, "Muon")
             .muon_apply_is_finite(s.master, pending_[i], decay_of(s, lr), s.param.dtype()),
         i);
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (overflows[i]) return params_[i].name;
  return "";
}

void Muon::apply_update(double lr, int64_t t) {
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState& s = params_[i];
    Tensor grad = fp32_grad(s);
    if (!grad.defined()) continue;
    if (s.rule == UpdateRule::adamw) {
      adamw_step(s, grad, lr, options_.adamw_betas[0], options_.adamw_betas[1], options_.adamw_eps, t);
      continue;
    }
    // M = μM + G and W = W·(1 − lr·wd) − O, then the rounded copy to a bf16/f16 model parameter.
    kernels::for_tensor(s.master, "Muon")
        .muon_apply(s.master, s.momentum, grad, static_cast<float>(options_.momentum), pending_[i], decay_of(s, lr));
    copy_master_to_param(s);
  }
  pending_.clear();
  last_qk_clip_ = QkClipResult{};
  if (options_.qk_clip_enabled && !qk_inputs_.empty()) apply_qk_clip_to_masters();
  qk_inputs_.clear();
}

void Muon::discard_update() {
  pending_.clear();
  last_qk_clip_ = QkClipResult{};
  qk_inputs_.clear();
}

float Muon::decay_of(const ParamState& s, double lr) { return static_cast<float>(1.0 - lr * s.weight_decay); }

std::vector<float> Muon::piece_scales(const Matrix& m, double lr) const {
  // Moonlight's RMS matching, per piece: lr · sqrt(max(a, b)) · matched_adamw_rms.
  const float rms = static_cast<float>(options_.matched_adamw_rms);
  const float lr_f = static_cast<float>(lr);
  std::vector<float> scales;
  for (const MuonBlock& b : m.blocks)
    scales.push_back(lr_f * (std::sqrt(static_cast<float>(std::max(b.rows, b.cols))) * rms));
  return scales;
}

void Muon::newton_schulz(const Matrix& m, Tensor& u, const std::vector<float>& scales) {
  const Shape& g = m.layout.global_shape;
  const int64_t rows = g[g.ndim() - 2], cols = g[g.ndim() - 1];
  const int64_t matrices = rows * cols > 0 ? u.numel() / (rows * cols) : 0;
  if (matrices == 0) return;  // a shard holding no matrix of a 3-D batch
  std::vector<kernels::MuonPiece> pieces;
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    const MuonBlock& b = m.blocks[i];
    pieces.push_back({b.row0, b.rows, b.col0, b.cols, scales[i]});
  }
  Tensor batch = u.view({matrices, rows, cols});
  const auto t0 = std::chrono::steady_clock::now();
  kernels::for_tensor(u, "Muon").muon_orthogonalize(batch, pieces, options_.ns_schedule,
                                                   static_cast<float>(options_.eps));
  last_stats_.ns_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  last_stats_.ns_matrices += matrices;
}

void Muon::scale_local_pieces(const Matrix& m, Tensor& u, const std::vector<float>& scales) const {
  const kernels::KernelTable& k = kernels::for_tensor(u, "Muon");
  const int nd = m.layout.global_shape.ndim();
  const int rd = nd - 2, cd = nd - 1;  // the matrix dims
  for (const ShardBox& box : m.layout.boxes)
    for (size_t i = 0; i < m.blocks.size(); ++i) {
      const MuonBlock& b = m.blocks[i];
      const int64_t r0 = std::max(b.row0, box.global_offset[rd]);
      const int64_t r1 = std::min(b.row0 + b.rows, box.global_offset[rd] + box.shape[rd]);
      const int64_t c0 = std::max(b.col0, box.global_offset[cd]);
      const int64_t c1 = std::min(b.col0 + b.cols, box.global_offset[cd] + box.shape[cd]);
      if (r1 <= r0 || c1 <= c0) continue;
      Tensor part = nd == 3 ? u.narrow(0, box.local_offset[0], box.shape[0]) : u;
      part = part.narrow(rd, box.local_offset[rd] + (r0 - box.global_offset[rd]), r1 - r0)
                 .narrow(cd, box.local_offset[cd] + (c0 - box.global_offset[cd]), c1 - c0);
      k.scale_(part, static_cast<double>(scales[i]));
    }
}

void Muon::apply_qk_clip_to_masters() {
  // Each rank scales the rows of its own shard (its placement says which global rows they are).
  auto target_of = [this](const std::string& name) -> QkClipTarget {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (params_[i].name != name) continue;
      const ShardLayout& layout = matrices_[i].layout;
      QkClipTarget t;
      t.master = params_[i].master;
      t.global_rows = layout.global_shape.ndim() >= 1 ? layout.global_shape[0] : 0;
      for (const ShardBox& box : layout.boxes) {
        const RowRun run{box.local_offset[0], box.global_offset[0], box.shape[0]};
        const bool seen = std::any_of(t.rows.begin(), t.rows.end(), [&](const RowRun& r) {
          return r.local_begin == run.local_begin && r.global_begin == run.global_begin && r.length == run.length;
        });
        if (!seen) t.rows.push_back(run);  // boxes split along the columns share their rows
      }
      return t;
    }
    return QkClipTarget();
  };
  last_qk_clip_ = apply_qk_clip(qk_inputs_, static_cast<float>(options_.qk_clip_threshold), mla_, target_of);
  for (const auto& name : last_qk_clip_.scaled)
    for (const auto& s : params_)
      if (s.name == name) copy_master_to_param(s);
  if (last_qk_clip_.fired)
    log::debug("QK-clip: ", last_qk_clip_.heads_clipped, " heads clipped, max logit ",
               last_qk_clip_.max_logit, " >= threshold ", options_.qk_clip_threshold);
}

}  // namespace loom::optim
