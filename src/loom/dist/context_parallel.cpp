#include "loom/dist/context_parallel.h"
#include "loom/dist/context_parallel_internal.h"

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

std::atomic<int64_t> g_blocks_computed{0}, g_blocks_skipped{0}, g_visible_pairs{0}, g_ring_bytes{0},
    g_all_to_all_bytes{0};

// Where every rank's tokens sit in the sequence, and the document ends: all a rank needs to
// know which keys of any block its queries see.
struct RingGeometry {
  int c = 1, r = 0;
  int64_t B = 0, S = 0;
  SequenceSplit::Layout indices;  // [ring rank][sample]: ascending global sequence indices
  std::vector<int64_t> ends;      // doc_ends, [B, K] row-major; empty: one document
  int64_t K = 0;

  RingGeometry(SequenceSplit::Layout ring_indices, int rank, int64_t batch, const Tensor& doc_ends)
      : c(static_cast<int>(ring_indices.size())), r(rank), B(batch), indices(std::move(ring_indices)) {
    for (const auto& idx : indices) S += static_cast<int64_t>(idx.front().size());
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
    const int64_t Sl = static_cast<int64_t>(indices[r].front().size());
    Tensor ranges = Tensor::empty({B, Sl, 2}, DType::i64);
    int64_t* out = ranges.data<int64_t>();
    visible = 0;
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<int64_t>& q = indices[r][b];
      const std::vector<int64_t>& kv = indices[j][b];
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

namespace detail {

// x [B, n, ...] → [B, m, ...]: the rows rows[b] (m of them) of each sample b. Differentiable in x.
Tensor gather_rows(const Tensor& x, const std::vector<std::vector<int64_t>>& rows, int64_t n) {
  const int64_t B = x.size(0), m = static_cast<int64_t>(rows.front().size());
  LOOM_ASSERT(static_cast<int64_t>(rows.size()) == B && x.size(kSeqDim) == n, "gather_rows: ", rows.size(),
              " samples of ", n, " rows for ", x.shape().str());
  std::vector<int64_t> flat;
  flat.reserve(static_cast<size_t>(B * m));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i : rows[static_cast<size_t>(b)]) flat.push_back(b * n + i);
  std::vector<int64_t> merged = x.shape().to_vector(), out;
  out = merged;
  merged.erase(merged.begin());
  merged[0] = B * n;
  out[kSeqDim] = m;
  const Tensor picked = ops::index_select(ops::reshape(x, Shape(merged)), 0, Tensor::from_vector(flat, {B * m}));
  return ops::reshape(picked, Shape(out));
}

}  // namespace detail

// ---- The split ---------------------------------------------------------------------------------

std::vector<std::vector<int64_t>> SequenceSplit::sample_indices(int64_t S, std::span<const int64_t> doc_ends) const {
  LOOM_ASSERT(cp >= 1, "SequenceSplit over ", cp, " ranks");
  const int64_t parts = load_balanced ? 2 * cp : cp;
  LOOM_CHECK(S % parts == 0, ShapeError, "context parallelism: the sequence length ", S, " must be divisible by ",
             load_balanced ? "2·context_parallel = " : "context_parallel = ", parts,
             load_balanced ? " (the load-balanced split cuts it into 2·context_parallel chunks; set "
                             "parallelism.context_parallel_load_balance: false for the contiguous split)"
                           : "");
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(cp));
  for (auto& o : out) o.reserve(static_cast<size_t>(S / cp));
  // Cuts [start, end) into `parts` pieces of ⌊L/parts⌋ or one more; piece p goes to rank p
  // (contiguous) or to min(p, parts-1-p) (load-balanced). The +1 pieces are dealt round-robin
  // over the piece slots, continuing from document to document: a sample's remainders add up to
  // S - parts·Σ⌊L/parts⌋, a multiple of parts, so every slot gets as many, and every rank S/c.
  int64_t start = 0, dealt = 0;  // dealt: +1 pieces handed out so far, mod parts
  auto cut = [&](int64_t end) {
    const int64_t L = end - start, base = L / parts, rem = L % parts;
    int64_t at = start;
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t len = base + ((p - dealt + parts) % parts < rem ? 1 : 0);
      const int64_t owner = p < cp ? p : parts - 1 - p;
      for (int64_t i = at; i < at + len; ++i) out[static_cast<size_t>(owner)].push_back(i);
      at += len;
    }
    dealt = (dealt + rem) % parts;
    start = end;
  };
  if (load_balanced && per_document)
    for (int64_t e : doc_ends)
      if (e > start) cut(std::min(e, S));
  if (start < S) cut(S);
  for (const auto& o : out)
    LOOM_ASSERT(static_cast<int64_t>(o.size()) == S / cp, "SequenceSplit: a rank got ", o.size(), " of ", S,
                " tokens, not ", S / cp);
  return out;
}

