// Reading the checkpoints train/checkpoint.h writes, in MindFormers' layout:
//
//   <save_path>/latest_checkpointed_iteration.txt     "<iteration>", written last
//   <save_path>/iteration_00000100/
//       <prefix>-model-<rank:07d>-<world:07d>.safetensors
//       <prefix>-opt-<rank:07d>-<world:07d>.safetensors     (unless no_save_optim)
//       common.json     epoch_num, step_num, global_step, loss_scale, global_batch_size,
//                       consumed_samples, ckpt_status, plus "loom": data position, RNG, scheduler
//       metadata.json   multi-process runs: global shape and offset of every shard
//
// Every driver reads them (a trainer resumes, an evaluator or generator loads weights), so the
// layout's names and the reading live here, below train/; the writing stays with the trainer.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/core/tensor.h"

namespace loom::runtime {

// File names of one rank's files ("checkpoint-model-0000000-0000001.safetensors").
std::string model_file_name(const std::optional<std::string>& prefix, int rank, int world);
std::string optimizer_file_name(const std::optional<std::string>& prefix, int rank, int world);
std::string iteration_dir_name(int64_t iteration);
// "0000003-0000004": the rank and world part of a file name.
std::string rank_suffix(int rank, int world);
inline constexpr const char* kLatestIterationFile = "latest_checkpointed_iteration.txt";

// What a load path points at: an iteration folder, a save folder (resolved through "latest"),
// or an HF folder (model.safetensors or model.safetensors.index.json). CheckpointError otherwise,
// naming `field` (the option or flag the path came from).
struct ResolvedLoadPath {
  std::string dir;
  bool is_hf = false;
};
ResolvedLoadPath resolve_load_path(const std::string& load_path, const std::string& field = "checkpoint.load_path");

struct LoadedCheckpoint {
  std::string dir;   // iteration folder or HF folder
  bool is_hf = false;
  nlohmann::ordered_json common = nlohmann::ordered_json::object();
  std::map<std::string, Tensor> model;
  std::map<std::string, Tensor> optimizer;  // empty when not loaded
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  int64_t global_step() const;
  int64_t consumed_samples() const;
  int64_t global_batch_size() const;
};

// The folder, common.json and its "loom" extras only (the tensors are read by the caller, e.g.
// resharded by dist::load_resharded); checks that every file metadata.json names exists and,
// with `load_optimizer`, that the checkpoint holds optimizer state at all.
LoadedCheckpoint read_checkpoint_state(const std::string& load_path, bool load_optimizer = false,
                                       const std::string& field = "checkpoint.load_path");

// A JSON file of a checkpoint; CheckpointError naming it when it is unreadable or damaged.
nlohmann::ordered_json read_checkpoint_json(const std::string& path);

}  // namespace loom::runtime
