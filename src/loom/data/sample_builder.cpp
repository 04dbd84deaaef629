#include "loom/data/sample_builder.h"

#include <algorithm>
#include <vector>

#include "loom/core/error.h"

namespace loom::data {

void build_sample(std::span<const int64_t> text, const SampleOptions& o, bool is_padding,
                  const SampleColumns& out) {
  const int64_t S = o.sequence_length;
  LOOM_CHECK(static_cast<int64_t>(text.size()) == o.text_length(), ValueError, "build_sample: got ",
             text.size(), " tokens, expected ", o.text_length());
  LOOM_CHECK(static_cast<int64_t>(out.input_ids.size()) == S && static_cast<int64_t>(out.labels.size()) == S &&
                 static_cast<int64_t>(out.loss_mask.size()) == S &&
                 static_cast<int64_t>(out.position_ids.size()) == S,
             ValueError, "build_sample: output rows must hold seq_length = ", S, " entries");
  // tokens = text[:-1], labels = text[1:] (x = 1); labels = roll(text, -1) with the last = pad (x = 0).
  auto token = [&](int64_t i) { return text[static_cast<size_t>(i)]; };
  auto label = [&](int64_t i) {
    if (o.add_extra_token_to_sequence) return text[static_cast<size_t>(i + 1)];
    return i + 1 < S ? text[static_cast<size_t>(i + 1)] : o.pad;
  };

  // EOD positions among the inputs, ascending (the reference scans the original tokens).
  std::vector<int64_t> eods;
  for (int64_t i = 0; i < S; ++i) {
    if (token(i) == o.eod) eods.push_back(i);
  }

  for (int64_t i = 0; i < S; ++i) {
    float m = 1.0f;
    if (o.loss_mask_from_inputs) {
      if (token(i) == o.pad) m = 0.0f;
    } else {
      if (o.eod_mask_loss && token(i) == o.eod) m = 0.0f;  // masks the prediction made after an EOD
      if (label(i) == o.pad) m = 0.0f;
    }
    if (is_padding) m = 0.0f;
    out.loss_mask[static_cast<size_t>(i)] = m;
  }

  // position_ids restart after every EOD when reset_position_ids.
  int64_t segment_start = 0;
  size_t next_eod = 0;
  for (int64_t i = 0; i < S; ++i) {
    out.position_ids[static_cast<size_t>(i)] =
        static_cast<int32_t>(o.reset_position_ids ? i - segment_start : i);
    if (next_eod < eods.size() && eods[next_eod] == i) {
      segment_start = i + 1;
      ++next_eod;
    }
  }

  if (!out.attention_mask.empty()) {
    LOOM_CHECK(static_cast<int64_t>(out.attention_mask.size()) == S * S, ValueError,
               "build_sample: attention_mask must hold S*S entries");
    // Row q may see key k when k <= q and, with reset_attention_mask, k lies after the last EOD
    // strictly before q (mask[0, i+1:, :i+1] = 0 for every EOD i).
    int64_t visible_from = 0;
    size_t eod_cursor = 0;
    for (int64_t q = 0; q < S; ++q) {
      if (o.reset_attention_mask) {
        while (eod_cursor < eods.size() && eods[eod_cursor] < q) {
          visible_from = eods[eod_cursor] + 1;
          ++eod_cursor;
        }
      }
      uint8_t* row = out.attention_mask.data() + q * S;
      for (int64_t k = 0; k < S; ++k) row[k] = (k <= q && k >= visible_from) ? 0 : 1;
    }
  }

  if (!out.document_ends.empty()) {
    // _get_eod_attention_mask: EOD positions + 1, without a final EOD at S-1, padded with S.
    std::vector<int64_t> ends;
    for (int64_t e : eods) ends.push_back(e + 1);
    if (S > 0 && token(S - 1) == o.eod && !ends.empty()) ends.pop_back();
    const int64_t k = static_cast<int64_t>(out.document_ends.size());
    // Room for every document's end including the last one (S): MindFormers only rejects more
    // EODs than K, which with exactly K leaves no closing S and the tail document unattended.
    const int64_t documents = static_cast<int64_t>(ends.size()) + 1;
    LOOM_CHECK(documents <= k, DataError, "a sample packs ", documents, " documents (", ends.size(),
               " EOD tokens before its last position), more than train_dataset.dataloader.config."
               "eod_pad_length = ", k, " allows (raise eod_pad_length)");
    for (int64_t i = 0; i < k; ++i) {
      out.document_ends[static_cast<size_t>(i)] =
          static_cast<int32_t>(i < static_cast<int64_t>(ends.size()) ? ends[static_cast<size_t>(i)] : S);
    }
  }

  // Pad ids are not valid embedding rows: the reference maps them to 0 after building the masks.
  for (int64_t i = 0; i < S; ++i) {
    const int64_t t = token(i);
    const int64_t l = label(i);
    out.input_ids[static_cast<size_t>(i)] = static_cast<int32_t>(t == o.pad ? 0 : t);
    out.labels[static_cast<size_t>(i)] = static_cast<int32_t>(l == o.pad ? 0 : l);
  }
}

}  // namespace loom::data
