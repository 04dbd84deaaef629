// monitor.train_state and the embedding health check of monitor.health_checkpoint under any
// layout (spec configuration.md "monitor"; MindFormers' TrainingStateMonitor and the checkpoint
// health monitor). Every rank computes them after a step (they gather over the world); rank 0
// writes them:
//
//   local_norm/<param>     the parameter's global grad norm after clipping: every rank adds its
//                          local grad's Σg² divided by the grad's replica factor (as the global
//                          norm does), so FSDP shards, TP pieces and pipeline stages add up to the
//                          one-process value
//   local_loss/dp_<i>      data-parallel rank i's own loss (its micro-batches' mean)
//   device_norm/rank_<r>   the norm of the selected grads rank r holds (its own pieces)
//   device_loss/rank_<r>   rank r's own loss, for the ranks that form one (a pipeline's last stage)
//   embedding_local_norm   the word embeddings' global grad norm, when the health check is on
#pragma once

#include <map>
#include <optional>
#include <string>

#include "loom/config/sections.h"
#include "loom/train/metrics.h"

namespace loom::train {

class Trainer;

struct TrainStateReport {
  std::map<std::string, double> scalars;       // tag -> value, as above (complete on rank 0)
  std::optional<double> embedding_norm;        // with the health check, on every rank
};

// Whether `name` is selected by a local_norm / device_norm value: true (every parameter), a name,
// substring or glob, or a list of them; false or "" selects none.
bool norm_selects(const config::NormSelection& selection, const std::string& name);

// The figures above for the step `m` just ended (a collective: every rank calls it alike).
TrainStateReport train_state_report(Trainer& trainer, const StepMetrics& m);

}  // namespace loom::train
