#include "loom/optim/muon.h"

#include <algorithm>
#include <cmath>

#include "loom/core/log.h"
#include "loom/core/parallel.h"
#include "loom/optim/adamw.h"
#include "loom/optim/adamw_kernel.h"
#include "loom/optim/option_reader.h"

namespace loom::optim {

namespace {

const char* kMuonKeys =
    "type, learning_rate, weight_decay, matched_adamw_rms, momentum, eps, nesterov, ns_steps, "
    "ns_coefficients, adamw_betas, adamw_eps, qk_clip_enabled, qk_clip_threshold, comm_strategy, "
    "use_fused_adamw, adamw_include, weight_decay_include, weight_decay_exclude, swap";

// Below this many elements per piece, pieces run in parallel with single-threaded BLAS; above
// it, one piece at a time with multi-threaded BLAS.
constexpr int64_t kSmallPiece = 512 * 512;

struct PieceJob {
  int64_t matrix;
  MuonBlock block;
};

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
  const int64_t n = s.param.numel();
  const Shape& shape = s.param.shape();
  const int64_t rows = shape[shape.ndim() - 2], cols = shape[shape.ndim() - 1];
  const int64_t matrices = n / (rows * cols);
  const float mu = static_cast<float>(options_.momentum);
  const bool nesterov = options_.nesterov;
  float* m = s.momentum.data<float>();
  const float* g = grad.data<float>();

  // M = μM + G; U = G + μM (Nesterov) or M; X0 = bf16(U). U is then overwritten piece by piece
  // with the scaled orthogonalised update O.
  std::vector<float> u(static_cast<size_t>(n));
  parallel_for(0, n, 1 << 15, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const float mi = m[i] * mu + g[i];
      m[i] = mi;
      u[i] = round_bf16_rne(nesterov ? g[i] + mi * mu : mi);
    }
  });

  std::vector<PieceJob> jobs;
  int64_t largest = 0;
  for (const MuonBlock& b : schema_.blocks(s.name, shape)) largest = std::max(largest, b.rows * b.cols);
  for (int64_t k = 0; k < matrices; ++k)
    for (const MuonBlock& b : schema_.blocks(s.name, shape)) jobs.push_back({k, b});

  const float rms = static_cast<float>(options_.matched_adamw_rms);
  const float lr_f = static_cast<float>(lr);
  const float eps = static_cast<float>(options_.eps);
  auto run = [&](const PieceJob& job, NsWorkspace& ws, std::vector<float>& piece) {
    const MuonBlock& b = job.block;
    float* mat = u.data() + job.matrix * rows * cols;
    piece.resize(static_cast<size_t>(b.rows * b.cols));
    for (int64_t r = 0; r < b.rows; ++r)
      std::copy_n(mat + (b.row0 + r) * cols + b.col0, b.cols, piece.data() + r * b.cols);
    newton_schulz_bf16(piece.data(), b.rows, b.cols, options_.ns_schedule, eps, ws);
    // Moonlight's RMS matching, per piece: lr · sqrt(max(a, b)) · matched_adamw_rms.
    const float adjusted_lr =
        lr_f * (std::sqrt(static_cast<float>(std::max(b.rows, b.cols))) * rms);
    for (int64_t r = 0; r < b.rows; ++r) {
      float* dst = mat + (b.row0 + r) * cols + b.col0;
      const float* src = piece.data() + r * b.cols;
      for (int64_t c = 0; c < b.cols; ++c) dst[c] = adjusted_lr * src[c];
    }
  };
  const auto job_count = static_cast<int64_t>(jobs.size());
  if (job_count > 1 && largest <= kSmallPiece && num_threads() > 1) {
    parallel_for(0, job_count, 1, [&](int64_t b, int64_t e) {
      NsWorkspace ws;
      std::vector<float> piece;
      for (int64_t j = b; j < e; ++j) run(jobs[j], ws, piece);
    });
  } else {
    NsWorkspace ws;
    std::vector<float> piece;
    for (const PieceJob& job : jobs) run(job, ws, piece);
  }

  // W = W·(1 − lr·wd) − O, then the rounded copy to a bf16/f16 model parameter.
  const float decay = static_cast<float>(1.0 - lr * s.weight_decay);
  float* w = s.master.data<float>();
  parallel_for(0, n, 1 << 15, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) w[i] = w[i] * decay - u[i];
  });
  copy_master_to_param(s);
}

}  // namespace loom::optim
