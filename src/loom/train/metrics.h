// Per-step metrics: the reference log line (plus tokens/s, MFU, memory and ETA), one JSON object
// per step in metrics.jsonl, and the same scalars in TensorBoard when configured.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/train/tensorboard.h"

namespace loom::train {

struct StepMetrics {
  int64_t step = 0;              // completed optimizer updates
  int64_t max_steps = 0;
  double loss = 0;               // mean over micro-batches (and ranks)
  double local_loss = 0;         // this rank's own mean over its micro-batches
  bool holds_loss = true;        // false on a pipeline stage that forms no loss
  double lr = 0;                 // the learning rate this update used
  double grad_norm = 0;          // pre-clip global norm
  int64_t consumed_samples = 0;
  int64_t global_batch_size = 0;
  double step_time_s = 0;
  double time_s = 0;             // wall time since the run started, at the end of this step
  double tokens_per_s = 0;       // all ranks together
  double mfu = 0;                // fraction of the peak FLOP/s of the processes used
  double tflops_per_device = 0;  // the reference's "throughput" column (T = TFLOP/s per device)
  int64_t mem_current_bytes = 0;
  int64_t mem_peak_bytes = 0;    // peak during this step
  double eta_s = 0;
  bool skipped = false;          // no update was written (health check or non-finite guard)
  std::string skip_reason;       // why, when skipped
  std::map<std::string, double> extra;  // load_balancing_loss, mtp_1_loss, ...
};

// One evaluation of a held-out split (runtime/evaluation.h) after optimizer step `step`.
struct EvalMetrics {
  int64_t step = 0;
  std::string split = "valid";
  double loss = 0;        // token-weighted mean cross-entropy
  double perplexity = 0;
  int64_t tokens = 0;     // loss tokens
  double seconds = 0;
  int64_t mem_peak_bytes = 0;  // device memory peak during the evaluation
};

// A prompt's greedy continuation, printed while a run trains.
struct SampleMetrics {
  int64_t step = 0;
  std::string prompt, completion;
};

// "{ step:[    1/  100], consumed_samples: 8, global_batch_size: 8, loss:   9.123456, ... }"
std::string format_log_line(const StepMetrics& m);
std::string format_duration(double seconds);  // "1h02m", "3m20s", "12s"
// "validation at step 100: loss 3.456789, perplexity 31.71 (20480 tokens, 1.2s)"
std::string format_eval_line(const EvalMetrics& e);

class MetricsWriter {
 public:
  // `jsonl_path` empty ⇒ no file; `tensorboard_dir` empty ⇒ no TensorBoard.
  MetricsWriter(const std::string& jsonl_path, const std::string& tensorboard_dir, int tensorboard_interval = 1);
  void write(const StepMetrics& m);
  // A line {"step", "eval": "valid", "val_loss", "val_ppl", "val_tokens", "eval_time_s",
  // "eval_mem_peak_bytes"} and the
  // TensorBoard scalars val/loss and val/ppl (test/... for the test split).
  void write(const EvalMetrics& e);
  // One line {"step", "sample": i, "prompt", "completion"} per sample and the TensorBoard text
  // "samples/<i>".
  void write(const std::vector<SampleMetrics>& samples);
  // An arbitrary scalar (monitor callbacks); goes to TensorBoard and to the next jsonl line.
  void add_scalar(const std::string& tag, double value, int64_t step);
  // A fact of the whole run (the CPU matrix path, say) written on every jsonl line: the file has
  // one object per step and no header line, so a reader of any one line (or of a file appended to
  // by a resumed run with a different machine) sees the facts that line was measured under.
  void set_run_field(const std::string& key, const std::string& value);
  void flush();

 private:
  std::ofstream jsonl_;
  std::string jsonl_path_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  int tensorboard_interval_;
  std::map<std::string, double> pending_;
  std::map<std::string, std::string> run_fields_;
};

}  // namespace loom::train
