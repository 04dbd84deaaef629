// Context parallelism against one process (spec parallel_training.md §3, dist/context_parallel.h):
// the ring attention's output and its q/k/v grads equal one attention call over the whole
// sequence (f64: to rounding of the merge; f32: within fp32 rounding), with both splits, with and
// without packed documents, with GQA; the load-balanced split gives every rank the same causal
// work; and one training step of whole models (loss, every grad, the grad norm) matches one
// process at cp = world, cp × fsdp and cp × tp. Run at 2 and 4 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../dist_test_util.h"
#include "parallel_test_util.h"
#include "loom/core/rng.h"
#include "loom/dist/context_parallel.h"
#include "loom/dist/parallelize.h"
#include "loom/dist/runtime.h"
#include "loom/ops/attention.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/reduce.h"
#include "loom/optim/grad_norm.h"

namespace loom::dist {
namespace {

using testing::expect_close;
using testing::local_of;

using testing::Json;

std::shared_ptr<DeviceMesh> mesh_for(int cp, int tp = 1) {
  auto world = Runtime::get()->world();
  ParallelDegrees d;
  d.context_parallel = cp;
  d.tensor_parallel = tp;
  return std::make_shared<DeviceMesh>(world, ParallelDims::infer(world->size(), d));
}

Tensor random(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 2.0 * stream_uniform({seed, 3, 0}, static_cast<int64_t>(i)) - 1.0;
  return Tensor::from_vector(v, shape, DType::f64).to(dtype);
}

// Packed documents: sample 0 holds documents ending at 5, 13 and S; sample 1 ends at 9, a
// document of one token at 10, and tokens past 30 that belong to no document.
Tensor doc_ends_for(int64_t S) {
  return Tensor::from_vector(std::vector<int32_t>{5, 13, static_cast<int32_t>(S), 9, 10, 30}, {2, 3});
}

// Hybrid's groups as apply_context_parallel builds them: rows of 2 adjacent cp ranks, columns.
std::pair<std::shared_ptr<ProcessGroup>, std::shared_ptr<ProcessGroup>> hybrid_groups(const std::shared_ptr<ProcessGroup>& cp) {
  const int r = cp->rank(), c = cp->size(), u = 2;
  std::vector<int> row, column;
  for (int a = 0; a < u; ++a) row.push_back(r / u * u + a);
  for (int b = 0; b < c / u; ++b) column.push_back(b * u + r % u);
  auto row_group = std::shared_ptr<ProcessGroup>(cp->split("cp_ulysses", row));
  return {row_group, std::shared_ptr<ProcessGroup>(cp->split("cp_ring", column))};
}

void check_ring(DType dtype, bool load_balanced, bool packed, double tol,
                ContextParallelMethod method = ContextParallelMethod::ring) {
  auto world = Runtime::get()->world();
  const int c = world->size();
  const int64_t B = 2, S = 32, H = 4, G = 2, D = 8, Dv = 6;
  const Tensor q = random({B, S, H, D}, dtype, 1), k = random({B, S, G, D}, dtype, 2),
               v = random({B, S, G, Dv}, dtype, 3), w = random({B, S, H, Dv}, dtype, 4);
  const Tensor docs = packed ? doc_ends_for(S) : Tensor();
  const double scale = 0.3;

  // One process: the whole sequence, one attention call.
  Tensor q1 = q.clone(), k1 = k.clone(), v1 = v.clone();
  for (Tensor* t : {&q1, &k1, &v1}) t->set_requires_grad(true);
  ops::AttentionOptions opt;
  opt.softmax_scale = scale;
  opt.doc_ends = docs;
  Tensor o1 = ops::attention(q1, k1, v1, opt);
  autograd::backward(ops::sum(ops::mul(o1, w)));

  // The ring over every rank: each holds its tokens.
  const SequenceSplit split{c, load_balanced};
  const int r = world->rank();
  auto cp = mesh_for(c)->group_ptr("cp");
  Tensor qc = split.local(q, r, docs), kc = split.local(k, r, docs), vc = split.local(v, r, docs);
  for (Tensor* t : {&qc, &kc, &vc}) t->set_requires_grad(true);
  Tensor oc;
  if (method == ContextParallelMethod::ulysses) {
    oc = ulysses_attention(qc, kc, vc, docs, scale, split, cp);
  } else if (method == ContextParallelMethod::hybrid) {
    auto [row, column] = hybrid_groups(cp);
    oc = hybrid_attention(qc, kc, vc, docs, scale, split, row, column);
  } else {
    oc = ring_attention(qc, kc, vc, docs, scale, split, cp);
  }
  autograd::backward(ops::sum(ops::mul(oc, split.local(w, r, docs))));

  expect_close(oc, split.local(o1.detach(), r, docs), tol, "output");
  expect_close(qc.grad(), split.local(q1.grad(), r, docs), tol, "dq");
  expect_close(kc.grad(), split.local(k1.grad(), r, docs), tol, "dk");
  expect_close(vc.grad(), split.local(v1.grad(), r, docs), tol, "dv");
}

TEST(ContextParallelMpi, RingAttentionMatchesOneAttentionCall) {
  if (Runtime::get()->world_size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  for (bool balanced : {true, false})
    for (bool packed : {false, true}) {
      SCOPED_TRACE(std::string(balanced ? "load-balanced" : "contiguous") + (packed ? ", packed" : ""));
      check_ring(DType::f64, balanced, packed, 1e-12);
      check_ring(DType::f32, balanced, packed, 2e-6);
    }
}

TEST(ContextParallelMpi, UlyssesMatchesOneAttentionCall) {
  // 4 query heads, 2 KV heads: at 4 ranks each KV head is repeated for 2 ranks.
  if (Runtime::get()->world_size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  for (bool balanced : {true, false})
    for (bool packed : {false, true}) {
      SCOPED_TRACE(std::string(balanced ? "load-balanced" : "contiguous") + (packed ? ", packed" : ""));
      check_ring(DType::f64, balanced, packed, 1e-12, ContextParallelMethod::ulysses);
      check_ring(DType::f32, balanced, packed, 2e-6, ContextParallelMethod::ulysses);
    }
}

TEST(ContextParallelMpi, HybridMatchesOneAttentionCall) {
  // Ulysses inside pairs of ranks, the ring across the two pairs.
  if (Runtime::get()->world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (bool balanced : {true, false})
    for (bool packed : {false, true}) {
      SCOPED_TRACE(std::string(balanced ? "load-balanced" : "contiguous") + (packed ? ", packed" : ""));
      check_ring(DType::f64, balanced, packed, 1e-12, ContextParallelMethod::hybrid);
      check_ring(DType::f32, balanced, packed, 2e-6, ContextParallelMethod::hybrid);
    }
}

// context_parallel_async posts Ulysses' all-to-alls ahead: the same copies and sums, the same bits.
TEST(ContextParallelMpi, UlyssesAsyncGivesTheSameBits) {
  auto world = Runtime::get()->world();
  const int c = world->size();
  if (c < 2) GTEST_SKIP() << "needs 2 or more ranks";
  auto cp = mesh_for(c)->group_ptr("cp");
  const int64_t B = 2, S = 32;
  const Tensor docs = doc_ends_for(S);
  const SequenceSplit split{c, true};
  const int r = world->rank();
  const Tensor q = split.local(random({B, S, 4, 8}, DType::f32, 1), r, docs),
               k = split.local(random({B, S, 2, 8}, DType::f32, 2), r, docs),
               v = split.local(random({B, S, 2, 6}, DType::f32, 3), r, docs),
               w = split.local(random({B, S, 4, 6}, DType::f32, 4), r, docs);
  for (bool hybrid : {false, true}) {
    if (hybrid && c != 4) continue;
    SCOPED_TRACE(hybrid ? "hybrid" : "ulysses");
    std::vector<std::vector<double>> results[2];
    for (int async = 0; async < 2; ++async) {
      Tensor qa = q.clone(), ka = k.clone(), va = v.clone();
      for (Tensor* t : {&qa, &ka, &va}) t->set_requires_grad(true);
      Tensor o;
      if (hybrid) {
        auto [row, column] = hybrid_groups(cp);
        o = hybrid_attention(qa, ka, va, docs, 0.3, split, row, column, nullptr, async == 1);
      } else {
        o = ulysses_attention(qa, ka, va, docs, 0.3, split, cp, nullptr, async == 1);
      }
      autograd::backward(ops::sum(ops::mul(o, w)));
      for (const Tensor& t : {o, qa.grad(), ka.grad(), va.grad()}) results[async].push_back(t.to_double_vector());
    }
    EXPECT_EQ(results[0], results[1]);
  }
}

TEST(ContextParallelMpi, LoadBalancedSplitEvensTheCausalWork) {
  auto world = Runtime::get()->world();
  const int c = world->size();
  if (c < 2) GTEST_SKIP() << "needs 2 or more ranks";
  auto cp = mesh_for(c)->group_ptr("cp");
  const int64_t S = 64;
  auto work_of = [&](bool balanced) {
    const SequenceSplit split{c, balanced};
    const Tensor q = random({1, S, 2, 4}, DType::f32, 5);
    reset_ring_work();
    ring_attention(split.local(q, world->rank()), split.local(q, world->rank()), split.local(q, world->rank()),
                   Tensor(), 0.5, split, cp);
    return ring_work();
  };
  const RingWork balanced = work_of(true), contiguous = work_of(false);
  const int64_t n = S / c, total = S * (S + 1) / 2;  // causal pairs of the whole sequence
  // Load-balanced: chunks r and 2c-1-r of S/(2c) give every rank exactly total / c pairs.
  EXPECT_EQ(balanced.visible_pairs * c, total);
  EXPECT_EQ(balanced.blocks_computed, c);
  // Contiguous: rank r sees r full blocks and its own causal one, and skips the c-1-r later ones.
  const int r = world->rank();
  EXPECT_EQ(contiguous.visible_pairs, r * n * n + n * (n + 1) / 2);
  EXPECT_EQ(contiguous.blocks_computed, r + 1);
  EXPECT_EQ(contiguous.blocks_skipped, c - 1 - r);
}

TEST(ContextParallelMpi, SplitsHoldEveryTokenOnce) {
  const SequenceSplit balanced{4, true}, contiguous{4, false};
  EXPECT_EQ(balanced.indices(1, 16), (std::vector<int64_t>{2, 3, 12, 13}));
  EXPECT_EQ(contiguous.indices(1, 16), (std::vector<int64_t>{4, 5, 6, 7}));
  const Tensor x = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17},
                                       {2, 8});
  const SequenceSplit halves{2, true};
  EXPECT_EQ(halves.local(x, 0).to_int_vector(), (std::vector<int64_t>{0, 1, 6, 7, 10, 11, 16, 17}));
  EXPECT_EQ(halves.local(x, 1).to_int_vector(), (std::vector<int64_t>{2, 3, 4, 5, 12, 13, 14, 15}));
  EXPECT_THROW(balanced.indices(0, 12), ShapeError);  // 12 tokens do not cut into 8 chunks
}

TEST(ContextParallelMpi, PerDocumentSplitCutsEveryDocumentAndEvensTheCounts) {
  // Documents [0,5), [5,13), [13,16) at c = 2 (4 pieces each): ⌊5/4⌋ = 1 with one +1 piece (slot
  // 0), 8/4 = 2, ⌊3/4⌋ = 0 with three +1 pieces (slots 1, 2, 3): each slot gets one, each rank 8.
  const SequenceSplit halves{2, true};
  const std::vector<int64_t> ends{5, 13};
  EXPECT_EQ(halves.indices(0, 16, ends), (std::vector<int64_t>{0, 1, 4, 5, 6, 11, 12, 15}));
  EXPECT_EQ(halves.indices(1, 16, ends), (std::vector<int64_t>{2, 3, 7, 8, 9, 10, 13, 14}));
  // The per-sequence cut ignores the documents; the contiguous split too.
  EXPECT_EQ((SequenceSplit{2, true, false}.indices(0, 16, ends)), (std::vector<int64_t>{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ((SequenceSplit{2, false}.indices(1, 16, ends)), (std::vector<int64_t>{8, 9, 10, 11, 12, 13, 14, 15}));
  // Any documents (ends padded with S, or past it): S/c ascending tokens per rank, each once.
  for (int c : {2, 3, 4})
    for (uint64_t seed = 0; seed < 20; ++seed) {
      const int64_t S = 2 * c * 7;
      std::vector<int64_t> e;
      for (int64_t i = 1; i < S; ++i)
        if (stream_uniform({seed, 9, 0}, i) < 0.2) e.push_back(i);
      e.push_back(S);
      e.push_back(S);
      const auto parts = SequenceSplit{c, true}.sample_indices(S, e);
      std::vector<int> seen(static_cast<size_t>(S), 0);
      for (const auto& idx : parts) {
        EXPECT_EQ(static_cast<int64_t>(idx.size()), S / c);
        EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
        for (int64_t i : idx) ++seen[static_cast<size_t>(i)];
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), S) << "c " << c << " seed " << seed;
    }
  // local() takes each sample's own tokens.
  const Tensor x = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17},
                                       {2, 8});
  const Tensor docs = Tensor::from_vector(std::vector<int32_t>{4, 8, 2, 8}, {2, 2});
  EXPECT_EQ(halves.local(x, 0, docs).to_int_vector(), (std::vector<int64_t>{0, 3, 4, 7, 10, 12, 16, 17}));
  EXPECT_EQ(halves.local(x, 1, docs).to_int_vector(), (std::vector<int64_t>{1, 2, 5, 6, 11, 13, 14, 15}));
}

TEST(ContextParallelMpi, PerDocumentSplitEvensTheCausalWorkOfPackedData) {
  auto world = Runtime::get()->world();
  const int c = world->size();
  if (c < 2) GTEST_SKIP() << "needs 2 or more ranks";
  auto cp = mesh_for(c)->group_ptr("cp");
  // Two documents, 40 and 24 tokens: 2c divides both at c = 2 and 4.
  const int64_t S = 64;
  const Tensor docs = Tensor::from_vector(std::vector<int32_t>{40, 64}, {1, 2});
  auto pairs_of = [&](bool per_document) {
    const SequenceSplit split{c, true, per_document};
    const Tensor q = split.local(random({1, S, 2, 4}, DType::f32, 6), world->rank(), docs);
    reset_ring_work();
    ring_attention(q, q, q, docs, 0.5, split, cp);
    return static_cast<double>(ring_work().visible_pairs);
  };
  const double total = 40 * 41 / 2 + 24 * 25 / 2;  // causal pairs inside the documents
  EXPECT_EQ(pairs_of(true) * c, total);  // every rank exactly 1/c
  // The per-sequence cut: at c = 2 rank 0 holds [0,16) and [48,64), 136 + 264 pairs, rank 1 720.
  const double mine = pairs_of(false);
  const double most = world->all_reduce_scalar(mine, ReduceOp::max), least = world->all_reduce_scalar(mine, ReduceOp::min);
  EXPECT_GT(most / least, 1.5);
  if (c == 2) EXPECT_EQ(mine, world->rank() == 0 ? 400.0 : 720.0);
}

// ---- Whole models ------------------------------------------------------------------------------

Json cp_llama() {
  return Json{{"model_type", "llama"}, {"vocab_size", 24}, {"hidden_size", 16}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 24},
              {"rms_norm_eps", 1e-5}, {"compute_dtype", "float32"}};
}

Json cp_qwen3_moe() {
  return Json{{"model_type", "qwen3_moe"}, {"vocab_size", 24}, {"hidden_size", 16}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 4}, {"head_dim", 4}, {"intermediate_size", 16},
              {"moe_intermediate_size", 8}, {"num_experts", 4}, {"num_experts_per_tok", 2},
              {"norm_topk_prob", true}, {"router_aux_loss_coef", 0.01}, {"compute_dtype", "float32"}};
}

// MLA and a sequence balance loss, without MTP (cp_deepseek_v3_mtp adds it).
Json cp_deepseek_v3() {
  Json j = testing::dist_tiny_deepseek_v3();
  j["num_attention_heads"] = 4;
  j["num_nextn_predict_layers"] = 0;
  return j;
}

// The deterministic micro-batch, optionally packed: documents end per doc_ends_for, positions
// restart at each document (reset_position_ids).
nn::LMBatch batch_for(int64_t vocab, int64_t S, int64_t index, bool packed) {
  nn::LMBatch b = testing::micro_batch(vocab, 2, S, index);
  if (!packed) return b;
  b.doc_ends = doc_ends_for(S);
  const std::vector<int64_t> ends = b.doc_ends.to_int_vector();
  std::vector<int32_t> pos;
  for (int64_t s = 0; s < 2; ++s) {
    int64_t start = 0;
    for (int64_t i = 0; i < S; ++i) {
      for (int64_t d = 0; d < 3; ++d)
        if (ends[s * 3 + d] <= i) start = std::max(start, ends[s * 3 + d]);
      pos.push_back(static_cast<int32_t>(i - start));
    }
  }
  b.position_ids = Tensor::from_vector(pos, {2, S});
  return b;
}

void check_step(const Json& section, int cp, int tp, bool load_balanced, bool packed,
                ContextParallelMethod method = ContextParallelMethod::ring) {
  const int64_t vocab = section.at("vocab_size").get<int64_t>(), S = 32;
  auto mesh = mesh_for(cp, tp);
  const int d = mesh->dims().dataset_shard_id(mesh->rank()), dp = mesh->dims().data_parallel();
  models::BuiltModel plain = models::build_model(section), split = models::build_model(section);
  plain.model->materialize(17);
  ParallelizeOptions o;
  o.context.load_balanced = load_balanced;
  o.context.method = method;
  o.context.ulysses_degree = 2;  // hybrid only
  auto parallel = parallelize(*split.model, mesh, o);
  parallel->materialize(17);

  // One process trains the dp micro-batches; data shard d trains micro-batch d, its cp × tp
  // ranks each a piece of it.
  // Balance losses are injected with scale 1 on both sides: each micro-batch's once.
  plain.model->zero_grad();
  double ref_loss = 0, ref_aux = 0, ref_mtp = 0;
  for (int64_t j = 0; j < dp; ++j) {
    nn::LMOutput out = plain.model->forward(batch_for(vocab, S, j, packed));
    Tensor scaled = dp > 1 ? ops::scale(out.loss, 1.0 / static_cast<double>(dp)) : out.loss;
    autograd::backward(scaled);
    ref_loss += out.loss.item() / static_cast<double>(dp);
    if (out.aux_loss.defined()) ref_aux += out.aux_loss.item() / static_cast<double>(dp);
    if (out.mtp_loss.defined()) ref_mtp += out.mtp_loss.item() / static_cast<double>(dp);
  }
  split.model->set_auxiliary_loss_grad_scale(1.0);
  parallel->zero_grad();
  nn::LMOutput out = split.model->forward(batch_for(vocab, S, d, packed));
  autograd::backward(out.loss, Tensor::full(out.loss.shape(), parallel->backward_scale()));
  parallel->finish_backward();
  const double loss = mesh->world().all_reduce_scalar(out.loss.item()) / mesh->world_size();
  EXPECT_NEAR(loss, ref_loss, 1e-6 * std::fabs(ref_loss));
  if (out.mtp_loss.defined()) {
    const double mtp = mesh->world().all_reduce_scalar(out.mtp_loss.item()) / mesh->world_size();
    EXPECT_NEAR(mtp, ref_mtp, 1e-6 * std::fabs(ref_mtp));
  }
  if (out.aux_loss.defined()) {
    // The balance loss is the whole sequence's on every cp rank.
    const double aux = mesh->world().all_reduce_scalar(out.aux_loss.item()) / mesh->world_size();
    EXPECT_NEAR(aux, ref_aux, 1e-6 * std::fabs(ref_aux));
  }
  for (auto& [name, p] : split.model->named_parameters()) {
    // FSDP holds rows of each grad; the whole grad is the one-process grad's pieces. The q/k
    // norms' weight grads sum signed terms over every token that nearly cancel (norms of 1e-6 to
    // 1e-5 from terms of 1e-3), so the block merge's last-bit differences reach them amplified:
    // measured up to 3.3e-5 relative at cp 4, against below 1e-6 for the other weights.
    const Tensor& ref = plain.model->find_parameter(name)->tensor.grad();
    const bool cancelling =
        name.find("self_attention") != std::string::npos && name.find("_layernorm") != std::string::npos;
    expect_close(p->local().grad(), local_of(ref, *p), cancelling ? 5e-5 : 2e-5, name + " grad");
  }
  testing::expect_grad_norm_matches(*plain.model, *split.model, *parallel, *mesh);
}

// DeepSeek-V3 with one MTP layer: its shifted ids, labels, mask and positions.
Json cp_deepseek_v3_mtp() {
  Json j = cp_deepseek_v3();
  j["num_nextn_predict_layers"] = 1;
  return j;
}

struct Arch {
  const char* name;
  Json (*section)();
};
const Arch kArchitectures[] = {{"llama", cp_llama}, {"qwen3_moe", cp_qwen3_moe}, {"deepseek_v3", cp_deepseek_v3}};

TEST(ContextParallelMpi, OneStepOverAllRanksMatchesOneProcess) {
  const int n = Runtime::get()->world_size();
  if (n != 2 && n != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const Arch& a : kArchitectures)
    for (bool balanced : {true, false})
      for (bool packed : {false, true}) {
        SCOPED_TRACE(std::string(a.name) + (balanced ? " load-balanced" : " contiguous") + (packed ? " packed" : ""));
        check_step(a.section(), n, 1, balanced, packed);
      }
}

TEST(ContextParallelMpi, InsideFsdpAndWithTensorParallelism) {
  if (Runtime::get()->world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (const Arch& a : kArchitectures)
    for (bool packed : {false, true}) {
      SCOPED_TRACE(std::string(a.name) + (packed ? " packed" : ""));
      check_step(a.section(), 2, 1, true, packed);  // cp 2 × fsdp 2 (dp_shard 2)
      check_step(a.section(), 2, 2, true, packed);  // cp 2 × tp 2
    }
}

}  // namespace
}  // namespace loom::dist

