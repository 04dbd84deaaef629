#include "loom/dist/expert_parallel.h"

#include <numeric>

#include "loom/autograd/grad_mode.h"
#include "loom/dist/functional.h"
#include "loom/nn/causal_lm.h"
#include "loom/ops/moe.h"

namespace loom::dist {

namespace {

using Group = std::shared_ptr<ProcessGroup>;

// This rank's share of one MoE layer's routed experts.
struct ExpertShard {
  Group ep;
  int64_t experts = 0;  // E, every routed expert
  int64_t local = 0;    // L = E/ep, the experts this rank computes
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

// {x [T, hidden], indices [T, K], weights [T, K]} → {tokens [R, hidden] grouped by local expert,
// tokens_per_expert [L], state: row_map [T, K], weights, local_row_map [R, 1], rows sent [n],
// rows received [n]}.
std::vector<Tensor> dispatch(const ExpertShard& s, const std::vector<Tensor>& in) {
  const int n = s.ep->size();
  const size_t L = static_cast<size_t>(s.local);
  ops::MoePermutation perm = ops::moe_permute(in[0], in[1], s.experts);
  const std::vector<int64_t> counts = perm.tokens_per_expert.to_int_vector();

  // How many rows of each of my experts every peer sends: L counts to and from each peer.
  Tensor counts_in = Tensor::empty({s.experts}, DType::i64);
  s.ep->all_to_all_v(perm.tokens_per_expert.contiguous(), std::vector<int64_t>(n, s.local), counts_in,
                     std::vector<int64_t>(n, s.local));
  const std::vector<int64_t> received_counts = counts_in.to_int_vector();  // [peer][local expert]

  std::vector<int64_t> send_rows(n), recv_rows(n);
  for (int p = 0; p < n; ++p) {
    send_rows[p] = sum(counts, p * L, L);
    recv_rows[p] = sum(received_counts, p * L, L);
  }
  Tensor received = all_to_all_v(perm.permuted, s.ep, send_rows, recv_rows);

  // Received rows come by peer, then by expert: regroup them by local expert for the GEMM.
  std::vector<int64_t> local_ids;
  local_ids.reserve(static_cast<size_t>(received.size(0)));
  for (int p = 0; p < n; ++p)
    for (size_t e = 0; e < L; ++e) local_ids.insert(local_ids.end(), received_counts[p * L + e], static_cast<int64_t>(e));
  ops::MoePermutation grouped = ops::moe_permute(
      received, Tensor::from_vector(local_ids, {static_cast<int64_t>(local_ids.size()), 1}), s.local);
  return {grouped.permuted,
          grouped.tokens_per_expert,
          perm.row_map,
          in[2],
          grouped.row_map,
          Tensor::from_vector(send_rows, {n}),
          Tensor::from_vector(recv_rows, {n})};
}

// {expert_output [R, hidden], row_map, weights, local_row_map, rows sent, rows received} → {y [T, hidden]}.
std::vector<Tensor> combine(const ExpertShard& s, const std::vector<Tensor>& in) {
  LOOM_CHECK(in.size() == 6, ValueError, "expert parallelism: 'combine' got ", in.size() - 1,
             " state tensors; it needs the 5 its 'dispatch' returned");
  const std::vector<int64_t> sent = in[4].to_int_vector(), received = in[5].to_int_vector();
  Tensor by_peer = ops::moe_unpermute(in[0], in[3]);             // back to (peer, expert, token) order
  Tensor returned = all_to_all_v(by_peer, s.ep, received, sent);  // the rows of my tokens' copies
  return {ops::moe_unpermute(returned, in[1], in[2])};
}

}  // namespace

int apply_expert_parallel(nn::Module& model, DeviceMesh& mesh) {
  auto* lm = dynamic_cast<nn::CausalLM*>(&model);
  LOOM_CHECK(lm != nullptr, ValueError, "expert parallelism splits an nn::CausalLM; got a ", model.type_name());
  const int n = mesh.size("ep"), r = mesh.group("ep").rank();
  const int64_t E = lm->config().num_experts;
  const std::vector<nn::MoELayer*> layers = lm->moe_layers();
  if (layers.empty()) return 0;
  LOOM_CHECK(E % n == 0, ShapeError, "expert parallelism: the number of routed experts (", E,
             ") must be divisible by expert_parallel (", n, ")");
  ExpertShard s{mesh.group_ptr("ep"), E, E / n};
  for (nn::MoELayer* moe : layers) {
    shard_experts(moe->experts().weight1(), r * s.local, s.local);
    shard_experts(moe->experts().weight2(), r * s.local, s.local);
    nn::MoETokenDispatcher& d = moe->token_dispatcher();
    // Innermost wrappers: they replace the one-process bodies.
    d.add_operation_wrapper("dispatch", [s](const nn::TensorFn&, const std::vector<Tensor>& in) { return dispatch(s, in); });
    d.add_operation_wrapper("combine", [s](const nn::TensorFn&, const std::vector<Tensor>& in) { return combine(s, in); });
  }
  return static_cast<int>(layers.size());
}

}  // namespace loom::dist
