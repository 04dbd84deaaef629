// ProcessGroup: the collectives a group of ranks runs together, over MPI on CPU (NCCL on GPU later)
// or over one rank alone, so every code path also runs without mpirun. Buffers are typed spans
// counted in elements, never bytes; float32, bfloat16, float64, int64 and int32 are supported.
// bfloat16 travels as bfloat16 but is reduced in fp32 (rounded once at the end), as NCCL does.
//
// Floating-point sums are reduced in rank order (((r0 + r1) + r2) + ...) whatever the group size,
// so a data-parallel gradient equals the one process sum of the same micro-batches bit for bit (the
// parity tests/dist/parity_test.py checks). The algorithms move (n-1)/n of the buffer per rank,
// like a ring, and every byte handed to the transport is counted in stats().
//
// Every collective runs under the watchdog (watchdog.h): one that does not finish within the
// timeout aborts every rank, naming the rank, the op and the mesh axis.
//
// Every op but barrier also comes asynchronous (iall_gather, isend, ...): it starts and returns
// a handle (work.h) to wait on, so a transfer advances while kernels run. A group runs its
// collectives in issue order, blocking and asynchronous alike: the asynchronous ones on a
// communication thread of its own, started by its first asynchronous op; a blocking call waits
// for the queued ones, then runs inline on the caller (comm_thread.h explains the scheme and why
// it is a thread). Results and byte counts do not depend on which way an op was issued. A group
// is driven by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/tensor.h"
#include "loom/dist/work.h"

namespace loom::dist {

enum class ReduceOp : uint8_t { sum, max, min };
const char* reduce_op_name(ReduceOp op);

// Element types a group moves.
template <typename T>
inline constexpr bool is_comm_type_v = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                       std::is_same_v<T, bf16> || std::is_same_v<T, int64_t> ||
                                       std::is_same_v<T, int32_t>;
bool is_comm_dtype(DType dtype);

// What one process pushed through a group (payload bytes handed to point-to-point transfers).
struct CommStats {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t num_collectives = 0;
  // Wall time inside collectives (waiting for peers included): on the caller for blocking ones,
  // on the communication thread for asynchronous ones.
  double seconds = 0;

  CommStats& operator+=(const CommStats& o) {
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
    num_collectives += o.num_collectives;
    seconds += o.seconds;
    return *this;
  }
};

class CommThread;

class ProcessGroup {
 public:
  // Waits for the asynchronous ops still pending (comm_thread.h).
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  // The mesh axis this group spans ("world", "fsdp", "dp_replicate", ...): named in errors.
  const std::string& axis() const { return axis_; }
  // World ranks of the members, in group-rank order.
  const std::vector<int>& members() const { return members_; }
  CommStats stats() const;
  // The traffic of the sub-groups cut from this one by split_subgroup (a strategy's own groups,
  // e.g. tp_kv inside tp): it travels over this axis, so a per-axis count must include it.
  CommStats subgroup_stats() const;
  // Clears stats() and subgroup_stats().
  void reset_stats();

