// The callbacks every run has (the reference's MonitorCallback, LossCallback and
// CheckpointCallback), plus the registered types users can list under `callbacks:`:
//   LossCallback {log_interval}          another step log line every log_interval steps
//   TokensPerExpertLogger {interval}     MoE tokens per expert into metrics.jsonl/TensorBoard
#pragma once

#include <memory>
#include <vector>

#include "loom/train/callbacks.h"

namespace loom::train {

class Trainer;

// Monitor (metrics.jsonl, TensorBoard, moe_monitor), loss log line, checkpoint saving.
std::vector<std::unique_ptr<Callback>> make_builtin_callbacks(Trainer& trainer);

}  // namespace loom::train