namespace loom::dist {
namespace {

TEST(ContextParallelMpi, UlyssesAndHybridStepMatchOneProcess) {
  const int n = Runtime::get()->world_size();
  if (n != 2 && n != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const Arch& a : kArchitectures)
    for (bool packed : {false, true}) {
      SCOPED_TRACE(std::string(a.name) + (packed ? " packed" : ""));
      check_step(a.section(), n, 1, true, packed, ContextParallelMethod::ulysses);
      check_step(a.section(), n, 1, false, packed, ContextParallelMethod::ulysses);
      if (n == 4) {
        check_step(a.section(), 2, 1, true, packed, ContextParallelMethod::ulysses);  // × fsdp 2
        check_step(a.section(), 2, 2, true, packed, ContextParallelMethod::ulysses);  // × tp 2
        check_step(a.section(), 4, 1, true, packed, ContextParallelMethod::hybrid);   // u = 2, ring of 2
        check_step(a.section(), 4, 1, false, packed, ContextParallelMethod::hybrid);
      }
    }
}

}  // namespace
}  // namespace loom::dist

namespace loom::dist {
namespace {

TEST(ContextParallelMpi, MultiTokenPredictionMatchesOneProcess) {
  const int n = Runtime::get()->world_size();
  if (n != 2 && n != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  ASSERT_EQ(models::build_model(cp_deepseek_v3_mtp()).model->mtp_layers().size(), 1u);
  for (bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed" : "plain");
    check_step(cp_deepseek_v3_mtp(), n, 1, true, packed);
    check_step(cp_deepseek_v3_mtp(), n, 1, false, packed);
    check_step(cp_deepseek_v3_mtp(), n, 1, true, packed, ContextParallelMethod::ulysses);
    if (n == 4) {
      check_step(cp_deepseek_v3_mtp(), 2, 2, true, packed);  // cp 2 × tp 2
      check_step(cp_deepseek_v3_mtp(), 4, 1, true, packed, ContextParallelMethod::hybrid);
    }
  }
}

}  // namespace
}  // namespace loom::dist
