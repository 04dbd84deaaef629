#include "loom/dist/context_parallel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "loom/autograd/function.h"
#include "loom/autograd/grad_mode.h"
#include "loom/core/trace.h"
#include "loom/dist/functional.h"
#include "loom/kernels/kernel_table.h"
#include "loom/nn/attention.h"
#include "loom/nn/causal_lm.h"
#include "loom/nn/moe.h"
#include "loom/nn/router.h"
#include "loom/ops/attention.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/index.h"
#include "loom/ops/loss.h"
#include "loom/ops/shape.h"

namespace loom::dist {

namespace {

using Group = std::shared_ptr<ProcessGroup>;
using Grads = std::vector<Tensor>;

constexpr int kSeqDim = 1;  // inputs [B, S], activations [B, S, ...]
// One tag per kind of message, so a K block can never be taken for a V block or a gradient.
constexpr int kTagK = 11, kTagV = 12, kTagDK = 13, kTagDV = 14;

std::atomic<int64_t> g_blocks_computed{0}, g_blocks_skipped{0}, g_visible_pairs{0}, g_ring_bytes{0};

// Where every rank's tokens sit in the sequence, and the document ends: all a rank needs to
// know which keys of any block its queries see.
struct RingGeometry {
  int c = 1, r = 0;
  int64_t B = 0, S = 0;
  std::vector<std::vector<int64_t>> indices;  // per ring rank, ascending global sequence indices
  std::vector<int64_t> ends;                  // doc_ends, [B, K] row-major; empty: one document
  int64_t K = 0;

  RingGeometry(std::vector<std::vector<int64_t>> ring_indices, int rank, int64_t batch, const Tensor& doc_ends)
      : c(static_cast<int>(ring_indices.size())), r(rank), B(batch), indices(std::move(ring_indices)) {
    for (const auto& idx : indices) S += static_cast<int64_t>(idx.size());
    if (doc_ends.defined()) {
      LOOM_CHECK(doc_ends.dim() == 2 && doc_ends.size(0) == B && doc_ends.size(1) >= 1, ShapeError,
                 "context parallel attention: doc_ends ", doc_ends.shape().str(), " must be [batch, K] = [", B,
                 ", K>=1] of global document ends");
      ends = doc_ends.to_int_vector();
      K = doc_ends.size(1);
    }
  }

  // int64 [B, Sl, 2]: the rows of block j each local query sees (causal within its document).
  Tensor key_ranges(int j, int64_t& visible) const {
    const std::vector<int64_t>& q = indices[r];
    const std::vector<int64_t>& kv = indices[j];
    const int64_t Sl = static_cast<int64_t>(q.size());
    Tensor ranges = Tensor::empty({B, Sl, 2}, DType::i64);
    int64_t* out = ranges.data<int64_t>();
    visible = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t* e = K ? ends.data() + b * K : nullptr;
      for (int64_t i = 0; i < Sl; ++i) {
        const int64_t p = q[i];
        int64_t lo = 0, hi = p + 1;  // global indices [lo, hi)
        if (e) {
          if (p >= e[K - 1]) {
            hi = 0;
          } else {
            const int64_t d = std::upper_bound(e, e + K, p) - e;
            lo = d ? e[d - 1] : 0;
            hi = std::min(hi, e[d]);
          }
        }
        int64_t a = 0, z = 0;
        if (lo < hi) {
          a = std::lower_bound(kv.begin(), kv.end(), lo) - kv.begin();
          z = std::lower_bound(kv.begin(), kv.end(), hi) - kv.begin();
        }
        if (z <= a) a = z = 0;
        out[2 * (b * Sl + i)] = a;
        out[2 * (b * Sl + i) + 1] = z;
        visible += z - a;
      }
    }
    return ranges;
  }
};

kernels::AttentionMask ranges_mask(Tensor ranges) {
  kernels::AttentionMask m;
  m.causal = false;
  m.key_ranges = std::move(ranges);
  return m;
}

DType compute_dtype(DType d) { return d == DType::f64 ? DType::f64 : DType::f32; }

// The operand the kernels and the transport read: compute dtype, contiguous.
Tensor compute_operand(const Tensor& t) {
  const DType c = compute_dtype(t.dtype());
  return (t.dtype() == c ? t : t.to(c)).contiguous();
}

// The K/V block travelling the ring: this step's pair, and the transfers bringing the next.
struct KvRing {
  Group cp;
  int next = 0, prev = 0;
  Tensor k, v, next_k, next_v;
  std::vector<WorkHandle> pending;

