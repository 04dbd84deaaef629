// Training columns of one sample (Megatron's `__getitem__`, `_get_ltor_masks_and_position_ids`,
// `_get_eod_attention_mask`), checked against hand-computed values.
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/data/sample_builder.h"

using namespace loom::data;

namespace {

struct Columns {
  explicit Columns(int64_t S, int64_t K = 0, bool mask = false)
      : input(S), labels(S), loss(S), pos(S), attention(mask ? S * S : 0), ends(K) {}
  SampleColumns spans() {
    return {input, labels, loss, pos, attention, ends};
  }
  std::vector<int32_t> input, labels;
  std::vector<float> loss;
  std::vector<int32_t> pos;
  std::vector<uint8_t> attention;
  std::vector<int32_t> ends;
};

SampleOptions eod_options(int64_t S) {
  SampleOptions o;
  o.sequence_length = S;
  o.eod = 2;
  o.pad = -1;
  o.create_attention_mask = false;
  return o;
}

// Two EODs (positions 2 and 6) in an 8-token window: text = inputs + one extra label token.
const std::vector<int64_t> kText = {5, 6, 2, 7, 8, 9, 2, 4, 3};

}  // namespace

TEST(SampleBuilder, LabelShiftWithoutResets) {
  Columns c(8);
  build_sample(kText, eod_options(8), false, c.spans());
  EXPECT_EQ(c.input, (std::vector<int32_t>{5, 6, 2, 7, 8, 9, 2, 4}));
  EXPECT_EQ(c.labels, (std::vector<int32_t>{6, 2, 7, 8, 9, 2, 4, 3}));
  EXPECT_EQ(c.pos, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(c.loss, std::vector<float>(8, 1.0f));
}

// reset_position_ids: positions restart after each EOD (pos[i+1:] -= i+1-prev).
TEST(SampleBuilder, ResetPositionIdsAfterEachEod) {
  SampleOptions o = eod_options(8);
  o.reset_position_ids = true;
  Columns c(8);
  build_sample(kText, o, false, c.spans());
  EXPECT_EQ(c.pos, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 0}));
}

// eod_mask_loss masks the positions whose input is EOD.
TEST(SampleBuilder, EodMaskLoss) {
  SampleOptions o = eod_options(8);
  o.eod_mask_loss = true;
  Columns c(8);
  build_sample(kText, o, false, c.spans());
  EXPECT_EQ(c.loss, (std::vector<float>{1, 1, 0, 1, 1, 1, 0, 1}));
}

// reset_attention_mask: mask[0, i+1:, :i+1] = 0 for every EOD i; output 1 = masked out.
TEST(SampleBuilder, ResetAttentionMaskIsBlockDiagonalCausal) {
  SampleOptions o = eod_options(8);
  o.create_attention_mask = true;
  o.reset_attention_mask = true;
  Columns c(8, 0, true);
  build_sample(kText, o, false, c.spans());
  const int first_visible[8] = {0, 0, 0, 3, 3, 3, 3, 7};
  for (int q = 0; q < 8; ++q) {
    for (int k = 0; k < 8; ++k) {
      const int expected = (k <= q && k >= first_visible[q]) ? 0 : 1;
      EXPECT_EQ(c.attention[q * 8 + k], expected) << "q " << q << " k " << k;
    }
  }
  // Without the reset the mask is plain causal.
  o.reset_attention_mask = false;
  build_sample(kText, o, false, c.spans());
  for (int q = 0; q < 8; ++q) {
    for (int k = 0; k < 8; ++k) EXPECT_EQ(c.attention[q * 8 + k], k <= q ? 0 : 1);
  }
}

// Compressed EOD mask: EOD positions + 1, padded with S.
TEST(SampleBuilder, DocumentEndsPaddedWithSequenceLength) {
  SampleOptions o = eod_options(8);
  o.create_compressed_eod_mask = true;
  o.eod_pad_length = 4;
  Columns c(8, 4);
  build_sample(kText, o, false, c.spans());
  EXPECT_EQ(c.ends, (std::vector<int32_t>{3, 7, 8, 8}));
  // A final EOD at S-1 is not a boundary (the window ends there anyway).
  SampleOptions o5 = eod_options(5);
  o5.create_compressed_eod_mask = true;
  Columns d(5, 3);
  build_sample(std::vector<int64_t>{5, 2, 6, 7, 2, 9}, o5, false, d.spans());
  EXPECT_EQ(d.ends, (std::vector<int32_t>{2, 5, 5}));
}

// Every document needs an entry, the last one S, so the attention op sees the whole window.
TEST(SampleBuilder, TooManyDocumentsForEodPadLength) {
  SampleOptions o = eod_options(8);
  o.create_compressed_eod_mask = true;
  Columns c(8, 2);  // two EODs make three documents
  try {
    build_sample(kText, o, false, c.spans());
    FAIL() << "expected DataError";
  } catch (const loom::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("packs 3 documents (2 EOD tokens before its last position), more than "
                                     "train_dataset.dataloader.config.eod_pad_length = 2"),
              std::string::npos)
        << e.what();
  }
}

// Pad tokens: loss masked where the label is pad; pad ids become 0 in inputs and labels.
TEST(SampleBuilder, PadTokensAreMaskedAndZeroed) {
  SampleOptions o = eod_options(4);
  Columns c(4);
  build_sample(std::vector<int64_t>{5, 6, -1, -1, -1}, o, false, c.spans());
  EXPECT_EQ(c.input, (std::vector<int32_t>{5, 6, 0, 0}));
  EXPECT_EQ(c.labels, (std::vector<int32_t>{6, 0, 0, 0}));
  EXPECT_EQ(c.loss, (std::vector<float>{1, 0, 0, 0}));
  // A batch-filler sample has no loss at all.
  build_sample(std::vector<int64_t>{5, 6, 7, 8, 9}, o, true, c.spans());
  EXPECT_EQ(c.loss, std::vector<float>(4, 0.0f));
}

// add_extra_token_to_sequence = False: labels = roll(text, -1) with the last label = pad.
TEST(SampleBuilder, WithoutExtraTokenTheLastLabelIsPad) {
  SampleOptions o = eod_options(4);
  o.add_extra_token_to_sequence = false;
  Columns c(4);
  build_sample(std::vector<int64_t>{5, 6, 7, 8}, o, false, c.spans());
  EXPECT_EQ(c.input, (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_EQ(c.labels, (std::vector<int32_t>{6, 7, 8, 0}));
  EXPECT_EQ(c.loss, (std::vector<float>{1, 1, 1, 0}));
}
