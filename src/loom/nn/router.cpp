#include "loom/nn/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "loom/autograd/checkpoint.h"
#include "loom/autograd/grad_mode.h"
#include "loom/nn/aux_loss.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/index.h"
#include "loom/ops/linear.h"
#include "loom/ops/reduce.h"
#include "loom/ops/shape.h"
#include "loom/ops/softmax.h"

namespace loom::nn {

TopKRouter::TopKRouter(const TransformerConfig& c)
    : Module("TopKRouter"), config_(c), experts_(c.num_experts), topk_(c.moe_topk) {
  weight_ = &register_parameter("weight", {experts_, c.hidden_size}, c.params_dtype,
                                Init::normal(c.init_std), Device::meta());
  if (c.moe_router_enable_expert_bias)
    expert_bias_ = &register_buffer("expert_bias", Tensor::empty({experts_}, DType::f32, Device::meta()));
  tokens_per_expert_ = Tensor::zeros({experts_}, DType::i64);
  step_counts_.assign(static_cast<size_t>(experts_), 0.0);
  register_operation("reduce_statistics");
}

void TopKRouter::reset_tokens_per_expert() {
  tokens_per_expert_.zero_();
  std::fill(step_counts_.begin(), step_counts_.end(), 0.0);
  step_micro_batches_ = 0;
}

void TopKRouter::update_expert_bias(const Tensor& counts) {
  LOOM_CHECK(expert_bias_ != nullptr, ValueError,
             "update_expert_bias: this router has no expert bias; set "
             "model.moe_router_enable_expert_bias: True to use aux-loss-free balancing");
  LOOM_CHECK(counts.numel() == experts_, ShapeError, "update_expert_bias: counts ",
             counts.shape().str(), " must hold one count per expert (", experts_, ")");
  std::vector<double> c = counts.to_double_vector();
  const double mean = std::accumulate(c.begin(), c.end(), 0.0) / static_cast<double>(experts_);
  autograd::NoGradGuard no_grad;
  Tensor b = expert_bias_->to(DType::f32).contiguous();
  float* pb = b.data<float>();
  const double u = config_.moe_router_bias_update_rate;
  for (int64_t i = 0; i < experts_; ++i) {
    const double diff = mean - c[i];
    pb[i] += static_cast<float>(u * (diff > 0 ? 1.0 : diff < 0 ? -1.0 : 0.0));
  }
  expert_bias_->copy_(b);
}

std::vector<int64_t> TopKRouter::select(const std::vector<double>& choice, int64_t tokens) const {
  const int64_t E = experts_, K = topk_;
  const int64_t G = config_.moe_router_num_groups > 1 ? config_.moe_router_num_groups : 1;
  const int64_t group_size = E / G, keep_groups = G > 1 ? config_.moe_router_group_topk : 1;
  std::vector<int64_t> out(static_cast<size_t>(tokens * K));
  std::vector<int64_t> order(static_cast<size_t>(E)), groups(static_cast<size_t>(G));
  std::vector<double> group_score(static_cast<size_t>(G));
  std::vector<char> allowed(static_cast<size_t>(E));
  for (int64_t t = 0; t < tokens; ++t) {
    const double* row = choice.data() + t * E;
    // Larger value first; ties go to the lower index, so selection is deterministic.
    auto better = [row](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
    std::fill(allowed.begin(), allowed.end(), 1);
    if (G > 1) {
      for (int64_t g = 0; g < G; ++g) {
        double best = -INFINITY, second = -INFINITY;
        for (int64_t e = g * group_size; e < (g + 1) * group_size; ++e) {
          if (row[e] > best) {
            second = best;
            best = row[e];
          } else if (row[e] > second) {
            second = row[e];
          }
        }
        group_score[g] = group_size >= 2 ? best + second : best;
      }
      std::iota(groups.begin(), groups.end(), 0);
      std::partial_sort(groups.begin(), groups.begin() + keep_groups, groups.end(), [&](int64_t a, int64_t b) {
        return group_score[a] > group_score[b] || (group_score[a] == group_score[b] && a < b);
      });
      std::fill(allowed.begin(), allowed.end(), 0);
      for (int64_t j = 0; j < keep_groups; ++j)
        std::fill(allowed.begin() + groups[j] * group_size, allowed.begin() + (groups[j] + 1) * group_size, 1);
    }
    int64_t n = 0;
    for (int64_t e = 0; e < E; ++e)
      if (allowed[e]) order[n++] = e;
    std::partial_sort(order.begin(), order.begin() + K, order.begin() + n, better);
    std::copy(order.begin(), order.begin() + K, out.begin() + t * K);
  }
  return out;
}

Tensor TopKRouter::balance_loss(const Tensor& scores, const std::vector<int64_t>& idx, int64_t batch,
                                int64_t seq) {
  const auto& types = config_.moe_load_balancing_types;
  if (types.empty()) return Tensor();
  const int64_t E = experts_, K = topk_, T = batch * seq;
  const DType dt = scores.dtype();
  bool per_token = false, per_sequence = false;
  for (size_t i = 0; i < types.size(); ++i) {
    if (balance_coefficient(i) == 0.0 || types[i] == "none") continue;
    (types[i] == "seq_aux_loss" ? per_sequence : per_token) = true;
  }
  // Probabilities for the balance losses: sigmoid scores are normalised per token first.
  Tensor p = scores;
  if (config_.score_function == ScoreFunction::sigmoid)
    p = ops::div(scores, ops::add_scalar(ops::sum(scores, {1}, true), 1e-20));
  std::vector<double> counts(static_cast<size_t>(E), 0.0), seq_counts(static_cast<size_t>(batch * E), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      counts[idx[t * K + k]] += 1;
      seq_counts[(t / seq) * E + idx[t * K + k]] += 1;
    }
  // The statistics of the tokens routed here: {Σ_t p [E], Σ_s p per sequence [B, E], counts [E],
  // counts per sequence [B, E]} (undefined when no loss needs them). A strategy that splits the
  // micro-batch's tokens over ranks (sequence parallelism) wraps "reduce_statistics" to sum them
  // over those ranks, so each rank computes the loss of the whole micro-batch; the token counts
  // then follow from the summed routing counts (every token makes K choices).
  std::vector<Tensor> stats = call_operation(
      "reduce_statistics",
      {per_token ? ops::sum(p, {0}) : Tensor(),
       per_sequence ? ops::sum(ops::reshape(p, {batch, seq, E}), {1}) : Tensor(),
       per_token ? Tensor::from_vector(counts, {E}) : Tensor(),
       per_sequence ? Tensor::from_vector(seq_counts, {batch, E}) : Tensor()},
      [](const std::vector<Tensor>& in) { return in; });
  double tokens = static_cast<double>(T), seq_tokens = static_cast<double>(seq);
  if (per_token) {
    counts = stats[2].to_double_vector();
    tokens = std::accumulate(counts.begin(), counts.end(), 0.0) / static_cast<double>(K);
  }
  if (per_sequence) {
    seq_counts = stats[3].to_double_vector();
    seq_tokens = std::accumulate(seq_counts.begin(), seq_counts.begin() + E, 0.0) / static_cast<double>(K);
  }
  Tensor total;
  for (size_t i = 0; i < types.size(); ++i) {
    const double alpha = balance_coefficient(i);
    if (alpha == 0.0 || types[i] == "none") continue;
    Tensor term;
    if (types[i] == "seq_aux_loss") {
      Tensor c = Tensor::from_vector(seq_counts, {batch, E}).to(dt);
      term = ops::scale(ops::sum(ops::mul(stats[1], c)),
                        alpha * E / (static_cast<double>(K) * seq_tokens * seq_tokens * batch));
    } else {
      std::vector<double> c = counts;
      if (types[i] == "gbs_aux_loss") {
        // Mean counts over the step's micro-batches so far (this one included).
        const bool fresh = !autograd::is_recomputing();
        const int64_t m = step_micro_batches_ + (fresh ? 1 : 0);
        for (int64_t e = 0; e < E; ++e) c[e] = (step_counts_[e] + (fresh ? counts[e] : 0.0)) / m;
      }
      Tensor ct = Tensor::from_vector(c, {E}).to(dt);
      term = ops::scale(ops::sum(ops::mul(stats[0], ct)), alpha * E / (static_cast<double>(K) * tokens * tokens));
    }
    total = total.defined() ? ops::add(total, term) : term;
  }
  if (autograd::records_training_statistics()) {
    for (int64_t e = 0; e < E; ++e) step_counts_[e] += counts[e];
    ++step_micro_batches_;
  }
  return total;
}

double TopKRouter::balance_coefficient(size_t i) const {
  const auto& coeffs = config_.moe_aux_loss_coeffs;
  return coeffs.empty() ? 0.0 : coeffs[std::min(i, coeffs.size() - 1)];
}

Routing TopKRouter::route(const Tensor& x) {
  LOOM_CHECK(x.dim() == 3 && x.size(2) == config_.hidden_size, ShapeError, "router: input ",
             x.shape().str(), " must be [batch, seq, ", config_.hidden_size, "]");
  const int64_t B = x.size(0), S = x.size(1), T = B * S, E = experts_, K = topk_;
  const DType rd = x.dtype() == DType::f64 ? DType::f64 : config_.router_dense_type;
  Tensor logits = ops::linear(ops::cast(ops::reshape(x, {T, config_.hidden_size}), rd),
                              ops::cast(weight_->tensor, rd));
  Tensor scores = config_.score_function == ScoreFunction::sigmoid ? ops::sigmoid(logits)
                                                                    : ops::softmax(logits, -1);
  std::vector<double> choice = scores.detach().to_double_vector();
  if (expert_bias_) {
    std::vector<double> b = expert_bias_->to_double_vector();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) choice[t * E + e] += b[e];
  }
  std::vector<int64_t> idx = select(choice, T);

  Routing r;
  r.indices = Tensor::from_vector(idx, {T, K});
  Tensor w = ops::gather(scores, 1, r.indices);
  // Top-1 too, as transformers does: its one weight becomes 1 (router.h).
  if (config_.norm_topk_prob) w = ops::div(w, ops::add_scalar(ops::sum(w, {1}, true), 1e-20));
  if (config_.routed_scaling_factor != 1.0) w = ops::scale(w, config_.routed_scaling_factor);
  Tensor aux = balance_loss(scores, idx, B, S);
  if (aux.defined()) {
    w = attach_auxiliary_loss(w, aux, aux_grad_scale_);
    r.aux_loss = aux.detach();
  }
  r.weights = w;
  if (autograd::records_training_statistics()) {
    int64_t* counts = tokens_per_expert_.data<int64_t>();
    for (int64_t v : idx) ++counts[v];
  }
  return r;
}

}  // namespace loom::nn
