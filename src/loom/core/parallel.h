// Threading. One OpenMP pool serves our kernels and OpenBLAS (its OpenMP flavour), so the two
// never oversubscribe the cores. The thread count comes from LOOM_NUM_THREADS, else the config,
// else the number of cores.
#pragma once

#include <algorithm>
#include <cstdint>
#include <omp.h>

namespace loom {

int num_threads();
// Sets the thread count for our kernels and for OpenBLAS.
void set_num_threads(int n);
// Applies LOOM_NUM_THREADS when set (returns true), otherwise leaves the count alone.
bool apply_thread_env();
bool in_parallel_region();

// Calls fn(begin, end) on contiguous chunks of [begin, end) of at least `grain` items, spread over
// the threads. Chunks are a pure function of (range, grain, threads); kernels whose results must
// not depend on the thread count must not reduce across chunks (see parallel_reduce_fixed).
template <typename Fn>
void parallel_for(int64_t begin, int64_t end, int64_t grain, Fn&& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int threads = num_threads();
  if (threads <= 1 || n <= grain || omp_in_parallel()) {
    fn(begin, end);
    return;
  }
  const int64_t max_chunks = (n + grain - 1) / std::max<int64_t>(grain, 1);
  const int use = static_cast<int>(std::min<int64_t>(threads, max_chunks));
#pragma omp parallel num_threads(use)
  {
    const int t = omp_get_thread_num();
    const int64_t chunk = (n + use - 1) / use;
    const int64_t b = begin + t * chunk;
    const int64_t e = std::min(end, b + chunk);
    if (b < e) fn(b, e);
  }
}

}  // namespace loom
