#include "loom/train/train_state_monitor.h"

#include <cmath>
#include <span>

#include <nlohmann/json.hpp>

#include "loom/optim/grad_norm.h"
#include "loom/optim/param_groups.h"
#include "loom/train/trainer.h"

namespace loom::train {

namespace {

// The word embeddings, whose grad norm the health check watches (every model names them so).
constexpr const char* kEmbedding = "embedding.word_embeddings.weight";

// A selection that names some parameter (true, a non-empty pattern, a non-empty list).
bool selects_any(const config::NormSelection& selection) {
  if (const bool* all = std::get_if<bool>(&selection)) return *all;
  if (const std::string* one = std::get_if<std::string>(&selection)) return !one->empty();
  return !std::get<std::vector<std::string>>(selection).empty();
}

bool health_check_on(const config::TrainConfig& c) {
  return c.is_explicit("monitor.health_checkpoint") ||
         c.is_explicit("monitor.health_checkpoint.embedding_local_norm_threshold");
}

// Σ over every rank of each named parameter's Σg² / replica factor: its squared global grad
// norm. The names differ between pipeline stages, so the ranks exchange name -> value maps.
std::map<std::string, double> global_squares(Trainer& t, const config::NormSelection& selection, bool embedding) {
  nlohmann::json mine = nlohmann::json::object();
  const dist::ParallelModel& parallel = t.parallel_model();
  for (const optim::NamedParam& p : t.optimizer().named_params()) {
    if (!p.param.grad().defined() || !(norm_selects(selection, p.name) || (embedding && p.name == kEmbedding)))
      continue;
    mine[p.name] = optim::grad_sum_of_squares(p.param.grad()) / parallel.replica_factor(p.name);
  }
  std::map<std::string, double> total;
  for (const std::string& text : dist::all_gather_strings(t.mesh().world(), mine.dump())) {
    const nlohmann::json theirs = nlohmann::json::parse(text);
    for (const auto& [name, value] : theirs.items()) total[name] += value.get<double>();
  }
  return total;
}

// This rank's Σg² over the selected grads it holds.
double device_square(Trainer& t, const config::NormSelection& selection) {
  double sum = 0;
  for (const optim::NamedParam& p : t.optimizer().named_params())
    if (p.param.grad().defined() && norm_selects(selection, p.name)) sum += optim::grad_sum_of_squares(p.param.grad());
  return sum;
}

// Per rank: its data-parallel index, whether it formed a loss, that loss, its device Σg².
void add_per_rank(Trainer& t, const StepMetrics& m, const config::TrainStateConfig& ts, TrainStateReport& out) {
  const bool device_norm = selects_any(ts.device_norm);
  const std::vector<double> mine = {static_cast<double>(t.data_loader().settings().shard.rank), m.holds_loss ? 1.0 : 0.0,
                                    m.local_loss, device_norm ? device_square(t, ts.device_norm) : 0.0};
  dist::ProcessGroup& world = t.mesh().world();
  std::vector<double> all(mine.size() * static_cast<size_t>(world.size()));
  world.all_gather(std::span<const double>(mine), std::span<double>(all));
  for (int r = 0; r < world.size(); ++r) {
    const double* row = all.data() + static_cast<size_t>(r) * mine.size();
    const bool holds = row[1] != 0.0;
    const std::string dp = "local_loss/dp_" + std::to_string(static_cast<int64_t>(row[0]));
    if (ts.local_loss && holds && !out.scalars.contains(dp)) out.scalars[dp] = row[2];
    if (ts.device_loss && holds) out.scalars["device_loss/rank_" + std::to_string(r)] = row[2];
    if (device_norm) out.scalars["device_norm/rank_" + std::to_string(r)] = std::sqrt(row[3]);
  }
}

}  // namespace

bool norm_selects(const config::NormSelection& selection, const std::string& name) {
  if (const bool* all = std::get_if<bool>(&selection)) return *all;
  if (const std::string* one = std::get_if<std::string>(&selection)) return !one->empty() && optim::matches_any({*one}, name);
  return optim::matches_any(std::get<std::vector<std::string>>(selection), name);
}

TrainStateReport train_state_report(Trainer& t, const StepMetrics& m) {
  const config::TrainConfig& c = t.config();
  const config::TrainStateConfig& ts = c.monitor.train_state;
  TrainStateReport out;
  const bool health = health_check_on(c);
  if (selects_any(ts.local_norm) || health) {
    for (const auto& [name, square] : global_squares(t, ts.local_norm, health)) {
      if (norm_selects(ts.local_norm, name)) out.scalars["local_norm/" + name] = std::sqrt(square);
      if (health && name == kEmbedding) out.embedding_norm = std::sqrt(square);
    }
    if (out.embedding_norm) out.scalars["embedding_local_norm"] = *out.embedding_norm;
  }
  if (ts.local_loss || ts.device_loss || selects_any(ts.device_norm)) add_per_rank(t, m, ts, out);
  return out;
}

}  // namespace loom::train
