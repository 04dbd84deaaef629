// What one rank holds between steps: its parameters, their main grads and the optimizer state,
// exact to the byte, for any layout, in one process.
//
// The parameters are read off the model itself. It is built on the meta device (shapes only)
// and split by the strategies' own code over a planning mesh of the rank (planning_group.h):
// apply_tensor_parallel, apply_expert_parallel and apply_pipeline leave exactly the local
// tensors that rank would hold, by name. FSDP is not applied (its buckets would allocate real
// memory); its sharding is small and fixed, and is counted here the way dist/fsdp_unit.cpp lays
// it out:
//
//   units      every decoder.layers.{i} and mtp.layers.{k} is a unit; the rest of the stage
//              (embedding, final norm, head) is the root unit
//   buckets    one per (unit, parameter dtype, gather dtype, shard group): under bf16/f16 compute
//              the fp32 weights the model multiplies in compute_dtype gather in it (half the
//              bytes); dense parameters shard over "fsdp"
//              (dp_shard·cp ranks), routed experts placed on "ep" over "efsdp"
//   rows       a local tensor of R rows shards along dim 0 in blocks of c = ceil(R / n) rows;
//              shard rank k keeps rows [k·c, min(R, (k+1)·c)); the bucket's flat shard holds
//              Σ c·row_numel elements on every rank (padding included), its fp32 main grad too
//
// So, per rank (FSDP on when the data-parallel ranks dp_replicate·fsdp, or for experts
// dp_replicate·efsdp, are more than one: dist/parallelize.cpp):
//   parameter_bytes  Σ buckets c·row_numel·dtype bytes (FsdpMemory::sharded_param_bytes);
//                    without FSDP Σ local numel·dtype bytes
//   gradient_bytes   the same elements in fp32 (FsdpMemory::sharded_grad_bytes); without FSDP
//                    the fp32 grads of the local tensors
//   optimizer_bytes  Optimizer::state_bytes of the rank's own rows (no padding): AdamW two fp32
//                    moments, Muon one fp32 momentum for the matrices it orthogonalises (AdamW
//                    moments for the rest), plus an fp32 master copy of every non-fp32 parameter
//   fsdp_units       per unit what FSDP allocates while it works on it: the full parameters in
//                    their gather dtype, their fp32 full grads, and the largest bucket's all-gather
//                    receive and reduce-scatter send buffers; the planner (planner.h) places them
//                    at the moments of a step
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/config/resolved_config.h"
#include "loom/config/sections.h"
#include "loom/core/dtype.h"
#include "loom/core/shape.h"

namespace loom::plan {

struct HeldParameter {
  std::string name;   // global name ("decoder.layers.5.mlp.linear_fc1.weight")
  Shape local;        // after tensor, expert and pipeline parallelism (before FSDP)
  DType dtype = DType::f32;
  bool trainable = true;
  bool expert = false;  // placed on "ep": FSDP shards it over "efsdp"
  bool muon = false;    // stepped by Muon's orthogonalised update (else AdamW's)
  // What FSDP all-gathers it in: compute_dtype for an fp32 parameter the model only uses cast
  // (Parameter::multiplied_in_compute_dtype) under bf16/f16 compute, else its own dtype.
  DType gather_dtype = DType::f32;
  std::string unit;     // FSDP unit ("decoder.layers.5", "mtp.layers.0"); "" = the root unit
};

// The parameters world rank `rank` holds under the resolved layout, in model order.
std::vector<HeldParameter> held_parameters(const config::TrainConfig& config, const config::ResolvedConfig& resolved,
                                           int rank);

struct StateBytes {
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  // Parameters of the rank's own FSDP rows, before padding (what the optimizer steps).
  int64_t local_parameter_elements = 0;
  // Bytes of each FSDP bucket's flat shard, by shard group ("fsdp", "efsdp"), per unit: what one
  // all-gather of that unit sends (n-1 times this) - used by the traffic model.
  struct Bucket {
    std::string unit;
    std::string group;  // "fsdp" or "efsdp"
    int group_size = 1;
    DType dtype = DType::f32;
    DType gather_dtype = DType::f32;  // of its all-gather and full buffer (dist/fsdp.h compute_dtype)
    int64_t shard_elements = 0;  // Σ c·row_numel
    int64_t full_elements = 0;   // Σ R·row_numel
    bool trainable = false;
  };
  std::vector<Bucket> buckets;  // empty without FSDP
  struct FsdpUnit {
    std::string unit;                  // "" = the root unit
    int64_t param_bytes = 0;           // full parameters, gather dtype
    int64_t grad_bytes = 0;            // full fp32 grads of the trainable ones
    int64_t gather_buffer_bytes = 0;   // unshard's receive buffer (largest bucket; 0 when n = 1)
    int64_t reduce_buffer_bytes = 0;   // reduce_grads' packed send buffer (largest trainable bucket)
  };
  std::vector<FsdpUnit> fsdp_units;  // in bucket order; empty without FSDP
  bool fsdp = false;
};

// Whether FSDP is applied to this layout (dist/parallelize.cpp): grads are reduced over the
// ranks that train on other data.
bool fsdp_applied(const dist::ParallelDims& dims, bool has_routed_experts_on_ep);

// The bytes of rank `rank` (its shard ranks on "fsdp" and "efsdp" decide its rows) holding
// `params`.
StateBytes state_bytes(const std::vector<HeldParameter>& params, const dist::ParallelDims& dims, int rank);

// reshard_after_forward_policy as dist/fsdp.cpp applies it ('default': always without pipeline
// parallelism, never with it).
bool reshard_after_forward(const config::ParallelismConfig& parallelism, const dist::ParallelDims& dims);

}  // namespace loom::plan