std::vector<int64_t> SequenceSplit::indices(int rank, int64_t S, std::span<const int64_t> doc_ends) const {
  LOOM_ASSERT(rank >= 0 && rank < cp, "SequenceSplit: rank ", rank, " of ", cp);
  return sample_indices(S, doc_ends)[static_cast<size_t>(rank)];
}

SequenceSplit::Layout SequenceSplit::layout(int64_t B, int64_t S, const Tensor& doc_ends) const {
  Layout by_rank(static_cast<size_t>(cp), std::vector<std::vector<int64_t>>(static_cast<size_t>(B)));
  std::vector<int64_t> ends;
  int64_t K = 0;
  if (doc_ends.defined()) {
    LOOM_CHECK(doc_ends.dim() == 2 && doc_ends.size(0) == B, ShapeError, "context parallelism: doc_ends ",
               doc_ends.shape().str(), " must be [batch, K] = [", B, ", K] of global document ends");
    ends = doc_ends.to_int_vector();
    K = doc_ends.size(1);
  }
  for (int64_t b = 0; b < B; ++b) {
    std::vector<std::vector<int64_t>> ranks = sample_indices(S, std::span<const int64_t>(ends.data() + b * K, K));
    for (int r = 0; r < cp; ++r) by_rank[static_cast<size_t>(r)][static_cast<size_t>(b)] = std::move(ranks[static_cast<size_t>(r)]);
  }
  return by_rank;
}

Tensor SequenceSplit::local(const Tensor& x, int rank, const Tensor& doc_ends) const {
  LOOM_CHECK(x.defined() && x.dim() >= 2, ShapeError, "context parallelism splits [batch, seq, ...] inputs, got ",
             x.defined() ? x.shape().str() : std::string("an undefined tensor"));
  LOOM_ASSERT(rank >= 0 && rank < cp, "SequenceSplit: rank ", rank, " of ", cp);
  autograd::NoGradGuard no_grad;
  const int64_t B = x.size(0), S = x.size(kSeqDim);
  return detail::gather_rows(x, layout(B, S, doc_ends)[static_cast<size_t>(rank)], S);
}

RingWork ring_work() {
  return {g_blocks_computed.load(), g_blocks_skipped.load(), g_visible_pairs.load(), g_ring_bytes.load(),
          g_all_to_all_bytes.load()};
}

void detail::count_all_to_all_bytes(int64_t bytes) { g_all_to_all_bytes += bytes; }

void reset_ring_work() {
  g_blocks_computed = 0;
  g_blocks_skipped = 0;
  g_visible_pairs = 0;
  g_ring_bytes = 0;
  g_all_to_all_bytes = 0;
}

// ---- Ring attention ----------------------------------------------------------------------------

namespace detail {

// The ring over `cp`, whose rank j holds the tokens ring_indices[j] (ascending global indices).
Tensor ring_over(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                 const SequenceSplit::Layout& ring_indices, const Group& cp, Tensor* max_logits) {
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

}  // namespace detail

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                      const SequenceSplit& split, const Group& cp, Tensor* max_logits) {
  LOOM_TRACE("op", "ring_attention");
  LOOM_CHECK(cp != nullptr && cp->size() == split.cp, ValueError, "ring attention: the cp group (",
             cp ? cp->size() : 0, " ranks) does not match the split over ", split.cp);
  return detail::ring_over(q, k, v, doc_ends, scale, split.layout(q.size(0), q.size(1) * split.cp, doc_ends), cp, max_logits);
}

// ---- Attaching to a model ----------------------------------------------------------------------

