// The KV cache (loom/nn/kv_cache.h) against the whole-sequence forward, for the four
// architectures: a prompt's prefill and then one position at a time give, at every step, the
// logits the full forward gives at that position (fp32 within 1e-5 relative, bf16 within its
// rounding), prompts of different lengths left-padded in one batch give each prompt's own logits,
// and MLA caches exactly its latent and rope key.
#include <gtest/gtest.h>

#include <cmath>

#include "model_test_util.h"
#include "loom/autograd/checkpoint.h"
#include "loom/models/registry.h"
#include "loom/nn/kv_cache.h"
#include "loom/ops/shape.h"

namespace loom::nn {
namespace {

using loom::testing::Json;

std::shared_ptr<CausalLM> built(Json section, const char* dtype = "float32") {
  section["compute_dtype"] = dtype;
  section["max_position_embeddings"] = 64;
  models::BuiltModel b = models::build_model(section);
  b.model->materialize(11);
  return b.model;
}

std::vector<int64_t> tokens(int64_t n, int64_t salt) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back((i * 7 + salt * 5 + 3) % 24);
  return out;
}

// Logits of position `at` of `ids` (one row) from the whole-sequence forward.
std::vector<double> full_logits(CausalLM& m, const std::vector<int64_t>& ids, int64_t at) {
  const Tensor l = m.logits(Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())}));
  return l.narrow(1, at, 1).contiguous().to_double_vector();
}

// Forward `ids` [B, n] through the cache; the last position's logits [B, V].
std::vector<double> cached_step(CausalLM& m, KVCache& cache, const std::vector<int64_t>& ids, int64_t B) {
  const int64_t n = static_cast<int64_t>(ids.size()) / B;
  const Tensor h = m.decoder().forward(m.embed(Tensor::from_vector(ids, {B, n})), cache.positions(n), Tensor());
  cache.advance(n);
  return m.head_logits(ops::narrow(h, 1, n - 1, 1)).contiguous().to_double_vector();
}

void expect_near_rel(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol * scale) << what << " [" << i << "]";
}

void check_steps(const std::string& name, Json section, const char* dtype, double tol) {
  SCOPED_TRACE(name + " " + dtype);
  auto m = built(section, dtype);
  autograd::EvaluationGuard evaluating;
  std::vector<int64_t> seq = tokens(5, 1);
  KVCache cache(12, {0});
  m->attach_cache(&cache);
  std::vector<double> got = cached_step(*m, cache, seq, 1);
  for (int step = 0; step < 6; ++step) {
    m->attach_cache(nullptr);
    expect_near_rel(got, full_logits(*m, seq, static_cast<int64_t>(seq.size()) - 1), tol,
                    "step " + std::to_string(step));
    m->attach_cache(&cache);
    const int64_t next = (step * 11 + 2) % 24;
    seq.push_back(next);
    got = cached_step(*m, cache, {next}, 1);
  }
  m->attach_cache(nullptr);
}

TEST(KVCache, EveryStepGivesTheFullForwardsLogits) {
  const std::pair<const char*, Json> archs[] = {{"llama", loom::testing::tiny_llama()},
                                                {"qwen3", loom::testing::tiny_qwen3()},
                                                {"qwen3_moe", loom::testing::tiny_qwen3_moe()},
                                                {"deepseek_v3", loom::testing::tiny_deepseek_v3()}};
  for (const auto& [name, section] : archs) {
    check_steps(name, section, "float32", 1e-5);
    check_steps(name, section, "bfloat16", 4e-2);
  }
}

TEST(KVCache, LeftPaddedRowsGiveTheirOwnLogits) {
  for (const Json& section : {loom::testing::tiny_qwen3(), loom::testing::tiny_deepseek_v3()}) {
    auto m = built(section);
    autograd::EvaluationGuard evaluating;
    const std::vector<int64_t> a = tokens(6, 2), b = tokens(3, 3);
    // Row 1 is padded by 3 (with any id: the mask keeps it out).
    std::vector<int64_t> batch = a;
    for (int i = 0; i < 3; ++i) batch.push_back(17);
    batch.insert(batch.end(), b.begin(), b.end());
    KVCache cache(10, {0, 3});
    m->attach_cache(&cache);
    const std::vector<double> first = cached_step(*m, cache, batch, 2);
    const std::vector<double> second = cached_step(*m, cache, {4, 9}, 2);
    m->attach_cache(nullptr);
    const int64_t V = 24;
    expect_near_rel({first.begin(), first.begin() + V}, full_logits(*m, a, 5), 1e-5, "row 0 prefill");
    expect_near_rel({first.begin() + V, first.end()}, full_logits(*m, b, 2), 1e-5, "row 1 prefill");
    std::vector<int64_t> a2 = a, b2 = b;
    a2.push_back(4);
    b2.push_back(9);
    expect_near_rel({second.begin(), second.begin() + V}, full_logits(*m, a2, 6), 1e-5, "row 0 step");
    expect_near_rel({second.begin() + V, second.end()}, full_logits(*m, b2, 3), 1e-5, "row 1 step");
  }
}

// MLA keeps (kv_lora_rank + qk_rope_head_dim) values per position and layer, nothing per head.
TEST(KVCache, MlaCachesItsLatentAndRopeKeyOnly) {
  for (const char* dtype : {"float32", "bfloat16"}) {
    auto m = built(loom::testing::tiny_deepseek_v3(), dtype);
    autograd::EvaluationGuard evaluating;
    KVCache cache(8, {0, 0});
    m->attach_cache(&cache);
    cached_step(*m, cache, tokens(6, 4), 2);
    m->attach_cache(nullptr);
    const int64_t bytes_per_value = std::string(dtype) == "float32" ? 4 : 2;
    // 2 rows × 8 positions × (6 + 2) × 2 decoder layers (the MTP layer does not run).
    EXPECT_EQ(cache.bytes(), 2 * 8 * (6 + 2) * 2 * bytes_per_value) << dtype;
    EXPECT_FALSE(cache.slot(0).values.defined());
  }
  // GQA keeps the KV heads' keys and values: Qwen3 has 1 KV head of 8.
  auto q = built(loom::testing::tiny_qwen3());
  autograd::EvaluationGuard evaluating;
  KVCache cache(8, {0});
  q->attach_cache(&cache);
  cached_step(*q, cache, tokens(4, 5), 1);
  q->attach_cache(nullptr);
  EXPECT_EQ(cache.bytes(), 1 * 8 * 1 * 8 * 2 * 2 * 4);  // rows × positions × heads × dim × (k, v) × layers × fp32
}

TEST(KVCache, CapacityAndPaddingAreChecked) {
  EXPECT_THROW(KVCache(0, {0}), ValueError);
  EXPECT_THROW(KVCache(4, {4}), ValueError);
  KVCache c(4, {1});
  c.advance(3);
  EXPECT_THROW(c.advance(2), ValueError);
  EXPECT_EQ(c.positions(1).to_int_vector(), (std::vector<int64_t>{2}));
  c.truncate(1);
  EXPECT_EQ(c.length(), 1);
}

}  // namespace
}  // namespace loom::nn
