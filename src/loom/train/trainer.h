// The training loop of the reference trainer (MindFormers' Trainer; docs/training.md "The step"),
// the same on one process and on many. It takes the model from a runtime::ModelRuntime (mesh,
// parallel model, schedule), builds the rest of a run around it (data, optimizer, checkpoints,
// metrics, callbacks), then per step
//
//   schedule   A = num_accumulation_steps micro-batches of forward + backward (runtime/schedule.h);
//              A follows training.rampup_batch_size's ramp from one step to the next
//   grad norm  the global norm over every rank's local grads, and clipping (optim/grad_norm.h)
//   update     the optimizer with lr = lr_schedule(global_step)
//   book-keep  consumed_samples and global_step, metrics, callbacks, checkpoints
//   validate   every training.eval_interval steps and after the last: the first eval_iters
//              global batches of the validation split through the schedule's eval mode
//              (runtime/evaluation.h), which changes nothing the next step reads
//   sample     every training.sample_interval steps and after the last: the greedy
//              continuation of each training.sample_prompts (runtime/generation.h)
//
// The parallel layout was applied once, by the runtime (one process is a mesh of size one), and
// what a step needs from the layout beyond the schedule is the model hooks' (model_hooks.h), so
// nothing here branches on it. Ctrl-C / SIGTERM end the current step, save, and return.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/config.h"
#include "loom/data/data_loader.h"
#include "loom/data/tokenizer/tokenizer.h"
#include "loom/dist/device_mesh.h"
#include "loom/dist/parallelize.h"
#include "loom/optim/optimizer.h"
#include "loom/runtime/backend.h"
#include "loom/runtime/model_runtime.h"
#include "loom/train/callbacks.h"
#include "loom/train/checkpoint.h"
#include "loom/train/metrics.h"
#include "loom/train/model_hooks.h"
#include "loom/train/profiler.h"

namespace loom::train {

struct TrainerOptions {
  std::string run_dir;   // where config, log, metrics and (by default) checkpoints go
  bool install_signal_handlers = true;
  bool quiet = false;    // no per-step log lines (tests)
  // Write what each rank held and sent during one step to <run_dir>/rank_report/rank-<r>.json
  // (rank_report.h): -1 never, 0 the run's last step, else that global step.
  int64_t rank_report_step = -1;
};

struct TrainState {
  int64_t global_step = 0;       // completed optimizer updates
  int64_t consumed_samples = 0;  // global samples trained on
  int64_t epoch = 0;
  int64_t num_accumulation_steps = 1;
  int64_t consecutive_skips = 0;
  // The embedding health check's verdict on the last step (monitor.health_checkpoint):
  // checkpoints record it, and a resume from a save directory takes the latest healthy one.
  bool healthy = true;
};

struct TrainSummary {
  int64_t first_step = 0;   // global_step before the run (resume point)
  int64_t last_step = 0;
  double first_loss = 0, last_loss = 0;
  double mean_tokens_per_s = 0;  // steps after the first of this run
  double mean_mfu = 0;
  std::string run_dir;
  bool interrupted = false;
  int64_t steps_run = 0;        // steps this run took
  int64_t skipped_updates = 0;  // of them, steps whose update was skipped (non-finite, above threshold)
  std::optional<double> last_val_loss;  // the last validation of this run, when one ran
};

class Trainer {
 public:
  // `loaded` must be resolved for the runtime's world (LoadOptions::world_size) and be what the
  // runtime was built from: the trainer takes the loader and section options from it and
  // resolves nothing again. It initialises the runtime's weights (or loads them, resuming).
  Trainer(config::LoadedConfig loaded, runtime::ModelRuntime& runtime, TrainerOptions options);
  // One process: the trainer builds the backend of the configuration's device and the runtime
  // itself (tests, programs that embed Loom).
  Trainer(config::LoadedConfig loaded, TrainerOptions options);
  ~Trainer();

  TrainSummary train();