  // ---- Typed front-ends ------------------------------------------------------------------
  // In place over every rank's `data` (same count everywhere).
  template <typename T>
  void all_reduce(std::span<T> data, ReduceOp op = ReduceOp::sum) {
    static_assert(is_comm_type_v<T>);
    run_all_reduce(data.data(), static_cast<int64_t>(data.size()), dtype_of<T>::value, op);
  }
  // input holds size() equal chunks; rank r receives the reduction of everyone's chunk r.
  template <typename T>
  void reduce_scatter(std::span<const T> input, std::span<T> output, ReduceOp op = ReduceOp::sum) {
    static_assert(is_comm_type_v<T>);
    run_reduce_scatter(input.data(), static_cast<int64_t>(input.size()), output.data(),
                       static_cast<int64_t>(output.size()), dtype_of<T>::value, op);
  }
  // output = concatenation of every rank's input, in rank order.
  template <typename T>
  void all_gather(std::span<const T> input, std::span<T> output) {
    static_assert(is_comm_type_v<T>);
    run_all_gather(input.data(), static_cast<int64_t>(input.size()), output.data(),
                   static_cast<int64_t>(output.size()), dtype_of<T>::value);
  }
  // Rank r sends send_counts[p] consecutive elements to each p (in rank order) and receives
  // recv_counts[p] from each p into output, in rank order.
  template <typename T>
  void all_to_all_v(std::span<const T> input, const std::vector<int64_t>& send_counts, std::span<T> output,
                    const std::vector<int64_t>& recv_counts) {
    static_assert(is_comm_type_v<T>);
    run_all_to_all_v(input.data(), static_cast<int64_t>(input.size()), send_counts, output.data(),
                     static_cast<int64_t>(output.size()), recv_counts, dtype_of<T>::value);
  }
  // Point to point; `peer` is a group rank.
  template <typename T>
  void send(std::span<const T> data, int peer, int tag = 0) {
    static_assert(is_comm_type_v<T>);
    run_send(data.data(), static_cast<int64_t>(data.size()), dtype_of<T>::value, peer, tag);
  }
  template <typename T>
  void recv(std::span<T> data, int peer, int tag = 0) {
    static_assert(is_comm_type_v<T>);
    run_recv(data.data(), static_cast<int64_t>(data.size()), dtype_of<T>::value, peer, tag);
  }
  template <typename T>
  void broadcast(std::span<T> data, int root) {
    static_assert(is_comm_type_v<T>);
    run_broadcast(data.data(), static_cast<int64_t>(data.size()), dtype_of<T>::value, root);
  }
  void barrier();

  // A sub-group: collective over this group (every rank calls it, in the same order); each rank
  // passes the members of *its* sub-group as ranks of this group, in the sub-group's rank order.
  // Ranks not in `members` of anybody's list cannot exist: every rank belongs to one sub-group.
  virtual std::unique_ptr<ProcessGroup> split(std::string axis, const std::vector<int>& members) = 0;
  // split() for a strategy's helper group inside this axis: whatever it sends is also counted in
  // this group's subgroup_stats() (and so in its ancestors' that were cut the same way). The mesh
  // axes themselves use split(): each is counted apart.
  std::unique_ptr<ProcessGroup> split_subgroup(std::string axis, const std::vector<int>& members);

