// The device seam. Layers above kernels (ops, autograd, optim) never call a device's kernels by
// name: they look up the KernelTable of their input's device and call through it,
//
//   const kernels::KernelTable& k = kernels::for_tensor(x, "rms_norm");
//   Tensor y = k.rms_norm(x, weight, eps, compute, rstd);
//
// so a CUDA backend adds kernels/cuda/ and calls register_kernels(DeviceType::cuda, table) at
// start-up, and not a line of ops/ changes. The CPU table (kernels/cpu/cpu_table.cpp) is
// registered by this library itself on first lookup — not by a static initialiser, which the
// linker would drop from a static library when nothing references its object file.
//
// Entries are plain function pointers (one indirect call per kernel, nothing else) with every
// argument explicit: no defaults, so the signature a backend implements is the one ops use.
// Meanings, layouts and dtypes of each kernel are documented once, on the CPU implementation in
// kernels/cpu/<file>.h; a backend must match them (same results up to rounding, and the
// determinism guarantees stated there).
//
// Errors: a device with no table raises DeviceError naming the op and the device. A backend may
// register a partial table while it grows: its null entries are replaced by kernels that raise
// DeviceError naming the kernel and the device, so a missing kernel is an error, never a crash.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/kernels/kernel_types.h"

namespace loom::kernels {

struct KernelTable {
  // ---- Elementwise (cpu/elementwise.h, cpu/swiglu.h) ----
  Tensor (*binary)(BinaryOp op, const Tensor& a, const Tensor& b, const char* name);
  Tensor (*unary)(UnaryOp op, const Tensor& a, const char* name);
  Tensor (*affine)(const Tensor& a, double scale, double shift);
  void (*add_)(Tensor& dst, const Tensor& src, double alpha);
  void (*scale_)(Tensor& dst, double value);
  Tensor (*gelu)(const Tensor& x, bool tanh_approx);
  Tensor (*gelu_backward)(const Tensor& grad, const Tensor& x, bool tanh_approx);
  Tensor (*silu_backward)(const Tensor& grad, const Tensor& x);
  Tensor (*sigmoid_backward)(const Tensor& grad, const Tensor& y);
  Tensor (*swiglu)(const Tensor& gate, const Tensor& up);
  void (*swiglu_backward)(const Tensor& grad, const Tensor& gate, const Tensor& up, Tensor& d_gate,
                          Tensor& d_up);
  Tensor (*swiglu_packed)(const Tensor& h);
  Tensor (*swiglu_packed_backward)(const Tensor& grad, const Tensor& h);

  // ---- Reductions (cpu/reduce.h) ----
  Tensor (*sum)(const Tensor& x, const std::vector<int>& dims, bool keepdim);
  Tensor (*sum_to_shape)(const Tensor& x, const Shape& shape);
  double (*max_value)(const Tensor& x);

  // ---- Gather / scatter (cpu/index.h) ----
  Tensor (*embedding)(const Tensor& ids, const Tensor& weight, const VocabShard* shard);
  Tensor (*embedding_backward)(const Tensor& grad, const Tensor& ids, int64_t num_rows,
                               DType grad_dtype, const VocabShard* shard);
  Tensor (*gather)(const Tensor& x, int dim, const Tensor& index);
  Tensor (*scatter)(const Tensor& x, int dim, const Tensor& index, const Tensor& src,
                    bool accumulate);
  Tensor (*index_add)(const Tensor& x, int dim, const Tensor& index, const Tensor& src);
  Tensor (*index_select)(const Tensor& x, int dim, const Tensor& index);
  void (*topk)(const Tensor& x, int64_t k, Tensor& values, Tensor& indices);

  // ---- Matrix products (cpu/gemm.h) ----
  void (*gemm)(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
               double alpha, double beta);
  Tensor (*matmul_2d)(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                      std::optional<DType> out_dtype);
  void (*bmm)(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
              double alpha, double beta);

  // ---- Attention (cpu/attention.h) ----
  AttentionForwardResult (*attention_forward)(const Tensor& q, const Tensor& k, const Tensor& v,
                                              double scale, const AttentionMask& mask,
                                              bool track_max_logits, const AttentionTiles& tiles);
  AttentionGrads (*attention_backward)(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& out, const Tensor& lse,
                                       double scale, const AttentionMask& mask,
                                       const AttentionTiles& tiles);
  void (*attention_merge)(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse);
  // A few query rows against a KV cache, forward only (cpu/attention_decode.h).
  AttentionForwardResult (*attention_decode)(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                             const AttentionMask& mask);