  KvRing(Group group, Tensor k0, Tensor v0) : cp(std::move(group)), k(std::move(k0)), v(std::move(v0)) {
    const int c = cp->size(), r = cp->rank();
    next = (r + 1) % c;
    prev = (r + c - 1) % c;
  }
  // Issued before the step's compute, so the transfer runs behind it.
  void start_next() {
    next_k = Tensor::empty(k.shape(), k.dtype());
    next_v = Tensor::empty(v.shape(), v.dtype());
    pending = {cp->irecv(next_k, prev, kTagK), cp->irecv(next_v, prev, kTagV), cp->isend(k, next, kTagK),
               cp->isend(v, next, kTagV)};
  }
  void finish_next() {
    for (WorkHandle& w : pending) w->wait();
    pending.clear();
    k = next_k;
    v = next_v;
  }
};

}  // namespace

// ---- The split ---------------------------------------------------------------------------------

std::vector<int64_t> SequenceSplit::indices(int rank, int64_t S) const {
  LOOM_ASSERT(cp >= 1 && rank >= 0 && rank < cp, "SequenceSplit: rank ", rank, " of ", cp);
  const int64_t parts = load_balanced ? 2 * cp : cp;
  LOOM_CHECK(S % parts == 0, ShapeError, "context parallelism: the sequence length ", S, " must be divisible by ",
             load_balanced ? "2·context_parallel = " : "context_parallel = ", parts,
             load_balanced ? " (the load-balanced split cuts it into 2·context_parallel chunks; set "
                             "parallelism.context_parallel_load_balance: false for the contiguous split)"
                           : "");
  const int64_t n = S / parts;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(S / cp));
  auto chunk = [&](int64_t c) {
    for (int64_t i = c * n; i < (c + 1) * n; ++i) out.push_back(i);
  };
  chunk(rank);
  if (load_balanced) chunk(2 * cp - 1 - rank);
  return out;
}

Tensor SequenceSplit::local(const Tensor& x, int rank) const {
  LOOM_CHECK(x.defined() && x.dim() >= 2, ShapeError, "context parallelism splits [batch, seq, ...] inputs, got ",
             x.defined() ? x.shape().str() : std::string("an undefined tensor"));
  autograd::NoGradGuard no_grad;
  const int64_t S = x.size(kSeqDim);
  const std::vector<int64_t> idx = indices(rank, S);
  const int64_t n = load_balanced ? S / (2 * cp) : S / cp;
  if (!load_balanced) return x.narrow(kSeqDim, idx.front(), n).contiguous().clone();
  return ops::cat({x.narrow(kSeqDim, idx.front(), n), x.narrow(kSeqDim, idx[static_cast<size_t>(n)], n)}, kSeqDim)
      .contiguous();
}

RingWork ring_work() {
  return {g_blocks_computed.load(), g_blocks_skipped.load(), g_visible_pairs.load(), g_ring_bytes.load()};
}

void reset_ring_work() {
  g_blocks_computed = 0;
  g_blocks_skipped = 0;
  g_visible_pairs = 0;
  g_ring_bytes = 0;
}

// ---- Ring attention ----------------------------------------------------------------------------

namespace {

// The ring over `cp`, whose rank j holds the tokens ring_indices[j] (ascending global indices).
Tensor ring_over(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                 const std::vector<std::vector<int64_t>>& ring_indices, const Group& cp, Tensor* max_logits) {
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.size(1) == q.size(1) && v.size(1) == q.size(1),
             ShapeError, "ring attention: q ", q.shape().str(), ", k ", k.shape().str(), ", v ", v.shape().str(),
             " must be [batch, local seq, heads, dim] with one local sequence length");
  const RingGeometry geo(ring_indices, cp->rank(), q.size(0), doc_ends);
  const int c = geo.c;
  const kernels::KernelTable& kt = kernels::for_tensor(q, "ring attention");
  const Tensor qc = compute_operand(q);
  const DType compute = qc.dtype();
  const int64_t H = q.size(2);
  Tensor out = Tensor::zeros({q.size(0), q.size(1), H, v.size(3)}, compute);
  Tensor lse = Tensor::full({q.size(0), H, q.size(1)}, -std::numeric_limits<double>::infinity(), compute);
  std::vector<float> head_max(static_cast<size_t>(H), -INFINITY);

