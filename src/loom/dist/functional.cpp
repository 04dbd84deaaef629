#include "loom/dist/functional.h"

#include <mutex>

#include "loom/autograd/checkpoint.h"
#include "loom/autograd/function.h"
#include "loom/core/trace.h"

namespace loom::dist {

using autograd::BackwardContext;
using autograd::record;
using Grads = std::vector<Tensor>;

namespace {

ProcessGroup& checked(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, const char* op) {
  LOOM_CHECK(group != nullptr, ValueError, op, ": the process group is null");
  LOOM_CHECK(x.defined(), ValueError, op, " on mesh axis '", group->axis(), "': the input is undefined");
  LOOM_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f64, DTypeError, op,
             " on mesh axis '", group->axis(), "': dtype ", dtype_name(x.dtype()),
             " is not differentiable over a group; use float32, bfloat16 or float64");
  return *group;
}

// The group's buffers are flat: moving `dim` to the front makes each rank's block along it one
// contiguous run (no copy when dim is already 0 and x contiguous).
Tensor dim_first(const Tensor& x, int dim) { return (dim == 0 ? x : x.transpose(0, dim)).contiguous(); }
Tensor dim_back(const Tensor& y, int dim) { return dim == 0 ? y : y.transpose(0, dim).contiguous(); }

Tensor gather_along(const Tensor& x, ProcessGroup& group, int dim) {
  Tensor first = dim_first(x, dim);
  Shape shape = first.shape();
  shape[0] *= group.size();
  Tensor out = Tensor::empty(shape, x.dtype());
  group.all_gather(first, out);
  return dim_back(out, dim);
}

Tensor reduce_scatter_along(const Tensor& x, ProcessGroup& group, int dim) {
  const int n = group.size();
  LOOM_CHECK(x.shape()[dim] % n == 0, ShapeError, "reduce_scatter on mesh axis '", group.axis(), "': dim ", dim,
             " of ", x.shape().str(), " must split into ", n, " equal blocks (one per rank)");
  Tensor first = dim_first(x, dim);
  Shape shape = first.shape();
  shape[0] /= n;
  Tensor out = Tensor::empty(shape, x.dtype());
  group.reduce_scatter(first, out);
  return dim_back(out, dim);
}

Tensor sum_over(const Tensor& x, ProcessGroup& group) {
  Tensor out = x.clone();
  group.all_reduce(out);
  return out;
}

Tensor exchange_rows(const Tensor& x, ProcessGroup& group, const std::vector<int64_t>& send_rows,
                     const std::vector<int64_t>& recv_rows) {
  const int n = group.size();
  LOOM_CHECK(x.dim() >= 1, ShapeError, "all_to_all_v on mesh axis '", group.axis(), "': the input must have rows (dim 0)");
  LOOM_CHECK(static_cast<int>(send_rows.size()) == n && static_cast<int>(recv_rows.size()) == n, ValueError,
             "all_to_all_v on mesh axis '", group.axis(), "': send_rows (", send_rows.size(), ") and recv_rows (",
             recv_rows.size(), ") need one entry per rank of the group of ", n);
  Shape rest = x.shape();
  rest[0] = 1;
  const int64_t row = rest.numel();
  int64_t sent = 0, received = 0;
  std::vector<int64_t> send_counts(send_rows.size()), recv_counts(recv_rows.size());
  for (size_t p = 0; p < send_rows.size(); ++p) {
    sent += send_rows[p];
    received += recv_rows[p];
    send_counts[p] = send_rows[p] * row;
    recv_counts[p] = recv_rows[p] * row;
  }
  LOOM_CHECK(sent == x.shape()[0], ShapeError, "all_to_all_v on mesh axis '", group.axis(), "': send_rows add up to ",
             sent, " but the input ", x.shape().str(), " has ", x.shape()[0], " rows");
  Shape shape = x.shape();
  shape[0] = received;
  Tensor out = Tensor::empty(shape, x.dtype());
  group.all_to_all_v(x.contiguous(), send_counts, out, recv_counts);
  return out;
}

}  // namespace

// ---- Counting --------------------------------------------------------------------------------

namespace {

std::mutex g_counts_mutex;
DifferentiableCommStats g_counts;

// Runs one collective of `group` and counts it in the forward or the backward phase, with the
// bytes the group handed to its transport meanwhile (its stats delta: the caller's collective).
template <class Run>
Tensor counted(ProcessGroup& group, bool backward, Run&& run) {
  const int64_t before = group.stats().bytes_sent;
  Tensor out = run();
  const int64_t sent = group.stats().bytes_sent - before;
  std::lock_guard<std::mutex> lock(g_counts_mutex);
  CollectiveCounts& c = backward ? g_counts.backward : g_counts.forward;
  ++c.calls;
  c.bytes_sent += sent;
  return out;
}

// A forward that a checkpoint recomputes runs in backward.
bool in_backward() { return autograd::is_recomputing(); }

}  // namespace