  // ---- Cross-entropy (cpu/cross_entropy.h) ----
  Tensor (*cross_entropy_row_weights)(const Tensor& labels, const Tensor& loss_mask,
                                      int64_t ignore_index, int64_t vocab, const char* op);
  double (*cross_entropy_forward)(const Tensor& logits, const Tensor& labels,
                                  const Tensor& row_weights, Tensor& lse);
  Tensor (*cross_entropy_backward)(const Tensor& logits, const Tensor& labels,
                                   const Tensor& row_weights, const Tensor& lse, double scale);
  double (*linear_cross_entropy_forward)(const Tensor& hidden, const Tensor& weight,
                                         const Tensor& labels, const Tensor& row_weights,
                                         int64_t chunk_tokens, Tensor& lse, double grad_scale,
                                         Tensor* dhidden, Tensor* dweight, const VocabShard* shard);
  void (*linear_cross_entropy_backward)(const Tensor& hidden, const Tensor& weight,
                                        const Tensor& labels, const Tensor& row_weights,
                                        const Tensor& lse, double scale, int64_t chunk_tokens,
                                        Tensor* dhidden, Tensor* dweight, const VocabShard* shard);

  // ---- Norms, RoPE, softmax (cpu/norm.h, cpu/rope.h, cpu/softmax.h) ----
  Tensor (*rms_norm)(const Tensor& x, const Tensor& weight, double eps, DType compute,
                     Tensor& rstd);
  void (*rms_norm_backward)(const Tensor& grad, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, Tensor* dx, Tensor* dweight);
  Tensor (*layer_norm)(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       DType compute, Tensor& mean, Tensor& rstd);
  void (*layer_norm_backward)(const Tensor& grad, const Tensor& x, const Tensor& weight,
                              const Tensor& mean, const Tensor& rstd, Tensor* dx, Tensor* dweight,
                              Tensor* dbias);
  Tensor (*rope)(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
                 bool interleaved, bool inverse);
  Tensor (*softmax_last)(const Tensor& x, bool log);
  Tensor (*softmax_last_backward)(const Tensor& grad, const Tensor& y, bool log);

  // ---- MoE dispatch (cpu/moe.h) ----
  MoeRouting (*moe_routing)(const Tensor& expert_ids, int64_t num_experts);
  Tensor (*moe_permute_rows)(const Tensor& x, const Tensor& row_map);
  Tensor (*moe_permute_backward)(const Tensor& grad, const Tensor& row_map);
  Tensor (*moe_unpermute)(const Tensor& y, const Tensor& row_map, const Tensor& weights);
  void (*moe_unpermute_backward)(const Tensor& grad, const Tensor& y, const Tensor& row_map,
                                 const Tensor& weights, Tensor* dy, Tensor* dweights);
  Tensor (*grouped_gemm)(const Tensor& x, const Tensor& w, const std::vector<int64_t>& counts,
                         bool trans_w);
  void (*grouped_gemm_backward)(const Tensor& grad, const Tensor& x, const Tensor& w,
                                const std::vector<int64_t>& counts, bool trans_w, Tensor* dx,
                                Tensor* dw);

  // ---- Optimizer updates (cpu/optimizer.h, cpu/newton_schulz.h) ----
  double (*sum_squares)(const Tensor& x);
  void (*adamw_update)(Tensor& master, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                       Tensor* param, const AdamWScalars& scalars);
  bool (*adamw_update_is_finite)(const Tensor& master, const Tensor& grad, const Tensor& exp_avg,
                                 const Tensor& exp_avg_sq, DType param_dtype, const AdamWScalars& scalars);
  void (*copy_master_to_param)(const Tensor& master, Tensor& param);
  bool (*muon_momentum)(const Tensor& momentum, const Tensor& grad, float mu, bool nesterov,
                        Tensor& update);
  void (*muon_orthogonalize)(Tensor& update, const std::vector<MuonPiece>& pieces,
                             const std::vector<NsCoefficients>& schedule, float eps);
  bool (*muon_apply_is_finite)(const Tensor& master, const Tensor& update, float decay, DType param_dtype);
  void (*muon_apply)(Tensor& master, Tensor& momentum, const Tensor& grad, float mu, const Tensor& update,
                     float decay);
};

// The table of `device`'s type; DeviceError naming `op` and the device when none is registered.
const KernelTable& table(const Device& device, const char* op);
// The table of the device `t` lives on (an op's outputs go on its inputs' device).
inline const KernelTable& for_tensor(const Tensor& t, const char* op) {
  return table(t.device(), op);
}

// Installs `kernels` for every device of `type`, replacing any table registered before. Null
// entries become kernels that raise DeviceError (see missing_kernels). Register at start-up,
// before ops run on that device: lookups do not lock.
void register_kernels(DeviceType type, const KernelTable& kernels);
// Forgets the table of `type` (ops on that device raise DeviceError again); cpu cannot be
// unregistered.
void unregister_kernels(DeviceType type);
bool has_kernels(DeviceType type);
// Names of the entries the registered table of `type` left null, in table order.
std::vector<std::string> missing_kernels(DeviceType type);
// Names of every entry of KernelTable, in table order.
std::vector<std::string> kernel_names();

}  // namespace loom::kernels