  // For callbacks and tests.
  const config::TrainConfig& config() const { return config_; }
  const config::ResolvedConfig& resolved() const { return resolved_; }
  TrainState& state() { return state_; }
  runtime::ModelRuntime& runtime() { return *runtime_; }
  runtime::LanguageModel& model() { return runtime_->model(); }
  ModelHooks& model_hooks() { return *hooks_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  data::DataLoader& data_loader() { return *loader_; }
  CheckpointManager& checkpoints() { return *checkpoints_; }
  MetricsWriter& metrics_writer() { return *metrics_; }
  const TrainerOptions& options() const { return options_; }
  int rank() const { return runtime_->backend().rank(); }
  int world_size() const { return runtime_->backend().world_size(); }
  int64_t seq_length() const { return seq_length_; }
  // Saves a checkpoint of the current state now (the checkpoint callback and Ctrl-C use it).
  void save_checkpoint();
  // The device mesh (size one on one process) and the parallelized model.
  dist::DeviceMesh& mesh() { return runtime_->mesh(); }
  dist::ParallelModel& parallel_model() { return runtime_->parallel(); }

 private:
  // build() runs these in order; each reads what the ones before it made.
  void build();
  void prepare_run_directory();
  void build_model();
  void build_data();
  // The validation loader and how many global batches an evaluation reads (eval_interval > 0).
  void build_validation();
  // The sample prompts' tokenizer and ids (sample_interval > 0).
  void build_sampling();
  void build_optimizer();
  void build_checkpointing();
  void build_monitoring();
  void resume(const std::string& load_path);
  // The next step's micro-batches from the samples consumed (training.rampup_batch_size), given
  // to the schedule and to the injected losses' backward scale.
  void follow_batch_ramp();
  void load_sharded(const std::string& dir, bool load_optim);
  // One optimizer step; returns the tokens it trained on over every data-parallel rank.
  int64_t train_step(StepMetrics& m);
  // Whether the validation runs after optimizer step `step`, and the validation itself.
  bool validates_after(int64_t step) const;
  EvalMetrics validate();
  bool samples_after(int64_t step) const;
  std::vector<SampleMetrics> sample();
  // The grad norm with every rank's grads, then clipping; returns the pre-clip norm.
  double clip_gradients();
  // Why the health check skips this update ("" to apply it): a non-finite loss or norm, or a norm
  // above monitor.health_checkpoint.global_norm_skip_threshold. The optimizer's own guard skips
  // an update that would overflow (optim/optimizer.h); either way the schedule still advances.
  std::string update_skip_reason(double loss, double grad_norm) const;
  // Counts a skipped update (`reason` non-empty) or resets the count; Error past
  // monitor.health_checkpoint.global_norm_skip_time skips in a row.
  void count_skip(const std::string& reason, double loss, double grad_norm);
  CheckpointContents checkpoint_contents();
  // Error "<what> <tensor> holds inf or nan; <fix>" when a parameter or optimizer state of any
  // rank is not finite (finite_state.h); every rank takes the same verdict.
  void require_finite_state(const std::string& what, const std::string& fix);
  void fire(void (Callback::*event)(CallbackContext&), StepMetrics* metrics = nullptr);

  config::TrainConfig config_;
  config::ResolvedConfig resolved_;
  std::unique_ptr<runtime::Backend> owned_backend_;        // the one-process constructor's
  std::unique_ptr<runtime::ModelRuntime> owned_runtime_;
  runtime::ModelRuntime* runtime_ = nullptr;
  TrainerOptions options_;
  TrainState state_;
  int64_t seq_length_ = 0;
  std::unique_ptr<ModelHooks> hooks_;
  std::unique_ptr<data::DataLoader> loader_;
  std::unique_ptr<data::DataLoader> valid_loader_;  // null without training.eval_interval
  int64_t eval_batches_ = 0;                        // global batches per validation
  std::unique_ptr<data::Tokenizer> sample_tokenizer_;  // null without training.sample_interval
  std::vector<std::vector<int64_t>> sample_ids_;
  std::shared_ptr<optim::LrScheduler> scheduler_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<Profiler> profiler_;
  std::vector<std::unique_ptr<Callback>> callbacks_;
  std::vector<std::unique_ptr<Callback>> configured_callbacks_;  // `callbacks:`, built first, run after the built-ins
  std::shared_ptr<dist::ProcessGroup> checkpoint_group_;  // own communicator: async saves barrier off-thread
  runtime::PeakFlops peak_;  // per process; MFU divides by it × world_size
  int64_t skipped_updates_ = 0;
};

// True once SIGINT or SIGTERM arrived (the loop stops after the current step).
bool stop_requested();
void request_stop();        // for tests
void clear_stop_request();

}  // namespace loom::train
