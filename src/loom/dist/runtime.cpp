#include "loom/dist/runtime.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/dist/mpi_process_group.h"
#include "loom/dist/watchdog.h"

#ifdef LOOM_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: no C++ bindings to link
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace loom::dist {

namespace {

Runtime* g_runtime = nullptr;

bool env_int(const char* name, int* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0') return false;
  *out = static_cast<int>(x);
  return true;
}

bool mpi_running() {
#ifdef LOOM_HAVE_MPI
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
#else
  return false;
#endif
}

void finalize_at_exit() {
  if (g_runtime) g_runtime->finalize();
}

}  // namespace

LaunchInfo detect_launch() {
  LaunchInfo info;
  int rank = 0, size = 1, local = 0;
  if (env_int("OMPI_COMM_WORLD_SIZE", &size) && env_int("OMPI_COMM_WORLD_RANK", &rank)) {
    info.under_launcher = true;
    env_int("OMPI_COMM_WORLD_LOCAL_RANK", &local);
  } else if (env_int("PMI_SIZE", &size) && env_int("PMI_RANK", &rank)) {
    info.under_launcher = true;
    env_int("MPI_LOCALRANKID", &local);
  } else if (env_int("PMIX_RANK", &rank)) {
    info.under_launcher = true;
    size = -1;  // known only after MPI_Init
  }
  info.rank = rank;
  info.world_size = size;
  info.local_rank = local;
  return info;
}

Runtime& Runtime::init(int* argc, char*** argv) {
  static std::once_flag once;
  std::call_once(once, [&] {
    auto* rt = new Runtime();  // lives for the process
    const LaunchInfo launch = detect_launch();
    const char* backend = std::getenv("LOOM_DIST_BACKEND");
    const bool force_single = backend && std::strcmp(backend, "single") == 0;
#ifdef LOOM_HAVE_MPI
    if (launch.under_launcher && !force_single) {
      int provided = 0;
      const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
      LOOM_CHECK(rc == MPI_SUCCESS, DistError, "MPI_Init_thread failed (code ", rc,
                 "); check the mpirun command line (loom launch prints the one that works here)");
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      auto world = MpiProcessGroup::world();
      rt->rank_ = world->rank();
      rt->world_size_ = world->size();
      rt->world_ = std::move(world);
      rt->uses_mpi_ = true;
      if (provided < MPI_THREAD_MULTIPLE && rt->rank_ == 0)
        std::fprintf(stderr, "warning: MPI provides thread level %d, not MPI_THREAD_MULTIPLE; a collective timeout "
                             "may not be able to abort the other ranks\n", provided);
    }
#else
    LOOM_CHECK(!launch.under_launcher || launch.world_size <= 1 || force_single, DistError,
               "this process was started by an MPI launcher with ", launch.world_size,
               " ranks, but Loom was built without MPI (LOOM_WITH_MPI=OFF): rebuild with MPI or run one process");
#endif
    if (!rt->world_) rt->world_ = make_single_rank_group("world", 0);
    log::set_rank(rt->rank_, rt->world_size_);
    Watchdog& wd = Watchdog::instance();
    wd.set_world_rank(rt->rank_);
    if (rt->uses_mpi_) {
#ifdef LOOM_HAVE_MPI
      wd.set_abort_handler([](int code) { MPI_Abort(MPI_COMM_WORLD, code); std::_Exit(code); });
#endif
    }
    g_runtime = rt;
    std::atexit(finalize_at_exit);
  });
  return *g_runtime;
}

Runtime* Runtime::get() { return g_runtime; }

void Runtime::finalize() {
  if (finalized_) return;
  finalized_ = true;
#ifdef LOOM_HAVE_MPI
  if (uses_mpi_ && mpi_running()) {
    world_->barrier();
    world_.reset();
    MPI_Finalize();
  }
#endif
}

void abort_all(int code, const std::string& message) {
  const int rank = g_runtime ? g_runtime->rank() : 0;
  const int world = g_runtime ? g_runtime->world_size() : 1;
  if (world > 1) std::fprintf(stderr, "[rank %d] error: %s\n", rank, message.c_str());
  else std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
#ifdef LOOM_HAVE_MPI
  if (mpi_running() && world > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

int run_guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    abort_all(1, e.what());
  } catch (...) {
    abort_all(1, "unknown exception");
  }
}

}  // namespace loom::dist
