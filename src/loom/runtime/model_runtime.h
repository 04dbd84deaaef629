// A resolved configuration turned into a model on a device that can run forward, in the layout
// the configuration names. Train, eval and generate all start here:
//
//   mesh         the layout's groups over the backend's world (one process: a mesh of size one)
//   model        the registry's nn::CausalLM for the model section, built on the meta device
//   parallelize  the strategies in their order (dist::parallelize: TP/SP → CP → EP → PP →
//                recompute/swap → FSDP), with the options the configuration gives them
//                (parallel_options.h) and its memory policy
//   weights      initialize(seed): every parameter's one-process value, whatever the layout; or
//                load_weights(path): a Hugging Face folder, or a Loom checkpoint saved under any
//                layout
//   schedule     plain, or the pipeline executor when pp > 1; it runs a step's micro-batches in
//                train or eval mode (schedule.h)
//
// A planning runtime (for_planning) builds the model on meta over a planning mesh of one rank
// and applies only the strategies that decide where parameters live: `loom plan` reads a rank's
// parameters off it, in the same order as a run, without allocating.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/config/resolved_config.h"
#include "loom/config/sections.h"
#include "loom/dist/device_mesh.h"
#include "loom/dist/parallelize.h"
#include "loom/runtime/backend.h"
#include "loom/runtime/causal_lm_model.h"
#include "loom/runtime/schedule.h"

namespace loom::runtime {

// Where loaded weights came from.
struct LoadedWeights {
  std::string dir;     // the HF folder or the checkpoint's iteration folder
  bool is_hf = false;
};

class ModelRuntime {
 public:
  // Builds and parallelizes the model of `resolved` (which must be resolved for
  // backend.world_size() ranks) on `backend`; its weights are not set yet.
  ModelRuntime(const config::TrainConfig& config, const config::ResolvedConfig& resolved, Backend& backend);
  // The model of `args` whole on this process (generation, conversion): no strategy, a plain
  // schedule of one micro-batch.
  ModelRuntime(const models::ModelArgs& args, Backend& backend);
  // The parameter placement of one rank of `mesh`'s layout (see above); no backend, no schedule.
  static std::unique_ptr<ModelRuntime> for_planning(const config::TrainConfig& config,
                                                    const config::ResolvedConfig& resolved,
                                                    std::shared_ptr<dist::DeviceMesh> mesh);
  ~ModelRuntime();
  ModelRuntime(const ModelRuntime&) = delete;
  ModelRuntime& operator=(const ModelRuntime&) = delete;

  Backend& backend();
  dist::DeviceMesh& mesh() { return *mesh_; }
  const std::shared_ptr<dist::DeviceMesh>& mesh_ptr() const { return mesh_; }
  dist::ParallelModel& parallel() { return *parallel_; }
  LanguageModel& model() { return *model_; }
  nn::Module& module() { return model_->module(); }
  nn::CausalLM& causal_lm() { return model_->causal_lm(); }
  const models::ModelArgs& model_args() const { return model_->args(); }
  // The step's micro-batches (num_accumulation_steps) and the schedule that runs them.
  int64_t micro_batches() const { return micro_batches_; }
  Schedule& schedule();

  // Every parameter's local piece with its one-process initial value (Philox by global index).
  void initialize(uint64_t seed);
  // The weights of a Hugging Face folder (config.json + safetensors), or of a Loom checkpoint (a
  // save directory, meaning its latest iteration, or one iteration_* folder) saved under any
  // layout, into this layout. `field` names the option or flag the path came from in errors.
  LoadedWeights load_weights(const std::string& path, const std::string& field = "checkpoint.load_path");
  // Whole tensors with Loom names (an HF folder read by the model) into the local pieces.
  void load_full_state_dict(const std::map<std::string, Tensor>& state, const std::string& source);

 private:
  ModelRuntime() = default;
  void build_model(const config::ResolvedConfig& resolved, dist::ParallelizeOptions options);

  Backend* backend_ = nullptr;
  std::shared_ptr<dist::DeviceMesh> mesh_;
  std::unique_ptr<CausalLMModel> model_;
  std::unique_ptr<dist::ParallelModel> parallel_;
  std::shared_ptr<void> memory_state_;  // keeps the swap machinery alive
  std::unique_ptr<Schedule> schedule_;
  int64_t micro_batches_ = 1;
  bool load_balanced_ = false;  // checkpoint.load_balanced: replicas split the reading
};

}  // namespace loom::runtime
