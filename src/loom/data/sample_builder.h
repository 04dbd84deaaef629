// Turns one token window into the training columns (Megatron's GPTDataset.__getitem__ and
// `_get_ltor_masks_and_position_ids`): the label shift, loss mask, position ids, the optional
// dense attention mask and the compressed EOD mask (`actual_seq_len`).
//
// Every column is computed from the sample itself. MindFormers reuses a cached loss mask when no
// EOD option is on and then zeroes pad positions in place, so one sample's padding leaks into
// every later sample (a QUIRK); Loom never shares a mask between samples.
#pragma once

#include <cstdint>
#include <span>

namespace loom::data {

struct SampleOptions {
  int64_t sequence_length = 0;          // S
  bool add_extra_token_to_sequence = true;
  int64_t eod = -1;
  int64_t pad = -1;
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool eod_mask_loss = false;
  bool create_attention_mask = true;
  bool create_compressed_eod_mask = false;
  int64_t eod_pad_length = 128;         // K, entries of actual_seq_len per sample
  // Without a loss_mask column (train_dataset.dataloader.column_names) the loss counts every
  // position whose input is not pad, as MindFormers' CrossEntropyLoss does when the batch has no
  // loss_mask (loss_mask = input_ids != pad); eod_mask_loss and pad labels then mask nothing.
  bool loss_mask_from_inputs = false;

  // Which optional columns a batch carries. MindFormers returns the compressed mask instead of
  // the dense one when both are requested. The dense [S, S] mask (create_attention_mask alone) is
  // causal, and with reset_attention_mask causal within each document: Loom's attention is
  // causal by itself and takes documents as their ends, so a batch carries that compressed form
  // instead (document ends with room for every document, K = S), never S·S bytes per sample.
  bool dense_mask_requested() const { return create_attention_mask && !create_compressed_eod_mask; }
  bool emits_document_ends() const {
    return create_compressed_eod_mask || (dense_mask_requested() && reset_attention_mask);
  }
  int64_t document_ends_length() const { return create_compressed_eod_mask ? eod_pad_length : sequence_length; }
  int64_t text_length() const { return sequence_length + (add_extra_token_to_sequence ? 1 : 0); }
};

// Output rows of one sample (S entries each unless noted); optional outputs may be empty spans.
struct SampleColumns {
  std::span<int32_t> input_ids;
  std::span<int32_t> labels;
  std::span<float> loss_mask;
  std::span<int32_t> position_ids;
  std::span<uint8_t> attention_mask;  // S*S, 1 = masked out (Megatron/MindFormers convention)
  std::span<int32_t> document_ends;   // K: exclusive ends of the packed documents, padded with S
};

// `text` holds options.text_length() tokens. `is_padding` marks a batch-filler sample whose loss
// mask is all zero (Megatron's idx=None). Throws DataError when a sample packs more documents
// than eod_pad_length allows.
void build_sample(std::span<const int64_t> text, const SampleOptions& options, bool is_padding,
                  const SampleColumns& out);

}  // namespace loom::data