void apply_context_parallel(nn::Module& model, DeviceMesh& mesh, const ContextParallelOptions& options) {
  auto* lm = dynamic_cast<nn::CausalLM*>(&model);
  LOOM_CHECK(lm != nullptr, ValueError, "context parallelism splits an nn::CausalLM; got a ", model.type_name());
  const nn::TransformerConfig& config = lm->config();
  const Group cp = mesh.group_ptr("cp");
  const SequenceSplit split{cp->size(), options.load_balanced, options.per_document};
  const int rank = cp->rank();
  const int tp = mesh.size("tp");

  // Inputs: this rank's tokens of the ids, and of the positions (explicit: RoPE needs global ones).
  lm->embedding().add_forward_wrapper([split, rank](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
    return inner({split.local(in[0], rank, in[1]), in[1]});
  });
  // hidden: this rank's S/c tokens, split once more over tp by sequence parallelism.
  auto local_positions = [split, rank, tp](const Tensor& hidden, const Tensor& positions, const Tensor& doc_ends) {
    if (positions.defined()) return split.local(positions, rank, doc_ends);
    const int64_t B = hidden.size(0), S = hidden.size(kSeqDim) * tp * split.cp;
    const std::vector<std::vector<int64_t>> idx = split.layout(B, S, doc_ends)[static_cast<size_t>(rank)];
    std::vector<int64_t> rows;
    rows.reserve(static_cast<size_t>(B * S / split.cp));
    for (const std::vector<int64_t>& sample : idx) rows.insert(rows.end(), sample.begin(), sample.end());
    return Tensor::from_vector(rows, {B, S / split.cp}, DType::i64);
  };
  lm->decoder().add_forward_wrapper([local_positions](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
    return inner({in[0], local_positions(in[0], in[1], in[2]), in[2]});
  });
  for (nn::MTPLayer* mtp : lm->mtp_layers())  // (hidden, shifted embeds, positions, doc_ends)
    mtp->add_forward_wrapper([local_positions](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
      return inner({in[0], in[1], local_positions(in[0], in[2], in[3]), in[3]});
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
    row = Group(cp->split_subgroup("cp_ulysses", row_members));
    column = Group(cp->split_subgroup("cp_ring", column_members));
  }

  // Core attention: the ring, Ulysses or both, with the module's scale; its QK-clip maxima are
  // this rank's.
  for (nn::AttentionLayer* layer : lm->attention_layers()) {
    nn::CoreAttention* core = &layer->core_attention();
    LOOM_CHECK(core->options().causal, ConfigError, "context parallelism needs causal attention");
    core->add_forward_wrapper([core, split, cp, row, column, method = options.method, async = options.async](
                                  const nn::TensorFn&, const std::vector<Tensor>& in) {
      const double set = core->options().softmax_scale;
      const double scale = set != 0 ? set : 1.0 / std::sqrt(static_cast<double>(in[0].size(3)));
      Tensor step_max;
      Tensor* track = core->tracking_max_logits() ? &step_max : nullptr;
      Tensor o;
      if (method == ContextParallelMethod::ulysses) o = ulysses_attention(in[0], in[1], in[2], in[3], scale, split, cp, track, async);
      else if (method == ContextParallelMethod::hybrid)
        o = hybrid_attention(in[0], in[1], in[2], in[3], scale, split, row, column, track, async);
      else o = ring_attention(in[0], in[1], in[2], in[3], scale, split, cp, track);
      core->fold_max_logits(step_max);
      return std::vector<Tensor>{o};
    });
  }

  // Loss: this rank's share of the one-process token mean, summed over cp (replicated from here).
  lm->set_head_loss([inner = lm->head_loss(), split, rank, cp, vocab = config.vocab_size](
                        const Tensor& hidden, const Tensor& weight, const Tensor& labels, const Tensor& loss_mask,
                        const Tensor& doc_ends, bool grads_in_forward) {
    const Tensor local_labels = split.local(labels, rank, doc_ends);
    const Tensor local_mask = loss_mask.defined() ? split.local(loss_mask, rank, doc_ends) : Tensor();
    const Tensor mean = inner(hidden, weight, local_labels, local_mask, doc_ends, grads_in_forward);
    const double mine = ops::loss_token_count(local_labels, local_mask, vocab);
    const double all = cp->all_reduce_scalar(mine);
    return all_reduce(ops::scale(mean, (mine + ops::kLossMaskEpsilon) / (all + ops::kLossMaskEpsilon)), cp);
  });

  // Logits: this rank's tokens' rows, every rank's gathered along the sequence, then put back in
  // sequence order (rank r's rows are its split's indices, ascending).
  lm->set_head_logits([inner = lm->head_logits_fn(), split, cp](const Tensor& hidden, const Tensor& weight,
                                                                 const Tensor& doc_ends) {
    const Tensor gathered = all_gather(inner(hidden, weight, doc_ends), cp, kSeqDim);
    const int64_t B = gathered.size(0), S = gathered.size(kSeqDim);
    const SequenceSplit::Layout layout = split.layout(B, S, doc_ends);
    std::vector<std::vector<int64_t>> row_of(static_cast<size_t>(B), std::vector<int64_t>(static_cast<size_t>(S)));
    for (size_t r = 0; r < layout.size(); ++r)
      for (size_t b = 0; b < layout[r].size(); ++b)
        for (size_t k = 0; k < layout[r][b].size(); ++k)
          row_of[b][static_cast<size_t>(layout[r][b][k])] = static_cast<int64_t>(r * layout[r][b].size() + k);
    return detail::gather_rows(gathered, row_of, S);
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
