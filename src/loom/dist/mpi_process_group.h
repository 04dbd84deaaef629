// The MPI implementation of ProcessGroup (built when LOOM_HAVE_MPI; see mpi_process_group.cpp
// for why the collectives are written on point-to-point transfers). mpi.h stays out of this
// header so that layers above never see MPI.
#pragma once

#include <memory>

#include "loom/dist/process_group.h"

#ifdef LOOM_HAVE_MPI

namespace loom::dist {

class MpiProcessGroup final : public ProcessGroup {
 public:
  // MPI_COMM_WORLD as a group (MPI must be initialised: see runtime.h).
  static std::unique_ptr<MpiProcessGroup> world();
  ~MpiProcessGroup() override;

  std::unique_ptr<ProcessGroup> split(std::string axis, const std::vector<int>& members) override;

 protected:
  void do_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override;
  void do_reduce_scatter(const void* input, void* output, int64_t chunk, DType dtype, ReduceOp op) override;
  void do_all_gather(const void* input, void* output, int64_t chunk, DType dtype) override;
  void do_all_to_all_v(const void* input, const std::vector<int64_t>& send_counts, void* output,
                       const std::vector<int64_t>& recv_counts, DType dtype) override;
  void do_send(const void* data, int64_t count, DType dtype, int peer, int tag) override;
  void do_recv(void* data, int64_t count, DType dtype, int peer, int tag) override;
  void do_broadcast(void* data, int64_t count, DType dtype, int root) override;
  void do_barrier() override;
  std::unique_ptr<PendingTransfer> do_isend(const void* data, int64_t count, DType dtype, int peer, int tag) override;
  std::unique_ptr<PendingTransfer> do_irecv(void* data, int64_t count, DType dtype, int peer, int tag) override;

 private:
  // `comm` points at an MPI_Comm this group takes over.
  MpiProcessGroup(std::string axis, void* comm, std::vector<int> members, int rank);
  // One exchange of the collectives' algorithms (peers are group ranks; MPI_PROC_NULL skips a side).
  void sendrecv(const void* send, int64_t send_count, int dst, void* recv, int64_t recv_count, int src, DType dtype);

  struct Comms;
  Comms* comms_;
};

}  // namespace loom::dist

#endif  // LOOM_HAVE_MPI
