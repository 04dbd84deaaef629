// The optimizer base: per-parameter state with fp32 master weights, the step counter, the
// learning-rate source and checkpoint state. AdamW and Muon implement apply_update().
//
// Master weights (spec training_hyperparameters.md §1): every bf16/f16 parameter gets an fp32
// master copy (`main_param.<name>`); fp32 parameters are updated in place. Updates run on the
// masters and are copied back to the model parameters with round-to-nearest-even.
// Persistent state lives in flat per-role fp32 buffers (masters, adam_m, adam_v, muon_m); the
// per-parameter tensors are views into them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/allocator.h"
#include "loom/kernels/kernel_types.h"
#include "loom/optim/lr_scheduler.h"
#include "loom/optim/named_param.h"
#include "loom/optim/qk_clip.h"

namespace loom::optim {

enum class UpdateRule : uint8_t { adamw, muon };

struct ParamState {
  std::string name;
  Tensor param;        // the model's tensor: float32, bfloat16 or float16
  Tensor master;       // fp32; the param itself when it is fp32
  double weight_decay = 0.0;
  UpdateRule rule = UpdateRule::adamw;
  Tensor exp_avg;      // adam_m (adamw rule)
  Tensor exp_avg_sq;   // adam_v (adamw rule)
  Tensor momentum;     // muon_m (muon rule)
  bool has_own_master() const { return param.dtype() != DType::f32; }
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual std::string type() const = 0;

  // One update with lr = schedule(global_step) (the value before the increment, so the first
  // update uses lr(0)); increments global_step; returns the lr used.
  //
  // Non-finite guard: the update is computed first without writing anything persistent
  // (prepare_update), this rank's verdict is agreed over every rank (set_finite_agreement), and
  // the update is written only when no rank would store inf or nan in a parameter, master or
  // moment. Otherwise nothing changes, bit for bit, and last_skip() names what would have
  // overflowed. global_step advances either way: a skipped update is still a step of the
  // learning-rate schedule and of the bias corrections, like a step the trainer's health check
  // skips, so every rank and every resume count steps the same way.
  double step();
  // Same with an explicit learning rate (custom loops, tests).
  double step_with_lr(double lr);
  // "" when the last step wrote its update; else the agreed description of what would have
  // become inf or nan ("'<name>' (rank r)", or "a tensor of rank r" on the other ranks).
  const std::string& last_skip() const { return last_skip_; }

  // Agrees this rank's verdict (`local`: the first parameter whose update would not be finite,
  // or "") with every rank holding a part of the model, and returns the common one ("" when all
  // are finite). Collective: every rank calls it once per step. The default, one process,
  // returns `local` quoted.
  using FiniteAgreement = std::function<std::string(const std::string& local)>;
  void set_finite_agreement(FiniteAgreement agree) { agree_ = std::move(agree); }

  // Runs at the start of every step(), before the update is computed: what the optimizer needs
  // from outside for this update (the trainer hands QK-clip the step's gathered maxima).
  using PreStepHook = std::function<void(Optimizer&)>;
  void set_pre_step_hook(PreStepHook hook) { pre_step_ = std::move(hook); }

  // Without a scheduler the constant `learning_rate` of the optimizer options is used.
  void set_lr_scheduler(std::shared_ptr<const LrScheduler> scheduler);
  const std::shared_ptr<const LrScheduler>& lr_scheduler() const { return scheduler_; }
  double lr_at(int64_t step) const;

  int64_t global_step() const { return global_step_; }
  void set_global_step(int64_t step);

  const std::vector<ParamState>& param_states() const { return params_; }
  // The optimised parameters (for clip_grad_norm and zeroing grads).
  NamedParams named_params() const;
  // Fills every defined grad with zeros (keeps the main-grad buffers).
  void zero_grad();

  // Checkpoint state: main_param.<p> (bf16/f16 params only), adam_m.<p>, adam_v.<p>, muon_m.<p>
  // and global_step (int64, 0-d). The tensors are views of the live state.
  std::map<std::string, Tensor> state_dict() const;
  // Copies every entry of state_dict() from `state` (CheckpointError naming the entry when one
  // is missing or mis-shaped), then refreshes the model parameters from the loaded masters.
  // Unknown entries are warned about and ignored.
  void load_state_dict(const std::map<std::string, Tensor>& state);
  // Masters <- model params (the reference's path when a checkpoint is loaded without optimizer
  // state, `no_load_optim`).
  void refresh_masters_from_params();
  // Moves the persistent state (fp32 masters of bf16/f16 params, adam_m/v, muon_m) into `pool`,
  // values kept (FSDP cpu_offload puts it in loom::host_pool()). Views handed out earlier by
  // state_dict() keep the old buffers.
  void relocate_state(CachingAllocator& pool);
  // Bytes of that state.
  int64_t state_bytes() const;

  // QK-clip (Muon): whether the optimizer wants each step's per-head max attention logits, and
  // their hand-over before step(). Optimizers without it ignore them.
  virtual bool uses_qk_clip() const { return false; }
  virtual void set_qk_clip_inputs(std::vector<QkClipLayer> /*layers*/) {}

 protected:
  explicit Optimizer(double learning_rate) : learning_rate_(learning_rate) {}

  // Registers a parameter (checks its dtype); state is allocated by allocate_state().
  void add_param(const NamedParam& p, double weight_decay, UpdateRule rule);
  void allocate_state();
  // The update of every parameter with a grad, at `lr` with t = global_step after increment,
  // in two halves: prepare_update computes it without touching parameters, masters or moments
  // and returns the first parameter whose update would store inf or nan ("" when none), keeping
  // whatever apply_update needs; apply_update then writes it, or discard_update drops it.
  virtual std::string prepare_update(double lr, int64_t t) = 0;
  virtual void apply_update(double lr, int64_t t) = 0;
  virtual void discard_update() {}

  // AdamW on one parameter: whether its update is finite (reads only), and the fused write
  // (including the master -> param copy).
  bool adamw_step_is_finite(const ParamState& s, const Tensor& grad, double lr, double beta1,
                            double beta2, double eps, int64_t t) const;
  void adamw_step(ParamState& s, const Tensor& grad, double lr, double beta1, double beta2,
                  double eps, int64_t t);
  // The fp32 contiguous grad of a parameter, or an undefined tensor when it has none.
  static Tensor fp32_grad(const ParamState& s);
  static void copy_master_to_param(const ParamState& s);

  std::vector<ParamState> params_;

 private:
  std::shared_ptr<const LrScheduler> scheduler_;
  double learning_rate_;
  int64_t global_step_ = 0;
  FiniteAgreement agree_;
  PreStepHook pre_step_;
  std::string last_skip_;
  Tensor flat_masters_, flat_exp_avg_, flat_exp_avg_sq_, flat_momentum_;
};

// Trainable parameters only (requires_grad); `*max_logits_val*` buffers are never optimised.
NamedParams trainable_params(const NamedParams& params);

// The fused AdamW kernel's per-step scalars, computed once in double from the hyper-parameters
// and rounded to fp32 (the reference's operation order); t = the optimizer step after the
// increment (1 on the first update).
kernels::AdamWScalars adamw_scalars(double lr, double weight_decay, double beta1, double beta2,
                                    double eps, int64_t t);

}  // namespace loom::optim
