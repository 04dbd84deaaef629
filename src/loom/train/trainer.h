// The training loop of the reference trainer (semantics.md §1.2), the same on one process and on
// many: build everything from the configuration, then per step
//
//   schedule   A = num_accumulation_steps micro-batches of forward + backward (schedule.h)
//   grad norm  the global norm over every rank's local grads, and clipping (optim/grad_norm.h)
//   update     the optimizer with lr = lr_schedule(global_step)
//   book-keep  consumed_samples and global_step, metrics, callbacks, checkpoints
//
// The parallel layout is applied once, by dist::parallelize (one process is a mesh of size one),
// so nothing here branches on it. Ctrl-C / SIGTERM end the current step, save, and return.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/config/config.h"
#include "loom/data/data_loader.h"
#include "loom/config/parallel_layout.h"
#include "loom/dist/device_mesh.h"
#include "loom/dist/parallelize.h"
#include "loom/optim/optimizer.h"
#include "loom/train/callbacks.h"
#include "loom/train/checkpoint.h"
#include "loom/train/hardware.h"
#include "loom/train/metrics.h"
#include "loom/train/profiler.h"
#include "loom/train/schedule.h"
#include "loom/train/train_model.h"

namespace loom::train {

// Builds the model the configuration resolved (on the meta device; the trainer applies memory
// policies and materialises it).
using ModelFactory = std::function<std::unique_ptr<TrainModel>(const models::ModelArgs&)>;

struct TrainerOptions {
  std::string run_dir;   // where config, log, metrics and (by default) checkpoints go
  int rank = 0;
  int world_size = 1;
  // The world's process group (dist::Runtime::world()); required when world_size > 1, a
  // one-rank group is made when it is null on one process.
  std::shared_ptr<dist::ProcessGroup> world;
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
};

class Trainer {
 public:
  // `loaded` must be resolved for options.world_size ranks (LoadOptions::world_size): the trainer
  // takes the layout, model, memory and loader options from it and resolves nothing again.
  Trainer(config::LoadedConfig loaded, const ModelFactory& model_factory, TrainerOptions options);
  ~Trainer();

  TrainSummary train();

  // For callbacks and tests.
  const config::TrainConfig& config() const { return config_; }
  const config::ResolvedConfig& resolved() const { return resolved_; }
  TrainState& state() { return state_; }
  TrainModel& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  data::DataLoader& data_loader() { return *loader_; }
  CheckpointManager& checkpoints() { return *checkpoints_; }
  MetricsWriter& metrics_writer() { return *metrics_; }
  const TrainerOptions& options() const { return options_; }
  int64_t seq_length() const { return seq_length_; }
  // Saves a checkpoint of the current state now (the checkpoint callback and Ctrl-C use it).
  void save_checkpoint();
  // The device mesh (size one on one process) and the parallelized model.
  dist::DeviceMesh& mesh() { return *mesh_; }
  dist::ParallelModel& parallel_model() { return *parallel_; }

 private:
  // build() runs these in order; each reads what the ones before it made.
  void build();
  void prepare_run_directory();
  void build_mesh(const config::ParallelLayout& layout);
  void build_model();
  void build_data(const config::ParallelLayout& layout);
  void build_optimizer();
  void build_checkpointing();
  void build_monitoring();
  void resume(const std::string& load_path);
  void load_sharded(const std::string& dir, bool load_optim);
  // One optimizer step; returns the tokens it trained on over every data-parallel rank.
  int64_t train_step(StepMetrics& m);
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
  ModelFactory model_factory_;
  TrainerOptions options_;
  TrainState state_;
  int64_t seq_length_ = 0;
  std::unique_ptr<TrainModel> model_;
  std::unique_ptr<data::DataLoader> loader_;
  std::shared_ptr<optim::LrScheduler> scheduler_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<Profiler> profiler_;
  std::vector<std::unique_ptr<Callback>> callbacks_;
  std::vector<std::unique_ptr<Callback>> configured_callbacks_;  // `callbacks:`, built first, run after the built-ins
  std::shared_ptr<void> memory_state_;  // keeps swap machinery alive
  std::shared_ptr<dist::DeviceMesh> mesh_;
  std::unique_ptr<dist::ParallelModel> parallel_;
  std::unique_ptr<Schedule> schedule_;
  std::shared_ptr<dist::ProcessGroup> checkpoint_group_;  // own communicator: async saves barrier off-thread
  PeakFlops peak_;  // per process; MFU divides by it × world_size
  int64_t skipped_updates_ = 0;
};

// True once SIGINT or SIGTERM arrived (the loop stops after the current step).
bool stop_requested();
void request_stop();        // for tests
void clear_stop_request();

}  // namespace loom::train
