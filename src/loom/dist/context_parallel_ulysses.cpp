// Ulysses and hybrid context parallelism (dist/context_parallel.h explains both): the all-to-alls
// between sequence-sharded and head-sharded q, k, v and output, blocking or posted ahead
// (context_parallel_async), around one attention call or, for hybrid, the ring.
#include <algorithm>
#include <cmath>

#include "loom/autograd/checkpoint.h"
#include "loom/autograd/function.h"
#include "loom/autograd/grad_mode.h"
#include "loom/core/trace.h"
#include "loom/dist/context_parallel.h"
#include "loom/dist/context_parallel_internal.h"
#include "loom/ops/attention.h"
#include "loom/ops/shape.h"

namespace loom::dist {

namespace {
using Group = std::shared_ptr<ProcessGroup>;
using Grads = std::vector<Tensor>;
}  // namespace

// ---- Ulysses -----------------------------------------------------------------------------------

namespace {

// The order of the gathered sequence (rank 0's tokens, then rank 1's, ...) and its inverse, per
// sample: the gathered row that comes i-th in ascending global order, and the ascending position
// of each gathered row. Empty when the gathered order is the global one (contiguous split).
struct GatherOrder {
  std::vector<std::vector<int64_t>> to_global, to_gathered;
};

// `concat[b]`: the global index of each gathered row of sample b.
GatherOrder gather_order(const std::vector<std::vector<int64_t>>& concat) {
  if (std::all_of(concat.begin(), concat.end(), [](const auto& c) { return std::is_sorted(c.begin(), c.end()); }))
    return {};
  GatherOrder order;
  for (const std::vector<int64_t>& c : concat) {
    std::vector<int64_t> by_index(c.size());  // gathered rows sorted by their global index
    for (size_t i = 0; i < by_index.size(); ++i) by_index[i] = static_cast<int64_t>(i);
    std::sort(by_index.begin(), by_index.end(), [&](int64_t a, int64_t b) { return c[a] < c[b]; });
    std::vector<int64_t> rank_of(c.size());  // sorted position of each gathered row
    for (size_t i = 0; i < by_index.size(); ++i) rank_of[static_cast<size_t>(by_index[i])] = static_cast<int64_t>(i);
    order.to_global.push_back(std::move(by_index));
    order.to_gathered.push_back(std::move(rank_of));
  }
  return order;
}

// The tokens a group of cp ranks holds together, as it gathers them (member order), per sample.
std::vector<std::vector<int64_t>> gathered_indices(const SequenceSplit::Layout& layout, const std::vector<int>& cp_ranks) {
  std::vector<std::vector<int64_t>> out(layout.front().size());
  for (int r : cp_ranks)
    for (size_t b = 0; b < out.size(); ++b)
      out[b].insert(out[b].end(), layout[static_cast<size_t>(r)][b].begin(), layout[static_cast<size_t>(r)][b].end());
  return out;
}

// The two directions of the Ulysses exchange, each as pack (into the all-to-all's [u, ...]
// blocks, contiguous), the all-to-all, and unpack. No history: exchange() below records one node.
//   to_heads  [B, Sl, X, W] sequence-sharded → [B, u·Sl, X/u, W] head-sharded, the group's
//             tokens in ascending global order
//   to_seq    the inverse
struct Direction {
  bool to_heads = true;
};

Tensor pack(const Tensor& x, int u, const GatherOrder& order, Direction d) {
  const int64_t B = x.size(0), n = x.size(1), X = x.size(2), W = x.size(3);
  if (d.to_heads) return ops::contiguous(ops::permute(ops::reshape(x, {B, n, u, X / u, W}), {2, 0, 1, 3, 4}));
  const Tensor seq = order.to_gathered.empty() ? x : detail::gather_rows(x, order.to_gathered, n);
  return ops::contiguous(ops::permute(ops::reshape(seq, {B, u, n / u, X, W}), {1, 0, 2, 3, 4}));
}

// got [u, B, n', X', W] as the all-to-all delivered it.
Tensor unpack(const Tensor& got, const GatherOrder& order, Direction d) {
  const int64_t u = got.size(0), B = got.size(1), n = got.size(2), X = got.size(3), W = got.size(4);
  if (!d.to_heads) return ops::reshape(ops::permute(got, {1, 2, 0, 3, 4}), {B, n, u * X, W});  // head chunk
  const Tensor seq = ops::reshape(ops::permute(got, {1, 0, 2, 3, 4}), {B, u * n, X, W});       // source rank
  return order.to_global.empty() ? seq : detail::gather_rows(seq, order.to_global, u * n);
}

// Exchanges every tensor of xs in direction d. Blocking: pack, all-to-all, unpack, one tensor
// after the other. Async (context_parallel_async): every all-to-all is posted as soon as its
// tensor is packed and waited on only when its result is unpacked, so the comm thread moves
// tensor i while this thread packs tensor i+1 and unpacks tensor i-1. The same copies in the same
// order: the results are identical.
std::vector<Tensor> exchange_raw(const std::vector<Tensor>& xs, const Group& group, const GatherOrder& order,
                                 Direction d, bool async) {
  autograd::NoGradGuard no_grad;
  const int u = group->size();
  const int64_t sent_before = group->stats().bytes_sent;
  std::vector<Tensor> got(xs.size()), out(xs.size());
  std::vector<WorkHandle> pending(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor blocks = pack(xs[i], u, order, d);
    got[i] = Tensor::empty(blocks.shape(), blocks.dtype());
    // One [B, n, X', W] block (of numel / u elements) to and from every peer.
    const std::vector<int64_t> block(static_cast<size_t>(u), blocks.numel() / u);
    if (async) {
      pending[i] = group->iall_to_all_v(blocks, block, got[i], block);
    } else {
      group->all_to_all_v(blocks, block, got[i], block);
      out[i] = unpack(got[i], order, d);
    }
  }
  if (async)
    for (size_t i = 0; i < xs.size(); ++i) {
      pending[i]->wait();
      out[i] = unpack(got[i], order, d);
    }
  detail::count_all_to_all_bytes(group->stats().bytes_sent - sent_before);
  return out;
}

// The differentiable exchange: its backward exchanges the grads the other way (sum-over-ranks
// loss, as dist::all_to_all_v), with the same async choice.
std::vector<Tensor> recorded_exchange(const std::vector<Tensor>& xs, const Group& group, const GatherOrder& order,
                                      Direction d, bool async) {
  std::vector<Tensor> out = exchange_raw(xs, group, order, d, async);
  std::vector<const Tensor*> inputs;
  std::vector<Tensor*> outputs;
  std::vector<std::pair<std::vector<int64_t>, DType>> like;  // each output's shape and dtype
  for (const Tensor& x : xs) inputs.push_back(&x);
  for (Tensor& o : out) {
    outputs.push_back(&o);
    like.emplace_back(o.shape().to_vector(), o.dtype());
  }
  autograd::record("UlyssesAllToAll", inputs, outputs, {},
                   [group, order, d, async, like](const Grads& g, const autograd::BackwardContext&) -> Grads {
                     std::vector<Tensor> grads;
                     for (size_t i = 0; i < like.size(); ++i)
                       grads.push_back(g[i].defined() ? g[i].contiguous()
                                                      : Tensor::zeros(Shape(like[i].first), like[i].second));
                     return exchange_raw(grads, group, order, Direction{!d.to_heads}, async);
                   });
  return out;
}

std::vector<Tensor> exchange(const std::vector<Tensor>& xs, const Group& group, const GatherOrder& order, Direction d,
                             bool async) {
  // MindSpore's AllToAll: recompute.exclude_op 'AllToAll' keeps it in a recomputed layer.
  return autograd::reuse_in_recompute("UlyssesAllToAll", [&] { return recorded_exchange(xs, group, order, d, async); });
}

}  // namespace

namespace {

// Ulysses inside `row` (the cp ranks row_ranks, in the row's rank order); then, with `column`, the
// ring across the rows (ring rank b holds the tokens of row b, column_indices[b]), else one
// attention call over the whole sequence.
Tensor ulysses_over(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                    const SequenceSplit::Layout& layout, const Group& row, const std::vector<int>& row_ranks,
                    const Group& column, const SequenceSplit::Layout& column_indices, bool async,
                    Tensor* max_logits) {
  const int u = row->size();
  const int64_t H = q.size(2), G = k.size(2);
  LOOM_CHECK(H % u == 0, ShapeError, "ulysses: the attention heads of this rank (", H,
             ") must be divisible by the ulysses degree (", u, "): the all-to-all splits them");
  LOOM_CHECK(G % u == 0 || u % G == 0, ShapeError, "ulysses: the KV heads of this rank (", G,
             ") and the ulysses degree (", u, ") must divide one another");
  Tensor kk = k, vv = v;
  if (G < u) {
    // Each KV head repeated u/G times, so rank i's KV head, ⌊i·G/u⌋, is the one its query heads
    // use; the expand's backward sums the copies' grads.
    auto repeat = [&](const Tensor& t) {
      const int64_t B = t.size(0), Sl = t.size(1), W = t.size(3);
      return ops::reshape(ops::expand(ops::unsqueeze(t, 3), {B, Sl, G, u / G, W}), {B, Sl, static_cast<int64_t>(u), W});
    };
    kk = repeat(k);
    vv = repeat(v);
  }
  const GatherOrder order = gather_order(gathered_indices(layout, row_ranks));
  const std::vector<Tensor> heads = exchange({q, kk, vv}, row, order, Direction{true}, async);
  const Tensor &qh = heads[0], &kh = heads[1], &vh = heads[2];
  Tensor local_max, o;
  if (column) {
    o = detail::ring_over(qh, kh, vh, doc_ends, scale, column_indices, column, max_logits ? &local_max : nullptr);
  } else {
    ops::AttentionOptions opt;
    opt.softmax_scale = scale;
    opt.causal = true;
    opt.doc_ends = doc_ends;
    opt.track_max_logits = max_logits != nullptr;
    o = ops::attention(qh, kh, vh, opt, max_logits ? &local_max : nullptr);
  }
  if (max_logits) {
    // This rank's H/u heads; the others' maxima are -inf here (the step's max over ranks fills them).
    std::vector<float> all(static_cast<size_t>(H), -INFINITY);
    const std::vector<double> mine = local_max.to_double_vector();
    for (size_t h = 0; h < mine.size(); ++h)
      all[static_cast<size_t>(row->rank()) * mine.size() + h] = static_cast<float>(mine[h]);
    *max_logits = Tensor::from_vector(all, {H}, DType::f32);
  }
  return exchange({o}, row, order, Direction{false}, async)[0];
}

}  // namespace

Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                         const SequenceSplit& split, const Group& cp, Tensor* max_logits, bool async) {
  LOOM_TRACE("op", "ulysses_attention");
  std::vector<int> all(static_cast<size_t>(cp->size()));
  for (int r = 0; r < cp->size(); ++r) all[static_cast<size_t>(r)] = r;
  return ulysses_over(q, k, v, doc_ends, scale, split.layout(q.size(0), q.size(1) * split.cp, doc_ends), cp, all,
                      nullptr, {}, async, max_logits);
}

