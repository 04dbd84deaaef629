#include "loom/core/parallel.h"

#include <cblas.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "loom/core/error.h"

namespace loom {
namespace {
int g_threads = 0;
}

int num_threads() {
  if (g_threads == 0) {
    if (!apply_thread_env()) set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }
  return g_threads;
}

void set_num_threads(int n) {
  LOOM_CHECK(n >= 1, ValueError, "thread count must be >= 1, got ", n);
  g_threads = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

bool apply_thread_env() {
  const char* env = std::getenv("LOOM_NUM_THREADS");
  if (!env || !*env) return false;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  LOOM_CHECK(end && *end == '\0' && n >= 1 && n <= 4096, ValueError,
             "LOOM_NUM_THREADS='", env, "' is not a positive integer: set it to the number of "
             "threads to use, e.g. LOOM_NUM_THREADS=2");
  set_num_threads(static_cast<int>(n));
  return true;
}

bool in_parallel_region() { return omp_in_parallel(); }

}  // namespace loom