  const int64_t sent_before = cp->stats().bytes_sent;
  KvRing ring(cp, compute_operand(k), compute_operand(v));
  for (int s = 0; s < c; ++s) {
    const int j = (geo.r - s + c) % c;
    if (s + 1 < c) ring.start_next();
    int64_t visible = 0;
    Tensor ranges = geo.key_ranges(j, visible);
    if (visible > 0) {
      kernels::AttentionForwardResult res =
          kt.attention_forward(qc, ring.k, ring.v, scale, ranges_mask(ranges), max_logits != nullptr, {});
      kt.attention_merge(out, lse, res.out, res.lse);
      if (max_logits) {
        const std::vector<double> m = res.max_logits.to_double_vector();
        for (int64_t h = 0; h < H; ++h) head_max[h] = std::max(head_max[h], static_cast<float>(m[h]));
      }
      ++g_blocks_computed;
      g_visible_pairs += visible;
    } else {
      ++g_blocks_skipped;
    }
    if (s + 1 < c) ring.finish_next();
  }
  if (max_logits) *max_logits = Tensor::from_vector(head_max, {H}, DType::f32);
  g_ring_bytes += cp->stats().bytes_sent - sent_before;

  Tensor result = out.dtype() == q.dtype() ? out : out.to(q.dtype());
  autograd::record(
      "ring_attention", {&q, &k, &v}, {&result}, {q, k, v, out, lse, doc_ends},
      [scale, ring_indices, cp](const Grads& g, const autograd::BackwardContext& ctx) -> Grads {
        const Tensor q0 = ctx.saved(0), k0 = ctx.saved(1), v0 = ctx.saved(2);
        const Tensor o = ctx.saved(3), l = ctx.saved(4);
        const RingGeometry geo(ring_indices, cp->rank(), q0.size(0), ctx.saved(5));
        const int c = geo.c;
        const kernels::KernelTable& kt = kernels::for_tensor(g[0], "ring attention backward");
        const Tensor qc = compute_operand(q0);
        Tensor dq = Tensor::zeros(qc.shape(), qc.dtype());
        const int64_t sent_before = cp->stats().bytes_sent;
        KvRing ring(cp, compute_operand(k0), compute_operand(v0));
        // The running dK/dV of the block this rank holds; sends still in flight keep theirs alive.
        Tensor acc_k, acc_v;
        std::vector<WorkHandle> sends;
        auto recv_acc = [&](Tensor& dk, Tensor& dv) {
          dk = Tensor::empty(ring.k.shape(), ring.k.dtype());
          dv = Tensor::empty(ring.v.shape(), ring.v.dtype());
          return std::vector<WorkHandle>{cp->irecv(dk, ring.prev, kTagDK), cp->irecv(dv, ring.prev, kTagDV)};
        };
        for (int s = 0; s < c; ++s) {
          const int j = (geo.r - s + c) % c;
          if (s + 1 < c) ring.start_next();
          Tensor in_k, in_v;
          std::vector<WorkHandle> incoming;
          if (s > 0) incoming = recv_acc(in_k, in_v);  // block j's sum so far, from rank r-1
          int64_t visible = 0;
          Tensor ranges = geo.key_ranges(j, visible);
          Tensor part_k, part_v;
          if (visible > 0) {
            kernels::AttentionGrads gr =
                kt.attention_backward(g[0], qc, ring.k, ring.v, o, l, scale, ranges_mask(ranges), {});
            kt.add_(dq, gr.dq, 1.0);
            part_k = gr.dk;
            part_v = gr.dv;
          }
          for (WorkHandle& w : incoming) w->wait();
          if (s > 0) {
            acc_k = in_k;
            acc_v = in_v;
            if (part_k.defined()) {
              kt.add_(acc_k, part_k, 1.0);
              kt.add_(acc_v, part_v, 1.0);
            }
          } else {
            acc_k = part_k.defined() ? part_k : Tensor::zeros(ring.k.shape(), ring.k.dtype());
            acc_v = part_v.defined() ? part_v : Tensor::zeros(ring.v.shape(), ring.v.dtype());
          }
          // Forward the sum to rank r+1, which holds block j next; after the last step that is j.
          sends.push_back(cp->isend(acc_k, ring.next, kTagDK));
          sends.push_back(cp->isend(acc_v, ring.next, kTagDV));
          if (s + 1 < c) ring.finish_next();
        }
        Tensor dk, dv;
        for (WorkHandle& w : recv_acc(dk, dv)) w->wait();  // this rank's own block, complete
        for (WorkHandle& w : sends) w->wait();
        g_ring_bytes += cp->stats().bytes_sent - sent_before;
        auto back = [](const Tensor& grad, const Tensor& like) {
          return grad.dtype() == like.dtype() ? grad : grad.to(like.dtype());
        };
        return {ctx.needs_input_grad(0) ? back(dq, q0) : Tensor(), ctx.needs_input_grad(1) ? back(dk, k0) : Tensor(),
                ctx.needs_input_grad(2) ? back(dv, v0) : Tensor()};
      });
  return result;
}

}  // namespace

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                      const SequenceSplit& split, const Group& cp, Tensor* max_logits) {
  LOOM_TRACE("op", "ring_attention");
  LOOM_CHECK(cp != nullptr && cp->size() == split.cp, ValueError, "ring attention: the cp group (",
             cp ? cp->size() : 0, " ranks) does not match the split over ", split.cp);
  std::vector<std::vector<int64_t>> indices;
  for (int j = 0; j < split.cp; ++j) indices.push_back(split.indices(j, q.size(1) * split.cp));
  return ring_over(q, k, v, doc_ends, scale, indices, cp, max_logits);
}