Tensor hybrid_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                        const SequenceSplit& split, const Group& ulysses, const Group& ring, Tensor* max_logits,
                        bool async) {
  LOOM_TRACE("op", "hybrid_attention");
  const int u = ulysses->size(), rows = ring->size();
  LOOM_CHECK(u * rows == split.cp, ValueError, "hybrid attention: ulysses groups of ", u, " times ring groups of ",
             rows, " must make the cp group of ", split.cp);
  const int64_t S = q.size(1) * split.cp;
  auto row_of = [u](int b) {
    std::vector<int> members(static_cast<size_t>(u));
    for (int a = 0; a < u; ++a) members[static_cast<size_t>(a)] = b * u + a;
    return members;
  };
  const SequenceSplit::Layout layout = split.layout(q.size(0), S, doc_ends);
  SequenceSplit::Layout column_indices;  // [row][sample]: the row's tokens, ascending
  for (int b = 0; b < rows; ++b) {
    std::vector<std::vector<int64_t>> idx = gathered_indices(layout, row_of(b));
    for (std::vector<int64_t>& sample : idx) std::sort(sample.begin(), sample.end());
    column_indices.push_back(std::move(idx));
  }
  return ulysses_over(q, k, v, doc_ends, scale, layout, ulysses, row_of(ring->rank()), ring, column_indices, async,
                      max_logits);
}

}  // namespace loom::dist
