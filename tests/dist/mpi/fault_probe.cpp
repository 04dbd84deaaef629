// Fault probes for the multi-process failure paths (run by tests/dist/expect_abort.sh):
//   hang   rank 0 enters an all_reduce that rank 1 never joins: the watchdog must abort all ranks
//   irecv  rank 0 posts an irecv that rank 1 never matches and computes on without waiting: the
//          watchdog watches the handle from issue and must abort all ranks
//   throw  rank 1 throws while the others wait in a barrier: every rank must exit non-zero
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "loom/core/error.h"
#include "loom/dist/runtime.h"

int main(int argc, char** argv) {
  using namespace loom::dist;
  Runtime& rt = Runtime::init(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  return run_guarded([&] {
    if (mode == "hang") {
      std::vector<float> v(16, 1.0f);
      if (rt.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(120));
      else rt.world()->all_reduce(std::span<float>(v));
    } else if (mode == "irecv") {
      std::vector<float> v(16);
      WorkHandle pending;
      if (rt.rank() == 0) pending = rt.world()->irecv(std::span<float>(v), 1, 3);
      std::this_thread::sleep_for(std::chrono::seconds(120));
    } else if (mode == "throw") {
      if (rt.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        LOOM_THROW(ValueError, "probe failure on rank ", rt.rank());
      }
      rt.world()->barrier();
    } else {
      LOOM_THROW(ValueError, "usage: dist_fault_probe hang|irecv|throw");
    }
    std::printf("rank %d: unexpectedly finished\n", rt.rank());
    return 0;
  });
}
