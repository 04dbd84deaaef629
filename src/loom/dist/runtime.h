// The distributed runtime of one process: how it was launched (mpirun / `loom launch`, or alone),
// MPI start-up and shut-down, the world group, and the failure path. A rank that fails must take
// every rank down with its message (docs/distributed.md "Failure behaviour"), never leave them
// waiting in a collective: run_guarded() catches, prints "[rank R] error: ..." and aborts the
// world.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "loom/dist/process_group.h"

namespace loom::dist {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  bool under_launcher = false;  // started by mpirun/mpiexec (Open MPI, PMIx or Hydra variables)
};
// Reads the launcher's environment (OMPI_COMM_WORLD_*, PMIX_RANK, PMI_RANK/PMI_SIZE).
LaunchInfo detect_launch();

class Runtime {
 public:
  // Starts the runtime once (later calls return the same one). Under a launcher MPI is
  // initialised (MPI_THREAD_MULTIPLE: the watchdog aborts from its own thread); alone, or with
  // LOOM_DIST_BACKEND=single, the world is a one-rank group and MPI is never touched.
  static Runtime& init(int* argc = nullptr, char*** argv = nullptr);
  // The started runtime or null.
  static Runtime* get();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool uses_mpi() const { return uses_mpi_; }
  const std::shared_ptr<ProcessGroup>& world() const { return world_; }

  // Barrier, then MPI_Finalize (also run at normal exit when forgotten).
  void finalize();

 private:
  Runtime() = default;
  int rank_ = 0, world_size_ = 1;
  bool uses_mpi_ = false;
  bool finalized_ = false;
  std::shared_ptr<ProcessGroup> world_;
};

// Prints `message` prefixed with the rank to stderr and ends every rank with `code`
// (MPI_Abort when MPI is running, else this process only).
[[noreturn]] void abort_all(int code, const std::string& message);

// Runs body; an exception ends every rank with exit code 1 and its message.
int run_guarded(const std::function<int()>& body);

}  // namespace loom::dist
