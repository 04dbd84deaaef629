#include "loom/dist/process_group.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "loom/core/trace.h"
#include "loom/dist/comm_thread.h"
#include "loom/dist/watchdog.h"

namespace loom::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

bool is_comm_dtype(DType d) {
  return d == DType::f32 || d == DType::bf16 || d == DType::f64 || d == DType::i64 || d == DType::i32;
}

namespace {

template <typename T, typename Acc>
void reduce_typed(const std::vector<const void*>& srcs, void* dst, int64_t count, ReduceOp op) {
  T* out = static_cast<T*>(dst);
  const size_t n = srcs.size();
  // Element-major with ranks innermost: each output is a fixed left-to-right chain over ranks.
  for (int64_t i = 0; i < count; ++i) {
    Acc acc = static_cast<Acc>(static_cast<const T*>(srcs[0])[i]);
    for (size_t r = 1; r < n; ++r) {
      const Acc v = static_cast<Acc>(static_cast<const T*>(srcs[r])[i]);
      switch (op) {
        case ReduceOp::sum: acc = acc + v; break;
        case ReduceOp::max: acc = v > acc ? v : acc; break;
        case ReduceOp::min: acc = v < acc ? v : acc; break;
      }
    }
    out[i] = static_cast<T>(acc);
  }
}

// Sums are the hot path (gradients): a rank-ordered chain per element, vectorised across
// elements (no reassociation: each lane runs the same chain), blocked for the cache.
template <typename T>
void sum_fp(const std::vector<const void*>& srcs, T* out, int64_t count) {
  constexpr int64_t kBlock = 4096;
  const size_t n = srcs.size();
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t e = std::min(count, b + kBlock);
    const T* s0 = static_cast<const T*>(srcs[0]);
    if (static_cast<const void*>(out) != static_cast<const void*>(s0)) std::memcpy(out + b, s0 + b, (e - b) * sizeof(T));
    for (size_t r = 1; r < n; ++r) {
      const T* s = static_cast<const T*>(srcs[r]);
#pragma omp simd
      for (int64_t i = b; i < e; ++i) out[i] = out[i] + s[i];
    }
  }
}

void sum_bf16(const std::vector<const void*>& srcs, bf16* out, int64_t count) {
  constexpr int64_t kBlock = 2048;
  float acc[kBlock];
  const size_t n = srcs.size();
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t len = std::min(count - b, kBlock);
    const bf16* s0 = static_cast<const bf16*>(srcs[0]) + b;
    for (int64_t i = 0; i < len; ++i) acc[i] = static_cast<float>(s0[i]);
    for (size_t r = 1; r < n; ++r) {
      const bf16* s = static_cast<const bf16*>(srcs[r]) + b;
      for (int64_t i = 0; i < len; ++i) acc[i] += static_cast<float>(s[i]);
    }
    for (int64_t i = 0; i < len; ++i) out[b + i] = bf16(acc[i]);
  }
}

}  // namespace

void reduce_in_rank_order(const std::vector<const void*>& srcs, void* dst, int64_t count, DType dtype, ReduceOp op) {
  LOOM_ASSERT(!srcs.empty());
  if (count == 0) return;
  if (op == ReduceOp::sum) {
    switch (dtype) {
      case DType::f32: return sum_fp(srcs, static_cast<float*>(dst), count);
      case DType::f64: return sum_fp(srcs, static_cast<double*>(dst), count);
      case DType::bf16: return sum_bf16(srcs, static_cast<bf16*>(dst), count);
      default: break;
    }
  }
  switch (dtype) {
    case DType::f32: return reduce_typed<float, float>(srcs, dst, count, op);
    case DType::f64: return reduce_typed<double, double>(srcs, dst, count, op);
    case DType::bf16: return reduce_typed<bf16, float>(srcs, dst, count, op);
    case DType::i64: return reduce_typed<int64_t, int64_t>(srcs, dst, count, op);
    case DType::i32: return reduce_typed<int32_t, int32_t>(srcs, dst, count, op);
    default: LOOM_THROW(DTypeError, "reduce: dtype ", dtype_name(dtype), " is not supported");
  }
}

