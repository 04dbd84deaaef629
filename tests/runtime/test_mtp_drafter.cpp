// MtpDrafter (loom/runtime/mtp_drafter.h): the drafts its cached MTP stream gives after each step
// are the MTP heads' greedy tokens of a full forward without any cache (the depths run as
// CausalLM::head runs them in training: depth k embeds the tokens k positions ahead and reads
// depth k-1's states), whatever the main model accepted at the steps before, with one and two
// MTP depths and left-padded rows.
#include <gtest/gtest.h>

#include "../models/model_test_util.h"
#include "loom/autograd/checkpoint.h"
#include "loom/models/registry.h"
#include "loom/ops/shape.h"
#include "loom/runtime/mtp_drafter.h"
#include "loom/runtime/sampling.h"

namespace loom::runtime {
namespace {

using loom::testing::Json;

std::shared_ptr<nn::CausalLM> deepseek_with_mtp(int64_t depth) {
  Json section = loom::testing::tiny_deepseek_v3();
  section["num_nextn_predict_layers"] = depth;
  section["max_position_embeddings"] = 64;
  models::BuiltModel b = models::build_model(section);
  b.model->materialize(33);
  return b.model;
}

// Main hidden states [1, N-1, D] of seq's first N-1 tokens, no cache.
Tensor main_hidden(nn::CausalLM& m, const std::vector<int64_t>& seq) {
  const std::vector<int64_t> head(seq.begin(), seq.end() - 1);
  return m.decoder().forward(m.embed(Tensor::from_vector(head, {1, static_cast<int64_t>(head.size())})), Tensor(),
                             Tensor());
}

// The D drafts after `seq` from a full forward: depth k over positions 0..N-2 embeds t_{i+k}
// (the drafts of the depths before it past the sequence's end) and the last position's argmax
// of its head is its draft.
std::vector<int64_t> reference_drafts(nn::CausalLM& m, const std::vector<int64_t>& seq) {
  const int64_t n = static_cast<int64_t>(seq.size()) - 1;
  std::vector<int64_t> ext = seq;
  Tensor h = main_hidden(m, seq);
  std::vector<int64_t> drafts;
  for (size_t k = 1; k <= m.mtp_layers().size(); ++k) {
    const std::vector<int64_t> ids(ext.begin() + static_cast<std::ptrdiff_t>(k),
                                   ext.begin() + static_cast<std::ptrdiff_t>(k) + n);
    h = m.mtp_layers()[k - 1]->forward(h, m.embed(Tensor::from_vector(ids, {1, n})), Tensor(), Tensor());
    const std::vector<float> logits = m.mtp_head_logits(k - 1, ops::narrow(h, 1, n - 1, 1)).contiguous().to_float_vector();
    drafts.push_back(sample_token(logits.data(), static_cast<int64_t>(logits.size()), {}, 0, 0));
    ext.push_back(drafts.back());
  }
  return drafts;
}

// Rows [B, n, D] of each row's main hidden states at cache positions [first, first + n), zeros
// on padding (masked off).
Tensor committed_rows(nn::CausalLM& m, const std::vector<std::vector<int64_t>>& rows, const std::vector<int64_t>& pad,
                      int64_t first, int64_t n) {
  const int64_t B = static_cast<int64_t>(rows.size()), D = m.config().hidden_size;
  Tensor out = Tensor::zeros({B, n, D}, DType::f32);
  for (int64_t r = 0; r < B; ++r) {
    const Tensor h = main_hidden(m, rows[static_cast<size_t>(r)]);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = first + i - pad[static_cast<size_t>(r)];
      if (at >= 0) out.narrow(0, r, 1).narrow(1, i, 1).copy_(h.narrow(1, at, 1));
    }
  }
  return out;
}

TEST(MtpDrafter, DraftsAreTheMtpHeadsOfAFullForwardWhateverWasAccepted) {
  for (int64_t depth : {1, 2}) {
    auto m = deepseek_with_mtp(depth);
    autograd::EvaluationGuard evaluating;
    std::vector<std::vector<int64_t>> rows = {{3, 7, 1, 9, 4}, {11, 2, 6}};
    const std::vector<int64_t> pad = {0, 2};
    MtpDrafter drafter(*m, 64, pad);
    EXPECT_EQ(drafter.depth(), depth);
    // The main model's first token: any token serves, the drafter reads what it is given.
    for (auto& row : rows) row.push_back(5);
    std::vector<std::vector<int64_t>> seq = {{3, 7, 1, 9, 4, 5}, {11, 11, 11, 2, 6, 5}};
    Tensor committed = committed_rows(*m, rows, pad, 0, 5);
    // Drafts kept at each step: none, all (and the token after), some, none again, all.
    const int64_t accepted[] = {0, depth, depth - 1, 0, depth, 1, 0};
    for (int64_t kept : accepted) {
      m->attach_cache(nullptr, &drafter.cache());  // the MTP layers on the drafter's cache only
      const std::vector<std::vector<int64_t>> drafts = drafter.draft(committed, seq);
      m->attach_cache(nullptr);
      for (size_t r = 0; r < rows.size(); ++r)
        EXPECT_EQ(drafts[r], reference_drafts(*m, rows[r])) << "depth " << depth << " row " << r << " at "
                                                            << rows[r].size();
      kept = std::min(kept, depth);
      const int64_t N = static_cast<int64_t>(seq[0].size());
      for (size_t r = 0; r < rows.size(); ++r) {
        std::vector<int64_t> next(drafts[r].begin(), drafts[r].begin() + kept);
        // The main model's token after the kept drafts: another than the next draft, as a
        // rejection gives.
        next.push_back(kept < depth ? (drafts[r][static_cast<size_t>(kept)] + 1) % 24 : 8 + static_cast<int64_t>(r));
        rows[r].insert(rows[r].end(), next.begin(), next.end());
        seq[r].insert(seq[r].end(), next.begin(), next.end());
      }
      committed = committed_rows(*m, rows, pad, N - 1, kept + 1);
    }
    EXPECT_GT(drafter.cache().bytes(), 0);
  }
}

TEST(MtpDrafter, AModelWithoutMtpLayersCannotDraft) {
  models::BuiltModel b = models::build_model(loom::testing::tiny_qwen3());
  try {
    MtpDrafter drafter(*b.model, 8, {0});
    FAIL() << "a Qwen3 has no MTP layers";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no MTP layers (model.mtp_num_layers / num_nextn_predict_layers is 0)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom::runtime
