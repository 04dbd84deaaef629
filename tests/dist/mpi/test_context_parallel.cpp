// Context parallelism against one process (reference/parallel.md §2, dist/context_parallel.h):
// the ring attention's output and its q/k/v grads equal one attention call over the whole
// sequence (f64: to rounding of the merge; f32: within fp32 rounding), with both splits, with and
// without packed documents, with GQA; the load-balanced split gives every rank the same causal
// work; and one training step of whole models (loss, every grad, the grad norm) matches one
// process at cp = world, cp × fsdp and cp × tp. Run at 2 and 4 ranks.
#include <gtest/gtest.h>

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
  Tensor qc = split.local(q, r), kc = split.local(k, r), vc = split.local(v, r);
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
  autograd::backward(ops::sum(ops::mul(oc, split.local(w, r))));

  expect_close(oc, split.local(o1.detach(), r), tol, "output");
  expect_close(qc.grad(), split.local(q1.grad(), r), tol, "dq");
  expect_close(kc.grad(), split.local(k1.grad(), r), tol, "dk");
  expect_close(vc.grad(), split.local(v1.grad(), r), tol, "dv");
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

// MLA and a sequence balance loss, without MTP (not trained under CP).
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
  double ref_loss = 0, ref_aux = 0;
  for (int64_t j = 0; j < dp; ++j) {
    nn::LMOutput out = plain.model->forward(batch_for(vocab, S, j, packed));
    Tensor scaled = dp > 1 ? ops::scale(out.loss, 1.0 / static_cast<double>(dp)) : out.loss;
    autograd::backward(scaled);
    ref_loss += out.loss.item() / static_cast<double>(dp);
    if (out.aux_loss.defined()) ref_aux += out.aux_loss.item() / static_cast<double>(dp);
  }
  split.model->set_auxiliary_loss_grad_scale(1.0);
  parallel->zero_grad();
  nn::LMOutput out = split.model->forward(batch_for(vocab, S, d, packed));
  autograd::backward(out.loss, Tensor::full(out.loss.shape(), parallel->backward_scale()));
  parallel->finish_backward();
  const double loss = mesh->world().all_reduce_scalar(out.loss.item()) / mesh->world_size();
  EXPECT_NEAR(loss, ref_loss, 1e-6 * std::fabs(ref_loss));
  if (out.aux_loss.defined()) {
    // The balance loss is the whole sequence's on every cp rank.
    const double aux = mesh->world().all_reduce_scalar(out.aux_loss.item()) / mesh->world_size();
    EXPECT_NEAR(aux, ref_aux, 1e-6 * std::fabs(ref_aux));
  }
  for (auto& [name, p] : split.model->named_parameters()) {
    // FSDP holds rows of each grad; the whole grad is the one-process grad's pieces.
    const Tensor& ref = plain.model->find_parameter(name)->tensor.grad();
    expect_close(p->local().grad(), local_of(ref, *p), 2e-5, name + " grad");
  }
  testing::expect_grad_norm_matches(*plain.model, *split.model, *parallel, *mesh);
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