ProcessGroup::ProcessGroup(std::string axis, int rank, std::vector<int> members)
    : axis_(std::move(axis)), rank_(rank), members_(std::move(members)) {
  LOOM_CHECK(rank_ >= 0 && rank_ < static_cast<int>(members_.size()), ValueError, "process group '", axis_,
             "': rank ", rank_, " is outside the group of ", members_.size());
}

ProcessGroup::~ProcessGroup() { finish_async_ops(); }

CommStats ProcessGroup::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

CommStats ProcessGroup::subgroup_stats() const {
  std::lock_guard<std::mutex> lock(subgroup_cell_->mutex);
  return subgroup_cell_->stats;
}

void ProcessGroup::reset_stats() {
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_ = {};
  }
  std::lock_guard<std::mutex> lock(subgroup_cell_->mutex);
  subgroup_cell_->stats = {};
}

std::unique_ptr<ProcessGroup> ProcessGroup::split_subgroup(std::string axis, const std::vector<int>& members) {
  std::unique_ptr<ProcessGroup> child = split(std::move(axis), members);
  child->subgroup_sinks_ = subgroup_sinks_;
  child->subgroup_sinks_.push_back(subgroup_cell_);
  return child;
}

void ProcessGroup::count_traffic(int64_t bytes_sent, int64_t bytes_received) {
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.bytes_sent += bytes_sent;
    stats_.bytes_received += bytes_received;
  }
  for (const auto& cell : subgroup_sinks_) {
    std::lock_guard<std::mutex> lock(cell->mutex);
    cell->stats.bytes_sent += bytes_sent;
    cell->stats.bytes_received += bytes_received;
  }
}

void ProcessGroup::finish_async_ops() {
  if (comm_thread_) comm_thread_->finish();
  comm_thread_.reset();
}

void ProcessGroup::abandon_async_ops(const std::string& reason) {
  if (comm_thread_) comm_thread_->abandon(reason);
  comm_thread_.reset();
}

CommThread& ProcessGroup::comm_thread() {
  if (!comm_thread_) comm_thread_ = std::make_unique<CommThread>(axis_);
  return *comm_thread_;
}

void ProcessGroup::check_dtype(DType dtype, const char* op) const {
  LOOM_CHECK(is_comm_dtype(dtype), DTypeError, op, " on mesh axis '", axis_, "': dtype ", dtype_name(dtype),
             " is not supported; collectives move float32, bfloat16, float64, int64 or int32");
}

void ProcessGroup::check_peer(int peer, const char* op) const {
  LOOM_CHECK(peer >= 0 && peer < size() && peer != rank_, ValueError, op, " on mesh axis '", axis_, "': peer ", peer,
             " must be another rank of the group of ", size(), " (this is rank ", rank_, ")");
}

// ---- Running a collective ----------------------------------------------------------------------

namespace {
// Adds the scope's wall time and one collective to a group's stats.
class CollectiveTimer {
 public:
  CollectiveTimer(std::mutex& mutex, CommStats& stats)
      : mutex_(mutex), stats_(stats), t0_(std::chrono::steady_clock::now()) {}
  ~CollectiveTimer() {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.seconds += s;
    ++stats_.num_collectives;
  }

 private:
  std::mutex& mutex_;
  CommStats& stats_;
  std::chrono::steady_clock::time_point t0_;
};
}  // namespace

template <typename Transport>
void ProcessGroup::run_inline(const char* op, Transport&& transport) {
  if (comm_thread_) comm_thread_->drain();  // issue order: the queued collectives go first
  LOOM_TRACE("comm", op);
  CollectiveScope scope(op, axis_, size());
  CollectiveTimer timer(stats_mutex_, stats_);
  transport();
}

WorkHandle ProcessGroup::enqueue(const char* op, std::function<void()> transport, KeepAlive keep) {
  auto work = std::make_shared<Work>(op, axis_, size());  // watched from issue to completion
  comm_thread().enqueue(work, [this, op, transport = std::move(transport), keep = std::move(keep)] {
    LOOM_TRACE("comm", op);
    CollectiveTimer timer(stats_mutex_, stats_);
    transport();
  });
  return work;
}