// ---- Ulysses -----------------------------------------------------------------------------------

namespace {

// The order of the gathered sequence (rank 0's tokens, then rank 1's, ...) and its inverse: the
// gathered row of each global index. Null when the gathered order is the global one (contiguous).
struct GatherOrder {
  Tensor to_global;   // int64 [n]: the gathered row that comes i-th in ascending global order
  Tensor to_gathered; // int64 [n]: the ascending position of gathered row i
};

// `concat`: the global index of each gathered row. Undefined tensors when it is ascending already.
GatherOrder gather_order(const std::vector<int64_t>& concat) {
  if (std::is_sorted(concat.begin(), concat.end())) return {};
  std::vector<int64_t> by_index(concat.size());  // gathered rows sorted by their global index
  for (size_t i = 0; i < by_index.size(); ++i) by_index[i] = static_cast<int64_t>(i);
  std::sort(by_index.begin(), by_index.end(), [&](int64_t a, int64_t b) { return concat[a] < concat[b]; });
  std::vector<int64_t> rank_of(concat.size());  // sorted position of each gathered row
  for (size_t i = 0; i < by_index.size(); ++i) rank_of[static_cast<size_t>(by_index[i])] = static_cast<int64_t>(i);
  const int64_t n = static_cast<int64_t>(concat.size());
  return {Tensor::from_vector(by_index, {n}), Tensor::from_vector(rank_of, {n})};
}

// The tokens a group of cp ranks holds together, as it gathers them (member order).
std::vector<int64_t> gathered_indices(const SequenceSplit& split, const std::vector<int>& cp_ranks, int64_t S) {
  std::vector<int64_t> out;
  for (int r : cp_ranks) {
    const std::vector<int64_t> idx = split.indices(r, S);
    out.insert(out.end(), idx.begin(), idx.end());
  }
  return out;
}

// [B, Sl, X, W] sequence-sharded → [B, u·Sl, X/u, W] head-sharded, the group's tokens in
// ascending global order.
Tensor seq_to_heads(const Tensor& x, const Group& group, const GatherOrder& order) {
  const int u = group->size();
  const int64_t B = x.size(0), Sl = x.size(1), X = x.size(2), W = x.size(3);
  Tensor blocks = ops::contiguous(ops::permute(ops::reshape(x, {B, Sl, u, X / u, W}), {2, 0, 1, 3, 4}));
  const std::vector<int64_t> ones(static_cast<size_t>(u), 1);
  Tensor got = all_to_all_v(blocks, group, ones, ones);  // [u (source), B, Sl, X/u, W]
  Tensor seq = ops::reshape(ops::permute(got, {1, 0, 2, 3, 4}), {B, u * Sl, X / u, W});
  return order.to_global.defined() ? ops::index_select(seq, kSeqDim, order.to_global) : seq;
}

// The inverse: [B, u·Sl, X/u, W] in ascending order → [B, Sl, X, W] of this rank's tokens.
Tensor heads_to_seq(const Tensor& y, const Group& group, const GatherOrder& order) {
  const int u = group->size();
  const int64_t B = y.size(0), S = y.size(1), Xl = y.size(2), W = y.size(3), Sl = S / u;
  Tensor seq = order.to_gathered.defined() ? ops::index_select(y, kSeqDim, order.to_gathered) : y;
  Tensor blocks = ops::contiguous(ops::permute(ops::reshape(seq, {B, u, Sl, Xl, W}), {1, 0, 2, 3, 4}));
  const std::vector<int64_t> ones(static_cast<size_t>(u), 1);
  Tensor got = all_to_all_v(blocks, group, ones, ones);  // [u (head chunk), B, Sl, X/u, W]
  return ops::reshape(ops::permute(got, {1, 2, 0, 3, 4}), {B, Sl, u * Xl, W});
}

}  // namespace