  // Contiguous tensors of a supported dtype (any shape; counted by numel).
  void all_reduce(const Tensor& data, ReduceOp op = ReduceOp::sum);
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::sum);
  void all_gather(const Tensor& input, const Tensor& output);
  void all_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                    const std::vector<int64_t>& recv_counts);
  void broadcast(const Tensor& data, int root);

  // ---- Asynchronous front-ends ---------------------------------------------------------------
  // The ops above, started: the buffers belong to the op until its handle completed. Argument
  // errors are thrown here, on the caller; errors while running are rethrown by wait().
  template <typename T>
  WorkHandle iall_reduce(std::span<T> data, ReduceOp op = ReduceOp::sum) {
    static_assert(is_comm_type_v<T>);
    return start_all_reduce(data.data(), static_cast<int64_t>(data.size()), dtype_of<T>::value, op, {});
  }
  template <typename T>
  WorkHandle ireduce_scatter(std::span<const T> input, std::span<T> output, ReduceOp op = ReduceOp::sum) {
    static_assert(is_comm_type_v<T>);
    return start_reduce_scatter(input.data(), static_cast<int64_t>(input.size()), output.data(),
                                static_cast<int64_t>(output.size()), dtype_of<T>::value, op, {});
  }
  template <typename T>
  WorkHandle iall_gather(std::span<const T> input, std::span<T> output) {
    static_assert(is_comm_type_v<T>);
    return start_all_gather(input.data(), static_cast<int64_t>(input.size()), output.data(),
                            static_cast<int64_t>(output.size()), dtype_of<T>::value, {});
  }
  template <typename T>
  WorkHandle iall_to_all_v(std::span<const T> input, const std::vector<int64_t>& send_counts, std::span<T> output,
                           const std::vector<int64_t>& recv_counts) {
    static_assert(is_comm_type_v<T>);
    return start_all_to_all_v(input.data(), static_cast<int64_t>(input.size()), send_counts, output.data(),
                              static_cast<int64_t>(output.size()), recv_counts, dtype_of<T>::value, {});
  }
  template <typename T>
  WorkHandle ibroadcast(std::span<T> data, int root) {
    static_assert(is_comm_type_v<T>);
    return start_broadcast(data.data(), static_cast<int64_t>(data.size()), dtype_of<T>::value, root, {});
  }
  // Posted at once (messages between two ranks match in issue order); they never wait for the
  // group's queued collectives.
  template <typename T>
  WorkHandle isend(std::span<const T> data, int peer, int tag = 0) {
    static_assert(is_comm_type_v<T>);
    return start_send(data.data(), static_cast<int64_t>(data.size()), dtype_of<T>::value, peer, tag, {});
  }
  template <typename T>
  WorkHandle irecv(std::span<T> data, int peer, int tag = 0) {
    static_assert(is_comm_type_v<T>);
    return start_recv(data.data(), static_cast<int64_t>(data.size()), dtype_of<T>::value, peer, tag, {});
  }
  // Tensor forms; the handle keeps the tensors alive until the op completed.
  WorkHandle iall_reduce(const Tensor& data, ReduceOp op = ReduceOp::sum);
  WorkHandle ireduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::sum);
  WorkHandle iall_gather(const Tensor& input, const Tensor& output);
  WorkHandle iall_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                           const std::vector<int64_t>& recv_counts);
  WorkHandle ibroadcast(const Tensor& data, int root);
  WorkHandle isend(const Tensor& data, int peer, int tag = 0);
  WorkHandle irecv(const Tensor& data, int peer, int tag = 0);

  // Scalars (loss and grad-norm sums, counters).
  double all_reduce_scalar(double value, ReduceOp op = ReduceOp::sum);
  int64_t all_reduce_scalar(int64_t value, ReduceOp op = ReduceOp::sum);

 protected:
  ProcessGroup(std::string axis, int rank, std::vector<int> members);

  // Implementations: buffers are valid for the given counts (checked by the front-ends).
  virtual void do_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual void do_reduce_scatter(const void* input, void* output, int64_t chunk, DType dtype, ReduceOp op) = 0;
  virtual void do_all_gather(const void* input, void* output, int64_t chunk, DType dtype) = 0;
  virtual void do_all_to_all_v(const void* input, const std::vector<int64_t>& send_counts, void* output,
                               const std::vector<int64_t>& recv_counts, DType dtype) = 0;
  virtual void do_send(const void* data, int64_t count, DType dtype, int peer, int tag) = 0;
  virtual void do_recv(void* data, int64_t count, DType dtype, int peer, int tag) = 0;
  virtual void do_broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  virtual void do_barrier() = 0;
  // Post a transfer and return it for the communication thread to poll (called on the caller).
  virtual std::unique_ptr<PendingTransfer> do_isend(const void* data, int64_t count, DType dtype, int peer, int tag) = 0;
  virtual std::unique_ptr<PendingTransfer> do_irecv(void* data, int64_t count, DType dtype, int peer, int tag) = 0;

  // Bytes handed to / taken from the transport (thread-safe: the communication thread counts too).
  void count_traffic(int64_t bytes_sent, int64_t bytes_received);
  // For a backend's destructor, before it tears its transport down: waits for every pending
  // asynchronous op; or, once the transport is gone, fails them with `reason`.
  void finish_async_ops();
  void abandon_async_ops(const std::string& reason);

 private:
  // What an asynchronous op keeps alive until it completed.
  using KeepAlive = std::vector<Tensor>;

  // Argument checks shared by the blocking and asynchronous forms (thrown on the caller). They
  // return false when the transport has nothing to do (a group of one rank: done by a copy).
  bool prepare_all_reduce(int64_t count, DType dtype);
  bool prepare_reduce_scatter(const void* input, int64_t in_count, void* output, int64_t out_count, DType dtype);
  bool prepare_all_gather(const void* input, int64_t in_count, void* output, int64_t out_count, DType dtype);
  bool prepare_all_to_all_v(const void* input, int64_t in_count, const std::vector<int64_t>& send_counts,
                            void* output, int64_t out_count, const std::vector<int64_t>& recv_counts, DType dtype);
  bool prepare_broadcast(int64_t count, DType dtype, int root);
  // A collective on the caller, after the queued ones; or queued for the communication thread.
  template <typename Transport>
  void run_inline(const char* op, Transport&& transport);
  WorkHandle enqueue(const char* op, std::function<void()> transport, KeepAlive keep);
  CommThread& comm_thread();

  WorkHandle start_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, KeepAlive keep);
  WorkHandle start_reduce_scatter(const void* input, int64_t in_count, void* output, int64_t out_count, DType dtype,
                                  ReduceOp op, KeepAlive keep);
  WorkHandle start_all_gather(const void* input, int64_t in_count, void* output, int64_t out_count, DType dtype,
                              KeepAlive keep);
  WorkHandle start_all_to_all_v(const void* input, int64_t in_count, const std::vector<int64_t>& send_counts,
                                void* output, int64_t out_count, const std::vector<int64_t>& recv_counts, DType dtype,
                                KeepAlive keep);
  WorkHandle start_broadcast(void* data, int64_t count, DType dtype, int root, KeepAlive keep);
  WorkHandle start_send(const void* data, int64_t count, DType dtype, int peer, int tag, KeepAlive keep);
  WorkHandle start_recv(void* data, int64_t count, DType dtype, int peer, int tag, KeepAlive keep);

  void run_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op);
  void run_reduce_scatter(const void* input, int64_t in_count, void* output, int64_t out_count, DType dtype,
                          ReduceOp op);
  void run_all_gather(const void* input, int64_t in_count, void* output, int64_t out_count, DType dtype);
  void run_all_to_all_v(const void* input, int64_t in_count, const std::vector<int64_t>& send_counts, void* output,
                        int64_t out_count, const std::vector<int64_t>& recv_counts, DType dtype);
  void run_send(const void* data, int64_t count, DType dtype, int peer, int tag);
  void run_recv(void* data, int64_t count, DType dtype, int peer, int tag);
  void run_broadcast(void* data, int64_t count, DType dtype, int root);
  void check_dtype(DType dtype, const char* op) const;
  void check_peer(int peer, const char* op) const;

  std::string axis_;
  int rank_ = 0;
  std::vector<int> members_;
  mutable std::mutex stats_mutex_;
  CommStats stats_;
  // Shared with the sub-groups split_subgroup made (which may outlive this group): they add their
  // bytes to it, and to the cells of this group's own parents (subgroup_sinks_).
  struct StatsCell {
    std::mutex mutex;
    CommStats stats;
  };
  std::shared_ptr<StatsCell> subgroup_cell_ = std::make_shared<StatsCell>();
  std::vector<std::shared_ptr<StatsCell>> subgroup_sinks_;
  std::unique_ptr<CommThread> comm_thread_;  // started by the first asynchronous op
};

// A group of one: every collective is a copy (or nothing). `world_rank` is this process's rank
// in the world (0 without a launcher).
std::unique_ptr<ProcessGroup> make_single_rank_group(std::string axis, int world_rank = 0);

// Text across ranks (run directories, checkpoint metadata): every rank's string on every rank,
// and the root's string on every rank.
std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& mine);
std::string broadcast_string(ProcessGroup& group, const std::string& value, int root);

// Reduces `count` elements of `srcs` (one pointer per rank, in rank order) into dst with `op`;
// floating sums run in rank order, bf16 accumulates in fp32 and rounds once. Shared by the
// implementations so every backend reduces alike.
void reduce_in_rank_order(const std::vector<const void*>& srcs, void* dst, int64_t count, DType dtype, ReduceOp op);

}  // namespace loom::dist