DifferentiableCommStats differentiable_comm_stats() {
  std::lock_guard<std::mutex> lock(g_counts_mutex);
  return g_counts;
}

void reset_differentiable_comm_stats() {
  std::lock_guard<std::mutex> lock(g_counts_mutex);
  g_counts = {};
}

// ---- The collectives ---------------------------------------------------------------------------

Tensor all_gather(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, int dim) {
  return autograd::reuse_in_recompute(kAllGather, [&] {
    LOOM_TRACE("comm", "all_gather_differentiable");
    ProcessGroup& g = checked(x, group, "all_gather");
    const int d = normalize_dim(dim, x.dim(), "all_gather");
    Tensor out = counted(g, in_backward(), [&] { return gather_along(x, g, d); });
    record(kAllGather, {&x}, {&out}, {}, [group, d](const Grads& grads, const BackwardContext&) -> Grads {
      return {counted(*group, true, [&] { return reduce_scatter_along(grads[0], *group, d); })};
    });
    return out;
  });
}

Tensor reduce_scatter(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, int dim) {
  return autograd::reuse_in_recompute(kReduceScatter, [&] {
    LOOM_TRACE("comm", "reduce_scatter_differentiable");
    ProcessGroup& g = checked(x, group, "reduce_scatter");
    const int d = normalize_dim(dim, x.dim(), "reduce_scatter");
    Tensor out = counted(g, in_backward(), [&] { return reduce_scatter_along(x, g, d); });
    record(kReduceScatter, {&x}, {&out}, {}, [group, d](const Grads& grads, const BackwardContext&) -> Grads {
      return {counted(*group, true, [&] { return gather_along(grads[0], *group, d); })};
    });
    return out;
  });
}

Tensor all_reduce(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  return autograd::reuse_in_recompute(kAllReduce, [&] {
    LOOM_TRACE("comm", "all_reduce_differentiable");
    ProcessGroup& g = checked(x, group, "all_reduce");
    Tensor out = counted(g, in_backward(), [&] { return sum_over(x, g); });
    record(kAllReduce, {&x}, {&out}, {}, [](const Grads& grads, const BackwardContext&) -> Grads {
      return {grads[0]};  // every rank holds the same dL/dy, and dy_s/dx_s is the identity
    });
    return out;
  });
}

Tensor copy_to_group(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  checked(x, group, "copy_to_group");
  Tensor out = x.detach();  // the same storage under a node of its own
  record(kCopyToGroup, {&x}, {&out}, {}, [group](const Grads& grads, const BackwardContext&) -> Grads {
    return {counted(*group, true, [&] { return sum_over(grads[0], *group); })};
  });
  return out;
}

Tensor all_to_all_v(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, const std::vector<int64_t>& send_rows,
                    const std::vector<int64_t>& recv_rows) {
  return autograd::reuse_in_recompute(kAllToAll, [&] {
    LOOM_TRACE("comm", "all_to_all_v_differentiable");
    ProcessGroup& g = checked(x, group, "all_to_all_v");
    Tensor out = counted(g, in_backward(), [&] { return exchange_rows(x, g, send_rows, recv_rows); });
    // The grad of each received row goes back to the rank it came from: the same exchange with
    // the counts swapped.
    record(kAllToAll, {&x}, {&out}, {},
           [group, send_rows, recv_rows](const Grads& grads, const BackwardContext&) -> Grads {
             return {counted(*group, true, [&] { return exchange_rows(grads[0], *group, recv_rows, send_rows); })};
           });
    return out;
  });
}

Tensor all_to_all_counts(const Tensor& counts, const std::shared_ptr<ProcessGroup>& group,
                         const std::vector<int64_t>& send_counts, const std::vector<int64_t>& recv_counts) {
  return autograd::reuse_in_recompute(kAllToAll, [&] {
    int64_t total = 0;
    for (int64_t c : recv_counts) total += c;
    Tensor out = Tensor::empty({total}, counts.dtype());
    return counted(*group, in_backward(), [&] {
      group->all_to_all_v(counts.contiguous(), send_counts, out, recv_counts);
      return out;
    });
  });
}

}  // namespace loom::dist
