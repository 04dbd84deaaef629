// Checkpoints in MindFormers' layout (its checkpoint/checkpoint.py):
//
//   <save_path>/latest_checkpointed_iteration.txt     "<iteration>", written last (tmp + rename)
//   <save_path>/iteration_00000100/
//       <prefix>-model-<rank:07d>-<world:07d>.safetensors
//       <prefix>-opt-<rank:07d>-<world:07d>.safetensors     (unless no_save_optim)
//       common.json     epoch_num, step_num, global_step, loss_scale, global_batch_size,
//                       consumed_samples, ckpt_status, plus "loom": data position, RNG, scheduler
//       metadata.json   multi-process runs: global shape and offset of every shard
//       model_config.json  the model section, for `loom convert --to-hf`
//
// Crash safety: an iteration is written into "iteration_N.partial" and renamed into place only
// when every file is on disk (fsync'd); "latest" is rewritten after that, atomically. A process
// killed at any point leaves "latest" naming a complete iteration. (When iteration N already
// exists it is first renamed to "iteration_N.replaced"; a loader that finds "latest" naming a
// missing N falls back to that complete copy.)
//
// async_save: the state is snapshotted (copied) on the training thread, written by a background
// thread while training continues; the next save waits for the previous one, so at most one
// snapshot is held.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/tensor.h"
#include "loom/dist/process_group.h"
#include "loom/nn/module.h"
#include "loom/runtime/checkpoint_reader.h"

namespace loom::train {

struct CheckpointOptions {
  bool enable_save = true;
  std::string save_path;
  int64_t save_max = 5;
  int64_t save_interleaved_steps = 1000;
  bool no_save_optim = false;
  bool async_save = false;
  std::optional<std::string> prefix = "checkpoint";
  std::string load_path;
  bool no_load_optim = false;
  // Multi-process (dist::prepare_sharded_save / load_resharded): write each shard once; let
  // replicas split the reading.
  bool remove_redundancy = false;
  bool load_balanced = false;
};

struct CheckpointContents {
  int64_t iteration = 0;  // = global_step
  int64_t epoch_num = 0;
  int64_t step_num = 0;   // training.steps (max steps), as the reference records it
  int64_t global_batch_size = 1;
  int64_t consumed_samples = 0;
  double loss_scale = 1.0;
  std::map<std::string, Tensor> model;
  std::map<std::string, Tensor> optimizer;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // stored under common.json "loom"
  nlohmann::ordered_json metadata;  // metadata.json content (null ⇒ not written)
  // The model section (written as model_config.json so `loom convert --to-hf` needs no --config).
  nlohmann::ordered_json model_config;
};

// Sharded checkpoint contents of this rank: what its files hold (its pieces of every tensor,
// placed by the parameters' placements) and, on rank 0 of a multi-process run, metadata.json.
void shard_checkpoint_contents(CheckpointContents& contents, nn::Module& module, dist::ProcessGroup& world,
                               const std::optional<std::string>& prefix, bool remove_redundancy);

class CheckpointManager {
 public:
  // `barrier` synchronises all ranks (no-op on one process).
  CheckpointManager(CheckpointOptions options, int rank, int world_size,
                    std::function<void()> barrier = {});
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  const CheckpointOptions& options() const { return options_; }
  bool should_save(int64_t global_step) const;
  int64_t last_saved_iteration() const { return last_saved_; }

  // Saves (or, with async_save, snapshots and queues) `contents`.
  void save(CheckpointContents contents);
  // Blocks until a pending asynchronous save is on disk; rethrows its error.
  void wait();
  // With async_save: allocates and touches the snapshot buffers once (they stay in the caching
  // allocator), so the first save's snapshot costs a copy, not a few hundred thousand page faults.
  void prepare_async(const CheckpointContents& like);

  // Reads the checkpoint at load_path (this rank's files). HF folders are read by `load_hf`
  // (given by the caller, which knows the model's naming) and need load_optimizer == false.
  runtime::LoadedCheckpoint load(const std::string& load_path, bool load_optimizer,
                        const std::function<std::map<std::string, Tensor>(const std::string&)>& load_hf = {}) const;

 private:
  void write(const CheckpointContents& c);
  void rotate(int64_t just_saved);

  CheckpointOptions options_;
  int rank_, world_;
  std::function<void()> barrier_;
  std::vector<int64_t> saved_this_run_;
  int64_t last_saved_ = -1;
  std::thread writer_;
  std::exception_ptr writer_error_;
};

}  // namespace loom::train
