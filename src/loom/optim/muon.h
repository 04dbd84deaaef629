// Muon (MindFormers' pynative/optimizer/muon.py, after Moonlight's; spec
// training_hyperparameters.md §1.2): momentum (+ Nesterov), bf16 Newton–Schulz orthogonalisation
// per piece of the model's split schema, update scaled by lr·sqrt(max(a, b))·matched_adamw_rms,
// decoupled weight decay, an AdamW fallback for embeddings/output layer/1-D parameters, and QK-clip
// on the MLA up-projections.
//
// Sharded parameters (muon_sharding.h): the 2-D/3-D rule, the split schema and the scales read
// the GLOBAL shape; Newton–Schulz always runs on whole matrices; momentum, the update and QK-clip
// stay on each rank's own shard.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/optim/muon_sharding.h"
#include "loom/optim/muon_split.h"
#include "loom/optim/newton_schulz.h"
#include "loom/optim/optimizer.h"
#include "loom/optim/param_groups.h"
#include "loom/optim/qk_clip.h"

namespace loom::optim {

class OptionProblems;
class OptionReader;

struct MuonOptions {
  double learning_rate = 2e-2;  // used only when no LR scheduler is attached
  double weight_decay = 0.1;
  double matched_adamw_rms = 0.2;
  double momentum = 0.95;
  double eps = 1e-7;            // Frobenius normalisation before Newton–Schulz
  bool nesterov = true;
  int64_t ns_steps = 5;
  NsSchedule ns_schedule = NsSchedule(5, NsCoefficients{3.4445f, -4.7750f, 2.0315f});
  std::array<double, 2> adamw_betas{0.95, 0.95};
  double adamw_eps = 1e-8;
  bool qk_clip_enabled = true;
  double qk_clip_threshold = 100.0;
  // "allgather" | "allgather_deredundency": how a sharded weight's whole update reaches
  // Newton–Schulz (muon_sharding.h); nothing to exchange on one process.
  std::string comm_strategy = "allgather";
  bool use_fused_adamw = false;  // accepted; the fallback AdamW is always the fused kernel
  // Parameters matching these rules (exact, substring or glob) use AdamW instead of Muon.
  std::vector<std::string> adamw_include{"*word_embeddings*", "*output_layer*"};
  std::vector<std::string> weight_decay_include;
  std::vector<std::string> weight_decay_exclude;
  bool swap = false;  // `swap: true` is rejected ("Muon does not support swap.")

  // Reads the `optimizer:` section of type Muon (spec training_hyperparameters.md §1.2): every key
  // and every rule, each problem to the reader at optimizer.<key>. Keys Muon does not take are
  // warned about and ignored. What Muon needs of the model and of the memory sections is checked
  // where those are known (the constructor; config for check-config).
  static MuonOptions read(OptionReader& reader);
  // read() of `section`; ConfigError listing every error.
  static MuonOptions from_json(const nlohmann::ordered_json& section);
  // The value rules (ranges, comm_strategy, a non-empty Newton–Schulz schedule).
  void check(OptionProblems& problems) const;
  // check(); ConfigError listing every error (the constructor runs it).
  void validate() const;
};

// What Muon needs to know about the model (the reference's `model=` argument).
struct MuonModelInfo {
  bool multi_latent_attention = false;
  bool legacy = false;
  MlaDims mla;
  // Split schema; defaults to MuonSplitSchema::standard(mla).
  std::optional<MuonSplitSchema> schema;
};

// Whether a parameter of this global shape is orthogonalised (2-D or 3-D, not matched by
// adamw_include) rather than updated by the AdamW fallback.
bool uses_newton_schulz(const MuonOptions& options, const std::string& name, const Shape& global_shape);

// What the last step spent on Newton–Schulz on this rank (the bench reports it per strategy).
struct MuonStepStats {
  double ns_seconds = 0;   // wall time inside the Newton–Schulz kernel
  int64_t ns_matrices = 0;  // whole matrices orthogonalised (a 3-D parameter counts its batch)
};

class Muon : public Optimizer {
 public:
  // Construction errors of spec §1.2, word for word (ValueError): "Muon does not support swap."
  // (options.swap or `swap`), "Model must be provided for Muon optimizer." (no model),
  // "Muon does not support Legacy Model.", "Current Muon implementation only supports models
  // with Multi-Latent Attention enabled."
  // `model_rules`: the model's own no-decay names/keywords (include/exclude come from options).
  // `sharding`: where each parameter's local tensor sits in the global one; null when every
  // parameter is whole (one process). With it, construction is collective over the ranks.
  Muon(const NamedParams& params, const MuonOptions& options,
       const std::optional<MuonModelInfo>& model, bool swap = false,
       const WeightDecayRules& model_rules = {}, std::shared_ptr<MuonSharding> sharding = nullptr);
  std::string type() const override { return "Muon"; }
  const MuonOptions& options() const { return options_; }
  const std::string& comm_strategy() const { return options_.comm_strategy; }
  UpdateRule rule_of(const std::string& name) const;

  // Per-head max logits of this step, consumed by the next step() (when QK-clip is enabled).
  bool uses_qk_clip() const override { return options_.qk_clip_enabled; }
  void set_qk_clip_inputs(std::vector<QkClipLayer> layers) override { qk_inputs_ = std::move(layers); }
  const QkClipResult& last_qk_clip() const { return last_qk_clip_; }
  const MuonStepStats& last_step_stats() const { return last_stats_; }

 protected:
  std::string prepare_update(double lr, int64_t t) override;
  void apply_update(double lr, int64_t t) override;
  void discard_update() override;

 private:
  // Muon's view of one parameter (index-aligned with params_).
  struct Matrix {
    ShardLayout layout;
    std::vector<MuonBlock> blocks;  // split-schema pieces of each global matrix
    int64_t split = -1;             // index in the sharding's plan when the matrix is split
  };

  // Newton–Schulz of every piece of `u` [batch, rows, cols] (whole matrices), each piece
  // multiplied by `scales[i]` (1 leaves it unscaled).
  void newton_schulz(const Matrix& m, Tensor& u, const std::vector<float>& scales);
  // lr·sqrt(max(a, b))·matched_adamw_rms of each piece.
  std::vector<float> piece_scales(const Matrix& m, double lr) const;
  // Multiplies the local slice of each piece of a split matrix by its scale.
  void scale_local_pieces(const Matrix& m, Tensor& u, const std::vector<float>& scales) const;
  // 1 − lr·wd, the decoupled decay of the parameter's master.
  static float decay_of(const ParamState& s, double lr);
  void apply_qk_clip_to_masters();

  MuonOptions options_;
  MuonCommStrategy strategy_ = MuonCommStrategy::allgather;
  MlaDims mla_;
  MuonSplitSchema schema_;
  std::shared_ptr<MuonSharding> sharding_;
  std::vector<Matrix> matrices_;
  std::vector<size_t> split_params_;  // params_ index of each planned split matrix
  MuonStepStats last_stats_;
  std::vector<Tensor> pending_;  // per parameter: the prepared update O (undefined: none or AdamW)
  std::vector<QkClipLayer> qk_inputs_;
  QkClipResult last_qk_clip_;
};

}  // namespace loom::optim