namespace {

// Ulysses inside `row` (the cp ranks row_ranks, in the row's rank order); then, with `column`, the
// ring across the rows (ring rank b holds the tokens of row b, column_indices[b]), else one
// attention call over the whole sequence.
Tensor ulysses_over(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                    const SequenceSplit& split, const Group& row, const std::vector<int>& row_ranks,
                    const Group& column, const std::vector<std::vector<int64_t>>& column_indices,
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
  const GatherOrder order = gather_order(gathered_indices(split, row_ranks, q.size(1) * split.cp));
  const Tensor qh = seq_to_heads(q, row, order), kh = seq_to_heads(kk, row, order), vh = seq_to_heads(vv, row, order);
  Tensor local_max, o;
  if (column) {
    o = ring_over(qh, kh, vh, doc_ends, scale, column_indices, column, max_logits ? &local_max : nullptr);
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
  return heads_to_seq(o, row, order);
}

}  // namespace

Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                         const SequenceSplit& split, const Group& cp, Tensor* max_logits) {
  LOOM_TRACE("op", "ulysses_attention");
  std::vector<int> all(static_cast<size_t>(cp->size()));
  for (int r = 0; r < cp->size(); ++r) all[static_cast<size_t>(r)] = r;
  return ulysses_over(q, k, v, doc_ends, scale, split, cp, all, nullptr, {}, max_logits);
}

Tensor hybrid_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                        const SequenceSplit& split, const Group& ulysses, const Group& ring, Tensor* max_logits) {
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
  std::vector<std::vector<int64_t>> column_indices;
  for (int b = 0; b < rows; ++b) {
    std::vector<int64_t> idx = gathered_indices(split, row_of(b), S);
    std::sort(idx.begin(), idx.end());
    column_indices.push_back(std::move(idx));
  }
  return ulysses_over(q, k, v, doc_ends, scale, split, ulysses, row_of(ring->rank()), ring, column_indices, max_logits);
}

// ---- Attaching to a model ----------------------------------------------------------------------