// ---- Argument checks ---------------------------------------------------------------------------

bool ProcessGroup::prepare_all_reduce(int64_t count, DType dtype) {
  check_dtype(dtype, "all_reduce");
  return size() > 1 && count > 0;
}

bool ProcessGroup::prepare_reduce_scatter(const void* input, int64_t in_count, void* output, int64_t out_count,
                                          DType dtype) {
  check_dtype(dtype, "reduce_scatter");
  LOOM_CHECK(in_count == out_count * size(), ShapeError, "reduce_scatter on mesh axis '", axis_, "': input has ",
             in_count, " elements but must hold ", size(), " chunks of the output's ", out_count);
  if (size() > 1) return true;
  if (out_count && output != input) std::memcpy(output, input, static_cast<size_t>(out_count) * dtype_size(dtype));
  return false;
}

bool ProcessGroup::prepare_all_gather(const void* input, int64_t in_count, void* output, int64_t out_count,
                                      DType dtype) {
  check_dtype(dtype, "all_gather");
  LOOM_CHECK(out_count == in_count * size(), ShapeError, "all_gather on mesh axis '", axis_, "': output has ",
             out_count, " elements but must hold ", size(), " chunks of the input's ", in_count);
  if (size() > 1) return true;
  if (in_count && output != input) std::memcpy(output, input, static_cast<size_t>(in_count) * dtype_size(dtype));
  return false;
}

bool ProcessGroup::prepare_all_to_all_v(const void* input, int64_t in_count, const std::vector<int64_t>& send_counts,
                                        void* output, int64_t out_count, const std::vector<int64_t>& recv_counts,
                                        DType dtype) {
  check_dtype(dtype, "all_to_all_v");
  LOOM_CHECK(static_cast<int>(send_counts.size()) == size() && static_cast<int>(recv_counts.size()) == size(),
             ValueError, "all_to_all_v on mesh axis '", axis_, "': send_counts (", send_counts.size(),
             ") and recv_counts (", recv_counts.size(), ") need one entry per rank of the group of ", size());
  int64_t s = 0, r = 0;
  for (int i = 0; i < size(); ++i) {
    LOOM_CHECK(send_counts[i] >= 0 && recv_counts[i] >= 0, ValueError, "all_to_all_v on mesh axis '", axis_,
               "': counts must be >= 0 (rank ", i, ": send ", send_counts[i], ", recv ", recv_counts[i], ")");
    s += send_counts[i];
    r += recv_counts[i];
  }
  LOOM_CHECK(s <= in_count && r <= out_count, ShapeError, "all_to_all_v on mesh axis '", axis_, "': counts add up to ",
             s, " sent / ", r, " received but the buffers hold ", in_count, " / ", out_count, " elements");
  if (size() > 1) return true;
  if (s && output != input) std::memcpy(output, input, static_cast<size_t>(s) * dtype_size(dtype));
  return false;
}

bool ProcessGroup::prepare_broadcast(int64_t count, DType dtype, int root) {
  check_dtype(dtype, "broadcast");
  LOOM_CHECK(root >= 0 && root < size(), ValueError, "broadcast on mesh axis '", axis_, "': root ", root,
             " is outside the group of ", size());
  return size() > 1 && count > 0;
}

// ---- Blocking ----------------------------------------------------------------------------------

void ProcessGroup::run_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) {
  if (!prepare_all_reduce(count, dtype)) return;
  run_inline("all_reduce", [&] { do_all_reduce(data, count, dtype, op); });
}

void ProcessGroup::run_reduce_scatter(const void* input, int64_t in_count, void* output, int64_t out_count,
                                      DType dtype, ReduceOp op) {
  if (!prepare_reduce_scatter(input, in_count, output, out_count, dtype)) return;
  run_inline("reduce_scatter", [&] { do_reduce_scatter(input, output, out_count, dtype, op); });
}

void ProcessGroup::run_all_gather(const void* input, int64_t in_count, void* output, int64_t out_count, DType dtype) {
  if (!prepare_all_gather(input, in_count, output, out_count, dtype)) return;
  run_inline("all_gather", [&] { do_all_gather(input, output, in_count, dtype); });
}

