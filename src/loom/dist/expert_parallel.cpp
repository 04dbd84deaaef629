#include "loom/dist/expert_parallel.h"

#include <numeric>

#include "loom/autograd/grad_mode.h"
#include "loom/dist/functional.h"
#include "loom/nn/causal_lm.h"
#include "loom/ops/index.h"
#include "loom/ops/moe.h"
#include "loom/ops/shape.h"

namespace loom::dist {

namespace {

using Group = std::shared_ptr<ProcessGroup>;

// This rank's share of one MoE layer's routed experts, and how its tokens travel.
struct ExpertShard {
  Group ep;
  int64_t experts = 0;  // E, every routed expert
  int64_t local = 0;    // L = E/ep, the experts this rank computes
  TokenDispatcher dispatcher = TokenDispatcher::alltoall;
  int ranks_per_node = 1;  // alltoall_deredundancy: consecutive ep ranks that form one node
};

// Replaces p's tensor by experts [r·L, (r+1)·L) along dim 0 (meta stays meta; values are kept).
void shard_experts(nn::Parameter& p, int64_t begin, int64_t length) {
  LOOM_CHECK(!p.placement.on("ep") && !p.local_shard.defined(), ValueError,
             "expert parallelism: apply it once, after tensor parallelism and before FSDP");
  const Tensor whole = p.tensor;
  p.placement.add(p.global_shape, nn::AxisPlacement::shard("ep", 0, {{begin, length}}));
  if (whole.is_meta()) {
    p.tensor = Tensor::empty(p.local_shape(), p.dtype, Device::meta());
  } else {
    autograd::NoGradGuard no_grad;
    p.tensor = whole.narrow(0, begin, length).contiguous().clone();
  }
  p.tensor.set_requires_grad(p.trainable);
}

int64_t sum(const std::vector<int64_t>& v, size_t begin, size_t count) {
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(begin),
                         v.begin() + static_cast<std::ptrdiff_t>(begin + count), int64_t{0});
}

// Rows on the ranks that compute them: the result of sending rows grouped by expert to the
// experts' owners among the ep ranks [first, first + peers).
struct AtExperts {
  Tensor tokens;             // [R, hidden] received, grouped by local expert
  Tensor tokens_per_expert;  // int64 [L]
  Tensor local_row_map;      // [R, 1]: the regrouping, undone by from_experts
  std::vector<int64_t> sent, received;  // rows per ep rank (0 outside the peers)
};

// rows [M, hidden] grouped by expert in ascending order, counts [peers·L]: rows per expert of the
// peers' experts (the rows for rank p contiguous). Counts go only to the peers (L int64 each),
// then the rows (all_to_all_v, differentiable); the received rows, in (source rank, expert,
// token) order, are regrouped by local expert with a stable moe_permute, so an expert's rows stay
// in source-rank then token order.
AtExperts to_experts(const ExpertShard& s, const Tensor& rows, const std::vector<int64_t>& counts, int first,
                     int peers) {
  const int n = s.ep->size();
  const size_t L = static_cast<size_t>(s.local);
  std::vector<int64_t> count_sizes(static_cast<size_t>(n), 0);
  for (int p = first; p < first + peers; ++p) count_sizes[static_cast<size_t>(p)] = s.local;
  const Tensor sent_counts = Tensor::from_vector(counts, {static_cast<int64_t>(counts.size())});
  const Tensor counts_in = all_to_all_counts(sent_counts, s.ep, count_sizes, count_sizes);
  const std::vector<int64_t> received_counts = counts_in.to_int_vector();  // [peer][local expert]

  AtExperts a;
  a.sent.assign(static_cast<size_t>(n), 0);
  a.received.assign(static_cast<size_t>(n), 0);
  for (int p = 0; p < peers; ++p) {
    a.sent[static_cast<size_t>(first + p)] = sum(counts, p * L, L);
    a.received[static_cast<size_t>(first + p)] = sum(received_counts, p * L, L);
  }
  Tensor received = all_to_all_v(rows, s.ep, a.sent, a.received);
  std::vector<int64_t> local_ids;
  local_ids.reserve(static_cast<size_t>(received.size(0)));
  for (int p = 0; p < peers; ++p)
    for (size_t e = 0; e < L; ++e) local_ids.insert(local_ids.end(), received_counts[p * L + e], static_cast<int64_t>(e));
  ops::MoePermutation grouped = ops::moe_permute(
      received, Tensor::from_vector(local_ids, {static_cast<int64_t>(local_ids.size()), 1}), s.local);
  a.tokens = grouped.permuted;
  a.tokens_per_expert = grouped.tokens_per_expert;
  a.local_row_map = grouped.row_map;
  return a;
}

// The inverse of to_experts: expert outputs back on the ranks that sent the rows, in their order.
Tensor from_experts(const ExpertShard& s, const Tensor& expert_output, const Tensor& local_row_map,
                    const std::vector<int64_t>& sent, const std::vector<int64_t>& received) {
  Tensor by_peer = ops::moe_unpermute(expert_output, local_row_map);  // (peer, expert, token) order
  return all_to_all_v(by_peer, s.ep, received, sent);
}

Tensor int_tensor(const std::vector<int64_t>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }

// ---- alltoall ---------------------------------------------------------------------------------

// {x [T, hidden], indices [T, K], weights [T, K]} → {tokens grouped by local expert,
// tokens_per_expert [L], state: row_map [T, K], weights, local_row_map, rows sent [n], rows
// received [n]}.
std::vector<Tensor> dispatch(const ExpertShard& s, const std::vector<Tensor>& in) {
  ops::MoePermutation perm = ops::moe_permute(in[0], in[1], s.experts);
  AtExperts a = to_experts(s, perm.permuted, perm.tokens_per_expert.to_int_vector(), 0, s.ep->size());
  return {a.tokens, a.tokens_per_expert, perm.row_map, in[2], a.local_row_map, int_tensor(a.sent), int_tensor(a.received)};
}

// {expert_output, row_map, weights, local_row_map, rows sent, rows received} → {y [T, hidden]}.
std::vector<Tensor> combine(const ExpertShard& s, const std::vector<Tensor>& in) {
  LOOM_CHECK(in.size() == 6, ValueError, "expert parallelism: 'combine' got ", in.size() - 1,
             " state tensors; it needs the 5 its 'dispatch' returned");
  Tensor returned = from_experts(s, in[0], in[3], in[4].to_int_vector(), in[5].to_int_vector());
  return {ops::moe_unpermute(returned, in[1], in[2])};
}

// ---- alltoall_deredundancy --------------------------------------------------------------------
// Nodes of P = ranks_per_node consecutive ep ranks: ep rank r is on node r / P at index r % P;
// node m owns the experts [m·P·L, (m+1)·P·L), so the placement is that of alltoall.

// {x, indices, weights} → {tokens grouped by local expert, tokens_per_expert [L], state: row_map
// [R, K] of the rows this rank received from the nodes, their weights [R, K], local_row_map, copies
// sent and received inside the node [n], the token of each row sent [S], rows sent and received
// across nodes [n], {T}}.
std::vector<Tensor> dispatch_deredundant(const ExpertShard& s, const std::vector<Tensor>& in) {
  const Tensor &x = in[0], &weights = in[2];
  const int n = s.ep->size(), P = s.ranks_per_node, nodes = n / P, index_in_node = s.ep->rank() % P;
  const int node = s.ep->rank() / P;
  const int64_t T = x.size(0), K = in[1].size(1), per_node = s.local * P;
  const std::vector<int64_t> ids = in[1].to_int_vector();

  // 1. Across nodes: each token once to every node that holds one of its experts, to the rank of
  //    the same index there, with its K choices as that node's experts (per_node: another node's)
  //    and its K weights. Rows by node, then token.
  std::vector<int64_t> token_of_row, sent(static_cast<size_t>(n), 0), received(static_cast<size_t>(n), 0);
  std::vector<int32_t> choices;
  for (int m = 0; m < nodes; ++m)
    for (int64_t t = 0; t < T; ++t) {
      bool needed = false;
      for (int64_t k = 0; k < K; ++k) needed = needed || ids[static_cast<size_t>(t * K + k)] / per_node == m;
      if (!needed) continue;
      token_of_row.push_back(t);
      ++sent[static_cast<size_t>(m * P + index_in_node)];
      for (int64_t k = 0; k < K; ++k) {
        const int64_t e = ids[static_cast<size_t>(t * K + k)];
        choices.push_back(static_cast<int32_t>(e / per_node == m ? e % per_node : per_node));
      }
    }
  std::vector<int64_t> one_each(static_cast<size_t>(n), 0), rows_per_node;
  for (int m = 0; m < nodes; ++m) {
    one_each[static_cast<size_t>(m * P + index_in_node)] = 1;
    rows_per_node.push_back(sent[static_cast<size_t>(m * P + index_in_node)]);
  }
  const Tensor got = all_to_all_counts(int_tensor(rows_per_node), s.ep, one_each, one_each);
  const std::vector<int64_t> got_rows = got.to_int_vector();
  for (int m = 0; m < nodes; ++m) received[static_cast<size_t>(m * P + index_in_node)] = got_rows[static_cast<size_t>(m)];

  const Tensor index = int_tensor(token_of_row);
  Tensor rows = all_to_all_v(ops::index_select(x, 0, index), s.ep, sent, received);
  Tensor row_weights = all_to_all_v(ops::index_select(weights, 0, index), s.ep, sent, received);
  std::vector<int64_t> sent_k = sent, received_k = received;
  for (int p = 0; p < n; ++p) {
    sent_k[static_cast<size_t>(p)] *= K;
    received_k[static_cast<size_t>(p)] *= K;
  }
  const Tensor row_choices =
      all_to_all_counts(Tensor::from_vector(choices, {static_cast<int64_t>(token_of_row.size()), K}), s.ep, sent_k,
                        received_k)
          .reshape({rows.size(0), K});

  // 2. Inside the node: the copies for this node's experts grouped by expert (the other nodes'
  //    choices grouped last, as one more expert, and not sent), to the experts' ranks.
  ops::MoePermutation perm = ops::moe_permute(rows, row_choices, per_node + 1);
  std::vector<int64_t> counts = perm.tokens_per_expert.to_int_vector();
  counts.pop_back();
  const int64_t copies = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  AtExperts a = to_experts(s, ops::narrow(perm.permuted, 0, 0, copies), counts, node * P, P);
  return {a.tokens,          a.tokens_per_expert, perm.row_map,     row_weights,
          a.local_row_map,   int_tensor(a.sent),  int_tensor(a.received), index,
          int_tensor(sent),  int_tensor(received), int_tensor({T})};
}

// {expert_output, row_map, weights, local_row_map, copies sent, copies received, token of each
// row sent, rows sent, rows received, {T}} → {y [T, hidden]}.
std::vector<Tensor> combine_deredundant(const ExpertShard& s, const std::vector<Tensor>& in) {
  LOOM_CHECK(in.size() == 10, ValueError, "expert parallelism (alltoall_deredundancy): 'combine' got ",
             in.size() - 1, " state tensors; it needs the 9 its 'dispatch' returned");
  // Inside the node: the outputs back, then each received row's weighted sum over this node's
  // experts, in slot order (moe_unpermute, the one-process combine; the other nodes' slots read
  // zero rows and add nothing).
  Tensor y = from_experts(s, in[0], in[3], in[4].to_int_vector(), in[5].to_int_vector());
  Tensor others = Tensor::zeros({in[1].numel() - y.size(0), y.size(1)}, y.dtype());
  Tensor partial = ops::moe_unpermute(ops::cat({y, others}, 0), in[1], in[2]);
  // Across nodes: one partial sum per token and node comes home; the node sums add in node order.
  Tensor back = all_to_all_v(partial, s.ep, in[8].to_int_vector(), in[7].to_int_vector());
  const int64_t T = in[9].to_int_vector()[0];
  return {ops::index_add(Tensor::zeros({T, y.size(1)}, y.dtype()), 0, in[6], back)};
}

}  // namespace