void apply_context_parallel(nn::Module& model, DeviceMesh& mesh, const ContextParallelOptions& options) {
  auto* lm = dynamic_cast<nn::CausalLM*>(&model);
  LOOM_CHECK(lm != nullptr, ValueError, "context parallelism splits an nn::CausalLM; got a ", model.type_name());
  const nn::TransformerConfig& config = lm->config();
  LOOM_CHECK(config.mtp_num_layers == 0, ConfigError, "context parallelism does not train multi-token prediction "
             "yet (its shifted inputs cross the cp ranks' boundaries); set model.mtp_num_layers: 0 or "
             "parallelism.context_parallel: 1");
  const Group cp = mesh.group_ptr("cp");
  const SequenceSplit split{cp->size(), options.load_balanced};
  const int rank = cp->rank();
  const int tp = mesh.size("tp");

  // Inputs: this rank's tokens of the ids, and of the positions (explicit: RoPE needs global ones).
  lm->embedding().add_forward_wrapper([split, rank](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
    return inner({split.local(in[0], rank)});
  });
  lm->decoder().add_forward_wrapper([split, rank, tp](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
    Tensor positions = in[1];
    if (positions.defined()) {
      positions = split.local(positions, rank);
    } else {
      // The hidden states are this rank's S/c tokens, split once more over tp by sequence parallelism.
      const int64_t B = in[0].size(0), S = in[0].size(kSeqDim) * tp * split.cp;
      const std::vector<int64_t> idx = split.indices(rank, S);
      std::vector<int64_t> rows;
      rows.reserve(static_cast<size_t>(B) * idx.size());
      for (int64_t b = 0; b < B; ++b) rows.insert(rows.end(), idx.begin(), idx.end());
      positions = Tensor::from_vector(rows, {B, static_cast<int64_t>(idx.size())}, DType::i64);
    }
    return inner({in[0], positions, in[2]});
  });

  // Hybrid: rows of u adjacent cp ranks run Ulysses, the columns (stride u) the ring.
  Group row, column;
  if (options.method == ContextParallelMethod::hybrid) {
    const int u = options.ulysses_degree, c = cp->size();
    LOOM_CHECK(u > 1 && u < c && c % u == 0, ConfigError, "hybrid context parallelism needs 1 < ulysses degree (", u,
               ") < context_parallel (", c, ") dividing it");
    std::vector<int> row_members, column_members;
    for (int a = 0; a < u; ++a) row_members.push_back(rank / u * u + a);
    for (int b = 0; b < c / u; ++b) column_members.push_back(b * u + rank % u);
    row = Group(cp->split("cp_ulysses", row_members));
    column = Group(cp->split("cp_ring", column_members));
  }

  // Core attention: the ring, Ulysses or both, with the module's scale; its QK-clip maxima are
  // this rank's.
  for (nn::AttentionLayer* layer : lm->attention_layers()) {
    nn::CoreAttention* core = &layer->core_attention();
    LOOM_CHECK(core->options().causal, ConfigError, "context parallelism needs causal attention");
    core->add_forward_wrapper([core, split, cp, row, column, method = options.method](
                                  const nn::TensorFn&, const std::vector<Tensor>& in) {
      const double set = core->options().softmax_scale;
      const double scale = set != 0 ? set : 1.0 / std::sqrt(static_cast<double>(in[0].size(3)));
      Tensor step_max;
      Tensor* track = core->tracking_max_logits() ? &step_max : nullptr;
      Tensor o;
      if (method == ContextParallelMethod::ulysses) o = ulysses_attention(in[0], in[1], in[2], in[3], scale, split, cp, track);
      else if (method == ContextParallelMethod::hybrid)
        o = hybrid_attention(in[0], in[1], in[2], in[3], scale, split, row, column, track);
      else o = ring_attention(in[0], in[1], in[2], in[3], scale, split, cp, track);
      core->fold_max_logits(step_max);
      return std::vector<Tensor>{o};
    });
  }

  // Loss: this rank's share of the one-process token mean, summed over cp (replicated from here).
  lm->set_head_loss([inner = lm->head_loss(), split, rank, cp, vocab = config.vocab_size](
                        const Tensor& hidden, const Tensor& weight, const Tensor& labels, const Tensor& loss_mask,
                        bool grads_in_forward) {
    const Tensor local_labels = split.local(labels, rank);
    const Tensor local_mask = loss_mask.defined() ? split.local(loss_mask, rank) : Tensor();
    const Tensor mean = inner(hidden, weight, local_labels, local_mask, grads_in_forward);
    const double mine = ops::loss_token_count(local_labels, local_mask, vocab);
    const double all = cp->all_reduce_scalar(mine);
    return all_reduce(ops::scale(mean, (mine + ops::kLossMaskEpsilon) / (all + ops::kLossMaskEpsilon)), cp);
  });

  // MoE balance statistics over the whole sequence (after tp's sum, when TP wrapped them first).
  for (nn::MoELayer* moe : lm->moe_layers())
    moe->router().add_operation_wrapper("reduce_statistics",
                                        [cp](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
                                          std::vector<Tensor> out = inner(in);
                                          for (Tensor& t : out)
                                            if (t.defined()) t = all_reduce(t, cp);
                                          return out;
                                        });
}

}  // namespace loom::dist