void ProcessGroup::run_all_to_all_v(const void* input, int64_t in_count, const std::vector<int64_t>& send_counts,
                                    void* output, int64_t out_count, const std::vector<int64_t>& recv_counts,
                                    DType dtype) {
  if (!prepare_all_to_all_v(input, in_count, send_counts, output, out_count, recv_counts, dtype)) return;
  run_inline("all_to_all_v", [&] { do_all_to_all_v(input, send_counts, output, recv_counts, dtype); });
}

void ProcessGroup::run_broadcast(void* data, int64_t count, DType dtype, int root) {
  if (!prepare_broadcast(count, dtype, root)) return;
  run_inline("broadcast", [&] { do_broadcast(data, count, dtype, root); });
}

void ProcessGroup::run_send(const void* data, int64_t count, DType dtype, int peer, int tag) {
  check_dtype(dtype, "send");
  check_peer(peer, "send");
  if (comm_thread_) comm_thread_->drain();
  CollectiveScope scope("send", axis_, size());
  do_send(data, count, dtype, peer, tag);
}

void ProcessGroup::run_recv(void* data, int64_t count, DType dtype, int peer, int tag) {
  check_dtype(dtype, "recv");
  check_peer(peer, "recv");
  if (comm_thread_) comm_thread_->drain();
  CollectiveScope scope("recv", axis_, size());
  do_recv(data, count, dtype, peer, tag);
}

void ProcessGroup::barrier() {
  if (size() == 1) return;
  if (comm_thread_) comm_thread_->drain();
  CollectiveScope scope("barrier", axis_, size());
  const auto t0 = std::chrono::steady_clock::now();
  do_barrier();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.seconds += s;
}

// ---- Asynchronous ------------------------------------------------------------------------------

WorkHandle ProcessGroup::start_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, KeepAlive keep) {
  if (!prepare_all_reduce(count, dtype)) return Work::completed("all_reduce");
  return enqueue("all_reduce", [=, this] { do_all_reduce(data, count, dtype, op); }, std::move(keep));
}

WorkHandle ProcessGroup::start_reduce_scatter(const void* input, int64_t in_count, void* output, int64_t out_count,
                                              DType dtype, ReduceOp op, KeepAlive keep) {
  if (!prepare_reduce_scatter(input, in_count, output, out_count, dtype)) return Work::completed("reduce_scatter");
  return enqueue("reduce_scatter", [=, this] { do_reduce_scatter(input, output, out_count, dtype, op); },
                 std::move(keep));
}

WorkHandle ProcessGroup::start_all_gather(const void* input, int64_t in_count, void* output, int64_t out_count,
                                          DType dtype, KeepAlive keep) {
  if (!prepare_all_gather(input, in_count, output, out_count, dtype)) return Work::completed("all_gather");
  return enqueue("all_gather", [=, this] { do_all_gather(input, output, in_count, dtype); }, std::move(keep));
}

WorkHandle ProcessGroup::start_all_to_all_v(const void* input, int64_t in_count,
                                            const std::vector<int64_t>& send_counts, void* output, int64_t out_count,
                                            const std::vector<int64_t>& recv_counts, DType dtype, KeepAlive keep) {
  if (!prepare_all_to_all_v(input, in_count, send_counts, output, out_count, recv_counts, dtype))
    return Work::completed("all_to_all_v");
  return enqueue("all_to_all_v", [=, this] { do_all_to_all_v(input, send_counts, output, recv_counts, dtype); },
                 std::move(keep));
}

WorkHandle ProcessGroup::start_broadcast(void* data, int64_t count, DType dtype, int root, KeepAlive keep) {
  if (!prepare_broadcast(count, dtype, root)) return Work::completed("broadcast");
  return enqueue("broadcast", [=, this] { do_broadcast(data, count, dtype, root); }, std::move(keep));
}

