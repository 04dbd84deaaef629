#include "loom/kernels/cpu/cpu_table.h"

#include "loom/kernels/cpu/attention.h"
#include "loom/kernels/cpu/attention_decode.h"
#include "loom/kernels/cpu/cross_entropy.h"
#include "loom/kernels/cpu/elementwise.h"
#include "loom/kernels/cpu/gemm.h"
#include "loom/kernels/cpu/index.h"
#include "loom/kernels/cpu/moe.h"
#include "loom/kernels/cpu/newton_schulz.h"
#include "loom/kernels/cpu/norm.h"
#include "loom/kernels/cpu/optimizer.h"
#include "loom/kernels/cpu/reduce.h"
#include "loom/kernels/cpu/rope.h"
#include "loom/kernels/cpu/softmax.h"
#include "loom/kernels/cpu/swiglu.h"

namespace loom::kernels::cpu {

KernelTable kernel_table() {
  KernelTable t{};
  t.binary = &binary;
  t.unary = &unary;
  t.affine = &affine;
  t.add_ = &add_;
  t.scale_ = &scale_;
  t.gelu = &gelu;
  t.gelu_backward = &gelu_backward;
  t.silu_backward = &silu_backward;
  t.sigmoid_backward = &sigmoid_backward;
  t.swiglu = &swiglu;
  t.swiglu_backward = &swiglu_backward;
  t.swiglu_packed = &swiglu_packed;
  t.swiglu_packed_backward = &swiglu_packed_backward;

  t.sum = &sum;
  t.sum_to_shape = &sum_to_shape;
  t.max_value = &max_value;

  t.embedding = &embedding;
  t.embedding_backward = &embedding_backward;
  t.gather = &gather;
  t.scatter = &scatter;
  t.index_add = &index_add;
  t.index_select = &index_select;
  t.topk = &topk;

  t.gemm = &gemm;
  t.matmul_2d = &matmul_2d;
  t.bmm = &bmm;

  t.attention_forward = &attention_forward;
  t.attention_backward = &attention_backward;
  t.attention_merge = &attention_merge;
  t.attention_decode = &decode_attention_forward;

  t.cross_entropy_row_weights = &cross_entropy_row_weights;
  t.cross_entropy_forward = &cross_entropy_forward;
  t.cross_entropy_backward = &cross_entropy_backward;
  t.linear_cross_entropy_forward = &linear_cross_entropy_forward;
  t.linear_cross_entropy_backward = &linear_cross_entropy_backward;

  t.rms_norm = &rms_norm;
  t.rms_norm_backward = &rms_norm_backward;
  t.layer_norm = &layer_norm;
  t.layer_norm_backward = &layer_norm_backward;
  t.rope = &rope;
  t.softmax_last = &softmax_last;
  t.softmax_last_backward = &softmax_last_backward;

  t.moe_routing = &moe_routing;
  t.moe_permute_rows = &moe_permute_rows;
  t.moe_permute_backward = &moe_permute_backward;
  t.moe_unpermute = &moe_unpermute;
  t.moe_unpermute_backward = &moe_unpermute_backward;
  t.grouped_gemm = &grouped_gemm;
  t.grouped_gemm_backward = &grouped_gemm_backward;

  t.sum_squares = &sum_squares;
  t.adamw_update = &adamw_update;
  t.adamw_update_is_finite = &adamw_update_is_finite;
  t.copy_master_to_param = &copy_master_to_param;
  t.muon_momentum = &muon_momentum;
  t.muon_orthogonalize = &muon_orthogonalize;
  t.muon_apply_is_finite = &muon_apply_is_finite;
  t.muon_apply = &muon_apply;
  return t;
}

}  // namespace loom::kernels::cpu
