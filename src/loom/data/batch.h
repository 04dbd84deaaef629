// One micro-batch of local_batch_size samples, as the model consumes it.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/tensor.h"

namespace loom::data {

struct Batch {
  // int32 [B, S]. int32 like MindFormers' columns: every vocabulary fits, and it halves the
  // bytes of int64; ops that want int64 indices convert with .to(DType::i64).
  Tensor input_ids;
  Tensor labels;          // int32 [B, S], the next token of each input (pad positions hold 0)
  Tensor loss_mask;       // float32 [B, S], 1 = position counts in the loss
  Tensor position_ids;    // int32 [B, S], restarting after each EOD with reset_position_ids
  // No dense [S, S] attention mask: the one create_attention_mask asks for is causal (Loom's
  // attention is), or causal within documents, which the document ends below express.
  // Compressed EOD mask, defined when create_compressed_eod_mask is on (K = eod_pad_length), and
  // for the dense mask with reset_attention_mask (K = S):
  //  document_ends   int32 [B, K]: per sample, the ascending exclusive end of each packed
  //                  document (EOD position + 1), a final EOD at S-1 omitted, padded with S.
  //                  This is MindFormers' per-sample `actual_seq_len` (the last entry is always S:
  //                  a sample holds at most K documents); the attention op
  //                  (ops::attention's document mask) consumes it: query q of document [a, b)
  //                  attends to keys k with a <= k <= q.
  //  actual_seq_len  int32 [B, K]: the same ends in MindFormers' batched TND form, row j offset
  //                  by j*S (cumulative over the micro-batch, as its per_batch_map produces).
  Tensor document_ends;
  Tensor actual_seq_len;

  std::vector<int64_t> sample_indices;  // dataset sample of each row (after the epoch shuffle)
  int64_t epoch = 0;
  int64_t batch_size() const { return input_ids.defined() ? input_ids.size(0) : 0; }
};

}  // namespace loom::data