WorkHandle ProcessGroup::start_send(const void* data, int64_t count, DType dtype, int peer, int tag, KeepAlive keep) {
  check_dtype(dtype, "isend");
  check_peer(peer, "isend");
  auto work = std::make_shared<Work>("isend", axis_, size());
  comm_thread().track(work, do_isend(data, count, dtype, peer, tag), std::move(keep));
  return work;
}

WorkHandle ProcessGroup::start_recv(void* data, int64_t count, DType dtype, int peer, int tag, KeepAlive keep) {
  check_dtype(dtype, "irecv");
  check_peer(peer, "irecv");
  auto work = std::make_shared<Work>("irecv", axis_, size());
  comm_thread().track(work, do_irecv(data, count, dtype, peer, tag), std::move(keep));
  return work;
}

// ---- Tensors -----------------------------------------------------------------------------------

namespace {
void check_tensor(const Tensor& t, const char* op, const char* arg, const std::string& axis) {
  LOOM_CHECK(t.defined(), ValueError, op, " on mesh axis '", axis, "': ", arg, " is undefined");
  LOOM_CHECK(t.is_contiguous(), ValueError, op, " on mesh axis '", axis, "': ", arg,
             " must be contiguous (call .contiguous() first)");
  LOOM_CHECK(!t.is_meta(), DeviceError, op, " on mesh axis '", axis, "': ", arg, " is on the meta device");
}

void check_pair(const Tensor& input, const Tensor& output, const char* op, const std::string& axis) {
  check_tensor(input, op, "input", axis);
  check_tensor(output, op, "output", axis);
  LOOM_CHECK(input.dtype() == output.dtype(), DTypeError, op, " on mesh axis '", axis, "': input is ",
             dtype_name(input.dtype()), " but output is ", dtype_name(output.dtype()));
}
}  // namespace

void ProcessGroup::all_reduce(const Tensor& data, ReduceOp op) {
  check_tensor(data, "all_reduce", "data", axis_);
  run_all_reduce(data.raw_data(), data.numel(), data.dtype(), op);
}

void ProcessGroup::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  check_pair(input, output, "reduce_scatter", axis_);
  run_reduce_scatter(input.raw_data(), input.numel(), output.raw_data(), output.numel(), input.dtype(), op);
}

void ProcessGroup::all_gather(const Tensor& input, const Tensor& output) {
  check_pair(input, output, "all_gather", axis_);
  run_all_gather(input.raw_data(), input.numel(), output.raw_data(), output.numel(), input.dtype());
}

void ProcessGroup::all_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                                const std::vector<int64_t>& recv_counts) {
  check_pair(input, output, "all_to_all_v", axis_);
  run_all_to_all_v(input.raw_data(), input.numel(), send_counts, output.raw_data(), output.numel(), recv_counts,
                   input.dtype());
}

void ProcessGroup::broadcast(const Tensor& data, int root) {
  check_tensor(data, "broadcast", "data", axis_);
  run_broadcast(data.raw_data(), data.numel(), data.dtype(), root);
}

WorkHandle ProcessGroup::iall_reduce(const Tensor& data, ReduceOp op) {
  check_tensor(data, "all_reduce", "data", axis_);
  return start_all_reduce(data.raw_data(), data.numel(), data.dtype(), op, {data});
}

WorkHandle ProcessGroup::ireduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  check_pair(input, output, "reduce_scatter", axis_);
  return start_reduce_scatter(input.raw_data(), input.numel(), output.raw_data(), output.numel(), input.dtype(), op,
                              {input, output});
}

WorkHandle ProcessGroup::iall_gather(const Tensor& input, const Tensor& output) {
  check_pair(input, output, "all_gather", axis_);
  return start_all_gather(input.raw_data(), input.numel(), output.raw_data(), output.numel(), input.dtype(),
                          {input, output});
}

WorkHandle ProcessGroup::iall_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts,
                                       const Tensor& output, const std::vector<int64_t>& recv_counts) {
  check_pair(input, output, "all_to_all_v", axis_);
  return start_all_to_all_v(input.raw_data(), input.numel(), send_counts, output.raw_data(), output.numel(),
                            recv_counts, input.dtype(), {input, output});
}

