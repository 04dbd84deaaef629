// The callbacks every run has (the reference's MonitorCallback, LossCallback and
// CheckpointCallback), plus the registered types users can list under `callbacks:`:
//   LossCallback {log_interval}          another step log line every log_interval steps
//   TokensPerExpertLogger {interval}     MoE tokens per expert into metrics.jsonl/TensorBoard
//   MaxLogitsMonitor {step_interval}     max_attention_logit/layer_<i> (the reference's)
#pragma once

#include <memory>
#include <vector>

#include "loom/config/sections.h"
#include "loom/train/callbacks.h"

namespace loom::train {

class Trainer;

// The rank report when asked for (rank_report.h), monitor (metrics.jsonl, TensorBoard,
// moe_monitor), loss log line, checkpoint saving.
std::vector<std::unique_ptr<Callback>> make_builtin_callbacks(Trainer& trainer);

// The `callbacks:` entries built from the registry (built-in types registered first); ConfigError
// naming callbacks[i] for an unknown type or a bad argument. The trainer builds them before it
// allocates anything, and `loom check-config` builds them the same way to report the same errors.
std::vector<std::unique_ptr<Callback>> make_configured_callbacks(const std::vector<config::CallbackConfig>& entries);

// The MaxLogitsMonitor the trainer adds when Muon's QK-clip tracks the max logits and the
// configuration lists none (the reference's configure_max_logits_tracking).
std::unique_ptr<Callback> make_max_logits_monitor(int64_t step_interval = 1);

}  // namespace loom::train