int apply_expert_parallel(nn::Module& model, DeviceMesh& mesh, const ExpertParallelOptions& options) {
  auto* lm = dynamic_cast<nn::CausalLM*>(&model);
  LOOM_CHECK(lm != nullptr, ValueError, "expert parallelism splits an nn::CausalLM; got a ", model.type_name());
  const int n = mesh.size("ep"), r = mesh.group("ep").rank();
  const int64_t E = lm->config().num_experts;
  const std::vector<nn::MoELayer*> layers = lm->moe_layers();
  if (layers.empty()) return 0;
  LOOM_CHECK(E % n == 0, ShapeError, "expert parallelism: the number of routed experts (", E,
             ") must be divisible by expert_parallel (", n, ")");
  const bool deredundant = options.dispatcher == TokenDispatcher::alltoall_deredundancy;
  if (deredundant)
    LOOM_CHECK(options.ranks_per_node >= 1 && n % options.ranks_per_node == 0, ShapeError,
               "expert parallelism (alltoall_deredundancy): expert_parallel (", n,
               ") must be a multiple of npu_nums_per_device (", options.ranks_per_node, ")");
  const ExpertShard s{mesh.group_ptr("ep"), E, E / n, options.dispatcher, deredundant ? options.ranks_per_node : 1};
  for (nn::MoELayer* moe : layers) {
    shard_experts(moe->experts().weight1(), r * s.local, s.local);
    shard_experts(moe->experts().weight2(), r * s.local, s.local);
    nn::MoETokenDispatcher& d = moe->token_dispatcher();
    // Innermost wrappers: they replace the one-process bodies.
    d.add_operation_wrapper("dispatch", [s](const nn::TensorFn&, const std::vector<Tensor>& in) {
      return s.dispatcher == TokenDispatcher::alltoall ? dispatch(s, in) : dispatch_deredundant(s, in);
    });
    d.add_operation_wrapper("combine", [s](const nn::TensorFn&, const std::vector<Tensor>& in) {
      return s.dispatcher == TokenDispatcher::alltoall ? combine(s, in) : combine_deredundant(s, in);
    });
  }
  return static_cast<int>(layers.size());
}

}  // namespace loom::dist