WorkHandle ProcessGroup::ibroadcast(const Tensor& data, int root) {
  check_tensor(data, "broadcast", "data", axis_);
  return start_broadcast(data.raw_data(), data.numel(), data.dtype(), root, {data});
}

WorkHandle ProcessGroup::isend(const Tensor& data, int peer, int tag) {
  check_tensor(data, "isend", "data", axis_);
  return start_send(data.raw_data(), data.numel(), data.dtype(), peer, tag, {data});
}

WorkHandle ProcessGroup::irecv(const Tensor& data, int peer, int tag) {
  check_tensor(data, "irecv", "data", axis_);
  return start_recv(data.raw_data(), data.numel(), data.dtype(), peer, tag, {data});
}


double ProcessGroup::all_reduce_scalar(double value, ReduceOp op) {
  run_all_reduce(&value, 1, DType::f64, op);
  return value;
}

int64_t ProcessGroup::all_reduce_scalar(int64_t value, ReduceOp op) {
  run_all_reduce(&value, 1, DType::i64, op);
  return value;
}

std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& mine) {
  const int n = group.size();
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  const int64_t len = static_cast<int64_t>(mine.size());
  group.all_gather(std::span<const int64_t>(&len, 1), std::span<int64_t>(lengths));
  const int64_t words = (*std::max_element(lengths.begin(), lengths.end()) + 7) / 8;
  std::vector<int64_t> packed(static_cast<size_t>(words), 0), all(static_cast<size_t>(words * n));
  if (!mine.empty()) std::memcpy(packed.data(), mine.data(), mine.size());
  group.all_gather(std::span<const int64_t>(packed), std::span<int64_t>(all));
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data() + r * words), static_cast<size_t>(lengths[static_cast<size_t>(r)]));
  return out;
}

std::string broadcast_string(ProcessGroup& group, const std::string& value, int root) {
  int64_t len = static_cast<int64_t>(value.size());
  group.broadcast(std::span<int64_t>(&len, 1), root);
  std::vector<int64_t> packed(static_cast<size_t>((len + 7) / 8), 0);
  if (group.rank() == root && len) std::memcpy(packed.data(), value.data(), value.size());
  group.broadcast(std::span<int64_t>(packed), root);
  return std::string(reinterpret_cast<const char*>(packed.data()), static_cast<size_t>(len));
}

// ---- One rank ---------------------------------------------------------------------------------

namespace {

class SingleRankGroup final : public ProcessGroup {
 public:
  SingleRankGroup(std::string axis, int world_rank) : ProcessGroup(std::move(axis), 0, {world_rank}) {}

 protected:
  // The front-ends return before reaching these for a group of one, except point to point,
  // which has no peer to talk to.
  void do_all_reduce(void*, int64_t, DType, ReduceOp) override {}
  void do_reduce_scatter(const void*, void*, int64_t, DType, ReduceOp) override {}
  void do_all_gather(const void*, void*, int64_t, DType) override {}
  void do_all_to_all_v(const void*, const std::vector<int64_t>&, void*, const std::vector<int64_t>&, DType) override {}
  void do_send(const void*, int64_t, DType, int, int) override {}
  void do_recv(void*, int64_t, DType, int, int) override {}
  void do_broadcast(void*, int64_t, DType, int) override {}
  void do_barrier() override {}
  std::unique_ptr<PendingTransfer> do_isend(const void*, int64_t, DType, int, int) override { return nullptr; }
  std::unique_ptr<PendingTransfer> do_irecv(void*, int64_t, DType, int, int) override { return nullptr; }

 public:
  std::unique_ptr<ProcessGroup> split(std::string axis, const std::vector<int>& members) override {
    LOOM_CHECK(members.size() == 1 && members[0] == 0, ValueError, "split of a one-rank group into mesh axis '",
               axis, "': the only member can be rank 0");
    return std::make_unique<SingleRankGroup>(std::move(axis), this->members()[0]);
  }
};

}  // namespace

std::unique_ptr<ProcessGroup> make_single_rank_group(std::string axis, int world_rank) {
  return std::make_unique<SingleRankGroup>(std::move(axis), world_rank);
}

}  // namespace loom::dist
