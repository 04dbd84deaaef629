#include "loom/dist/tensor_parallel.h"

#include <set>

#include "loom/autograd/grad_mode.h"
#include "loom/autograd/node.h"
#include "loom/dist/functional.h"
#include "loom/nn/causal_lm.h"
#include "loom/nn/mla.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/index.h"
#include "loom/ops/linear.h"
#include "loom/ops/loss.h"
#include "loom/ops/shape.h"
#include "loom/ops/weight_cast.h"

namespace loom::dist {

namespace {

using nn::IndexRange;
using Group = std::shared_ptr<ProcessGroup>;

constexpr int kSeqDim = 1;  // activations are [B, S, D]

struct Split {
  Group tp;
  int t = 1, r = 0;
  std::string what;  // "decoder.layers.3.self_attention": named in errors

  // This rank's block of n: [r·n/t, (r+1)·n/t).
  IndexRange block(int64_t n, const char* of) const {
    LOOM_CHECK(n % t == 0, ShapeError, "tensor parallelism: ", what, ": ", of, " (", n, ") must divide by "
               "tensor_parallel (", t, ")");
    return {r * (n / t), n / t};
  }
};

nn::Linear& linear(nn::Module& parent, const std::string& name) {
  auto* l = dynamic_cast<nn::Linear*>(parent.find_module(name));
  LOOM_CHECK(l != nullptr, ValueError, "tensor parallelism: ", parent.type_name(), " has no Linear '", name, "'");
  return *l;
}

// Replaces p's tensor by this rank's slice (meta stays meta; values are kept) and records it.
void shard(nn::Parameter& p, int dim, std::vector<IndexRange> ranges, int copies = 1) {
  LOOM_CHECK(p.placement.axes().empty(), ValueError, "tensor parallelism must be applied before any other strategy");
  const Tensor whole = p.tensor;
  p.placement.add(p.global_shape, nn::AxisPlacement::shard("tp", dim, ranges, copies));
  if (whole.is_meta()) {
    p.tensor = Tensor::empty(p.local_shape(), p.dtype, Device::meta());
  } else {
    autograd::NoGradGuard no_grad;
    std::vector<Tensor> pieces;
    for (const IndexRange& r : ranges) pieces.push_back(whole.narrow(dim, r.begin, r.length));
    p.tensor = pieces.size() == 1 ? pieces[0].contiguous().clone() : ops::cat(pieces, dim).contiguous();
  }
  p.tensor.set_requires_grad(p.trainable);
}

// Each grad contribution of `p` is summed over `group` before it accumulates.
void sum_grads_over(nn::Parameter& p, const Group& group) {
  autograd::register_grad_hook(p.tensor, [group](const Tensor& g) {
    Tensor sum = g.contiguous().clone();
    group->all_reduce(sum);
    return sum;
  });
}

// Column-parallel: output rows (and the bias) split, in `ranges` of the weight's rows.
void column_parallel(nn::Linear& l, const std::vector<IndexRange>& ranges, int copies = 1) {
  shard(l.weight(), 0, ranges, copies);
  if (l.bias()) shard(*l.bias(), 0, ranges, copies);
}

// The sequence all-gather at the entry of `m` (its first input), as m's operation "all_gather".
void gather_input(nn::Module& m, const Group& tp) {
  m.add_operation("all_gather");
  nn::Module* mod = &m;
  m.add_forward_wrapper([mod, tp](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
    std::vector<Tensor> args = in;
    args[0] = mod->call_operation("all_gather", {in[0]}, [tp](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{all_gather(x[0], tp, kSeqDim)};
    })[0];
    return inner(args);
  });
}

// The sequence all-gather of m's output (MLA's latents), as m's operation "all_gather".
void gather_output(nn::Module& m, const Group& tp) {
  m.add_operation("all_gather");
  nn::Module* mod = &m;
  m.add_forward_wrapper([mod, tp](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
    std::vector<Tensor> out = inner(in);
    out[0] = mod->call_operation("all_gather", {out[0]}, [tp](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{all_gather(x[0], tp, kSeqDim)};
    })[0];
    return out;
  });
}

// Row-parallel: input columns split; the partial products are reduce-scattered over the sequence
// (operation "reduce_scatter") and the bias, replicated, is added once after the sum.
void row_parallel(nn::Linear& l, IndexRange columns, const Group& tp) {
  shard(l.weight(), 1, {columns});
  l.add_operation("reduce_scatter");
  nn::Linear* lin = &l;
  // Innermost wrapper: it replaces the Linear's body (which would add the bias t times).
  l.add_forward_wrapper([lin, tp](const nn::TensorFn&, const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    Tensor w = ops::cast_weight(lin->weight().tensor, x.dtype());  // once per step, as Linear does
    Tensor y = lin->call_operation("reduce_scatter", {ops::linear(x, w)}, [tp](const std::vector<Tensor>& p) {
      return std::vector<Tensor>{reduce_scatter(p[0], tp, kSeqDim)};
    })[0];
    if (nn::Parameter* b = lin->bias()) {
      Tensor bias = ops::cast_weight(b->tensor, y.dtype());
      y = ops::add(y, bias);
    }
    return std::vector<Tensor>{y};
  });
}

// GQA: the query heads' blocks, and the KV heads they use (shared by t/G ranks when t > G).
void split_self_attention(nn::Module& attn, const nn::TransformerConfig& c, const Split& s,
                          const Group& kv_group) {
  const int64_t H = c.num_attention_heads, G = c.num_key_value_heads, d = c.head_dim;
  const IndexRange q_heads = s.block(H, "num_attention_heads");
  gather_input(attn, s.tp);
  column_parallel(linear(attn, "linear_q"), {{q_heads.begin * d, q_heads.length * d}});
  IndexRange kv_heads;
  int copies = 1;
  if (G % s.t == 0) {
    kv_heads = s.block(G, "num_key_value_heads");
  } else {
    LOOM_CHECK(s.t % G == 0, ShapeError, "tensor parallelism: ", s.what, ": num_key_value_heads (", G,
               ") must divide by tensor_parallel (", s.t, ") or divide it");
    copies = s.t / static_cast<int>(G);
    kv_heads = {s.r / copies, 1};
  }
  for (const char* name : {"linear_k", "linear_v"}) {
    nn::Linear& l = linear(attn, name);
    column_parallel(l, {{kv_heads.begin * d, kv_heads.length * d}}, copies);
    if (copies > 1) {
      sum_grads_over(l.weight(), kv_group);
      if (l.bias()) sum_grads_over(*l.bias(), kv_group);
    }
  }
  row_parallel(linear(attn, "linear_proj"), {q_heads.begin * d, q_heads.length * d}, s.tp);
}

void split_mla(nn::Module& attn, const nn::TransformerConfig& c, const Split& s) {
  const int64_t H = c.num_attention_heads, qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  const int64_t kv = c.qk_nope_head_dim + c.v_head_dim;
  const IndexRange heads = s.block(H, "num_attention_heads");
  if (c.q_lora_rank > 0) {
    // linear_qa and linear_kva run on the local tokens; their (small) latents are gathered.
    gather_output(*attn.find_module("q_layernorm"), s.tp);
    column_parallel(linear(attn, "linear_qb"), {{heads.begin * qk, heads.length * qk}});
  } else {
    gather_input(attn, s.tp);
    column_parallel(linear(attn, "linear_q"), {{heads.begin * qk, heads.length * qk}});
  }
  if (c.q_lora_rank > 0) gather_output(linear(attn, "linear_kva"), s.tp);
  column_parallel(linear(attn, "linear_kvb"), {{heads.begin * kv, heads.length * kv}});
  row_parallel(linear(attn, "linear_proj"), {heads.begin * c.v_head_dim, heads.length * c.v_head_dim}, s.tp);
}

void split_dense_mlp(nn::Module& mlp, const nn::TransformerConfig& c, const Split& s) {
  const int64_t F = c.intermediate_size;
  const IndexRange f = s.block(F, "intermediate_size");
  gather_input(mlp, s.tp);
  if (c.gated_linear_unit) column_parallel(linear(mlp, "linear_fc1"), {f, {F + f.begin, f.length}});
  else column_parallel(linear(mlp, "linear_fc1"), {f});
  row_parallel(linear(mlp, "linear_fc2"), f, s.tp);
}

// The MoE layer stays whole on the local tokens; its balance statistics are summed over tp so the
// balance loss is the whole micro-batch's on every rank (the sum's backward passes the grad
// through: the loss is replicated and counted once).
void reduce_moe_statistics(nn::MoELayer& moe, const Group& tp) {
  moe.router().add_operation_wrapper("reduce_statistics", [tp](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
    std::vector<Tensor> out = inner(in);
    for (Tensor& t : out)
      if (t.defined()) t = all_reduce(t, tp);
    return out;
  });
}

void split_layer(nn::TransformerLayer& layer, const nn::TransformerConfig& c, const Split& s, const Group& kv_group) {
  nn::Module& attn = layer.self_attention();
  if (c.multi_latent_attention) split_mla(attn, c, s);
  else split_self_attention(attn, c, s, kv_group);
  if (nn::MoELayer* moe = layer.moe()) reduce_moe_statistics(*moe, s.tp);
  else split_dense_mlp(*layer.find_module("mlp"), c, s);
}

// The ranks of the tp group that share this rank's KV head (t > G), a sub-group of tp.
Group kv_sharing_group(const nn::TransformerConfig& c, const Group& tp) {
  const int t = tp->size();
  const int64_t G = c.num_key_value_heads;
  if (c.multi_latent_attention || G % t == 0 || t % G != 0) return nullptr;
  const int copies = t / static_cast<int>(G), first = tp->rank() / copies * copies;
  std::vector<int> members;
  for (int i = 0; i < copies; ++i) members.push_back(first + i);
  return Group(tp->split_subgroup("tp_kv", members));
}

}  // namespace

void apply_tensor_parallel(nn::Module& model, DeviceMesh& mesh) {
  auto* lm = dynamic_cast<nn::CausalLM*>(&model);
  LOOM_CHECK(lm != nullptr, ValueError, "tensor parallelism splits an nn::CausalLM; got a ", model.type_name());
  const nn::TransformerConfig& c = lm->config();
  Split s{mesh.group_ptr("tp"), mesh.size("tp"), mesh.group("tp").rank(), "model"};
  const Group kv_group = kv_sharing_group(c, s.tp);

  // Vocabulary-parallel embedding: its lookup rows held elsewhere are zero; the reduce-scatter
  // sums the one non-zero row and hands each rank its piece of the sequence.
  s.what = "embedding";
  nn::Embedding& embedding = lm->embedding().word_embeddings();
  const IndexRange vocab = s.block(c.vocab_size, "vocab_size");
  shard(embedding.weight(), 0, {vocab});
  const kernels::VocabShard rows{vocab.begin, c.vocab_size, {}};
  embedding.add_operation("reduce_scatter");
  nn::Embedding* emb = &embedding;
  embedding.add_forward_wrapper([emb, rows, tp = s.tp](const nn::TensorFn&, const std::vector<Tensor>& in) {
    Tensor y = ops::embedding(in[0], emb->weight().tensor, &rows);
    return emb->call_operation("reduce_scatter", {y}, [tp](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{reduce_scatter(x[0], tp, kSeqDim)};
    });
  });

  // Vocabulary-parallel head (tied: the embedding's rows, already split) and its loss.
  nn::Parameter& head = lm->output_weight();
  if (!head.placement.on("tp")) shard(head, 0, {vocab});
  kernels::VocabShard head_rows{vocab.begin, c.vocab_size,
                                [tp = s.tp](void* data, int64_t count, DType dtype, bool max) {
                                  const ReduceOp op = max ? ReduceOp::max : ReduceOp::sum;
                                  if (dtype == DType::f64) tp->all_reduce(std::span<double>(static_cast<double*>(data), count), op);
                                  else tp->all_reduce(std::span<float>(static_cast<float*>(data), count), op);
                                }};
  lm->set_head_loss([head_rows, tp = s.tp](const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                                           const Tensor& loss_mask, const Tensor&, bool grads_in_forward) {
    return ops::linear_cross_entropy(all_gather(hidden, tp, kSeqDim), weight, labels, loss_mask, -100, 0,
                                     grads_in_forward, &head_rows);
  });
  // Logits: the gathered sequence against this rank's vocabulary rows, then every rank's rows
  // (contiguous blocks in rank order) gathered along the vocabulary.
  lm->set_head_logits([tp = s.tp](const Tensor& hidden, const Tensor& weight, const Tensor&) {
    return all_gather(ops::linear(all_gather(hidden, tp, kSeqDim), weight), tp, 2);
  });

  auto layers = lm->decoder().layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    s.what = "decoder.layers." + std::to_string(i);
    split_layer(*layers[i], c, s, kv_group);
  }
  auto mtp = lm->mtp_layers();
  for (size_t k = 0; k < mtp.size(); ++k) {
    s.what = "mtp.layers." + std::to_string(k);
    split_layer(mtp[k]->transformer_layer(), c, s, kv_group);
  }

  // Under expert parallelism the routed experts are placed over the sparse mesh instead: their
  // grads are summed by the all-to-all's backward and over efsdp (expert_parallel.h).
  std::set<const nn::Parameter*> routed_experts;
  if (mesh.size("ep") > 1)
    for (nn::MoELayer* moe : lm->moe_layers()) {
      routed_experts.insert(&moe->experts().weight1());
      routed_experts.insert(&moe->experts().weight2());
    }
  // Everything left whole sees only this rank's tokens (or heads): its grads are partial sums.
  for (auto& [name, p] : model.named_parameters()) {
    if (p->placement.on("tp") || routed_experts.count(p)) continue;
    p->placement.add(p->global_shape, nn::AxisPlacement::partial("tp"));
    sum_grads_over(*p, s.tp);
  }
}

}  // namespace loom::dist
