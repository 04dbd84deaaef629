// ProcessGroup: the collectives a group of ranks runs together (DESIGN.md "Distributed"), over
// MPI on CPU (NCCL on GPU later) or over one rank alone, so every code path also runs without
// mpirun. Buffers are typed spans counted in elements, never bytes; float32, bfloat16, float64,
// int64 and int32 are supported. bfloat16 travels as bfloat16 but is reduced in fp32 (rounded
// once at the end), as NCCL does.
//
// Floating-point sums are reduced in rank order (((r0 + r1) + r2) + ...) whatever the group
// size, so a data-parallel gradient equals the one process sum of the same micro-batches bit for
// bit (semantics.md §6.3: parity by layout). The algorithms move (n-1)/n of the buffer per rank,
// like a ring, and every byte handed to the transport is counted in stats().
//
// Every collective runs under the watchdog (watchdog.h): one that does not finish within the
// timeout aborts every rank, naming the rank, the op and the mesh axis.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/tensor.h"

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
  double seconds = 0;  // wall time inside collectives (waiting for peers included)
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  // The mesh axis this group spans ("world", "fsdp", "dp_replicate", ...): named in errors.
  const std::string& axis() const { return axis_; }
  // World ranks of the members, in group-rank order.
  const std::vector<int>& members() const { return members_; }
  CommStats stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

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

  // Contiguous tensors of a supported dtype (any shape; counted by numel).
  void all_reduce(const Tensor& data, ReduceOp op = ReduceOp::sum);
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::sum);
  void all_gather(const Tensor& input, const Tensor& output);
  void broadcast(const Tensor& data, int root);

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

  CommStats stats_;

 private:
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
