// How many compute threads a `loom` process uses: --threads N when given (at most the cores),
// else LOOM_NUM_THREADS, else every core for one process and the host's cores shared out when
// several processes share a host (loom launch sets LOOM_NUM_THREADS itself).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "loom/core/log.h"
#include "loom/core/parallel.h"

namespace loom::app {

inline void use_process_threads(int requested, int world_size) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (requested > 0) {
    // More threads than cores only time-slice them (and the peak FLOP/s, so MFU, would be wrong).
    if (requested > cores) {
      log::warn("--threads ", requested, " is more than the ", cores, " cores available; using ", cores);
      requested = cores;
    }
    set_num_threads(requested);
  } else if (world_size > 1 && !std::getenv("LOOM_NUM_THREADS")) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int per_host = local ? std::max(1, std::atoi(local)) : world_size;
    set_num_threads(std::max(1, cores / per_host));
  }
}

}  // namespace loom::app
