// Communication/computation overlap of the asynchronous ops (process_group.h, comm_thread.h):
// per size, the time of
//   blocking   all_gather of N MB, then a GEMM of about the same duration
//   async      iall_gather started, the same GEMM, wait()
// and the overlap fraction (blocking - async) / min(comm, gemm): 1 when the shorter of the two
// hides completely behind the other, 0 when nothing overlaps. Each time is the slowest rank's
// after a barrier, median over --reps (blocking and async runs alternate). Also the async gather
// alone, and how much of a core its communication thread keeps busy. Prints the CPU, the MPI
// library and transport, then one RESULT {json} line per size from rank 0. Run it at no more
// ranks than cores, one compute thread per rank (bench/comm_overlap.sh). --gemm-on rank0 leaves
// the other ranks idle: where every core computes, the communication thread has none to copy on;
// with a core free it shows what the scheme overlaps when it gets one.
//
//   mpirun -np 2 --bind-to none build/bench/bench_comm_overlap --mb 4,16,64 --reps 11
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/autograd/grad_mode.h"
#include "loom/core/parallel.h"
#include "loom/core/rng.h"
#include "loom/dist/runtime.h"
#include "loom/ops/linear.h"
#include "loom/runtime/cpu/cpu_peak.h"
#include "cpu_path.h"

#ifdef LOOM_HAVE_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

using namespace loom;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

std::string mpi_library() {
#ifdef LOOM_HAVE_MPI
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, static_cast<size_t>(len));
  return v.substr(0, v.find_first_of(",\n"));
#else
  return "none";
#endif
}

// What mpirun was told to use between ranks (Open MPI passes --mca as OMPI_MCA_* variables).
std::string transport() {
  const char* btl = std::getenv("OMPI_MCA_btl");
  const char* pml = std::getenv("OMPI_MCA_pml");
  std::string t = btl ? std::string("btl ") + btl : "btl (Open MPI's default choice)";
  if (pml) t += std::string(", pml ") + pml;
  return t + "; ranks on one host talk through vader (shared memory) when it is listed";
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The slowest rank's time of one run of `body`, started together after a barrier.
template <typename Body>
double timed(dist::ProcessGroup& world, Body&& body) {
  world.barrier();
  const auto t0 = Clock::now();
  body();
  return world.all_reduce_scalar(seconds_since(t0), dist::ReduceOp::max);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Tensor random_matrix(int64_t m, uint64_t seed) {
  Tensor t = Tensor::empty({m, m}, DType::f32);
  fill_uniform(t, -1.0, 1.0, RngState{seed, 3, 0});
  return t;
}

std::vector<double> parse_sizes(const std::string& list) {
  std::vector<double> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stod(item));
  LOOM_CHECK(!out.empty(), ValueError, "--mb needs a comma-separated list of sizes in MB, e.g. 16,64");
  return out;
}

int run(int argc, char** argv, dist::Runtime& rt) {
  std::string sizes = "4,16,64";
  int reps = 7;
  bool gemm_on_every_rank = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { LOOM_CHECK(i + 1 < argc, ValueError, a, " needs a value"); return argv[++i]; };
    if (a == "--mb") sizes = next();
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--gemm-on") {
      const std::string v = next();
      LOOM_CHECK(v == "all" || v == "rank0", ValueError, "--gemm-on must be all or rank0, got '", v, "'");
      gemm_on_every_rank = v == "all";
    } else LOOM_THROW(ValueError, "unknown option ", a, "; use --mb 4,16,64 --reps 7 --gemm-on all|rank0");
  }
  apply_thread_env();
  autograd::NoGradGuard no_grad;
  dist::ProcessGroup& world = *rt.world();
  const int n = world.size();
  LOOM_CHECK(n >= 2, ValueError, "bench_comm_overlap needs at least 2 ranks (mpirun -np 2 ...)");
  const unsigned cores = std::thread::hardware_concurrency();
  if (rt.rank() == 0) {
    std::printf("cpu: %s (%u logical cores)\n", runtime::cpu::cpu_model_name().c_str(), cores);
    std::printf("cpu matrix path: %s\n", bench::cpu_matrix_path().c_str());
    std::printf("mpi: %s; %s\n", mpi_library().c_str(), transport().c_str());
    std::printf("ranks: %d, compute threads per rank: %d, GEMM on %s, reps: %d (median of the slowest rank)\n", n,
                num_threads(), gemm_on_every_rank ? "every rank" : "rank 0 only", reps);
    if (static_cast<unsigned>(n * (num_threads() + 1)) > cores)
      std::printf("note: %d ranks x (%d compute + 1 communication thread) > %u cores: the communication threads "
                  "share cores with the GEMMs\n", n, num_threads(), cores);
  }
  for (double mb : parse_sizes(sizes)) {
    const int64_t chunk = static_cast<int64_t>(mb * 1e6 / 4 / n);  // f32 elements per rank
    std::vector<float> mine(static_cast<size_t>(chunk), 1.0f + static_cast<float>(rt.rank()));
    std::vector<float> gathered(static_cast<size_t>(chunk * n));
    auto gather = [&] { world.all_gather(std::span<const float>(mine), std::span<float>(gathered)); };
    gather();  // first touch of the buffers and of MPI's connections
    std::vector<double> comm;
    for (int i = 0; i < reps; ++i) comm.push_back(timed(world, gather));
    const double t_comm = median(comm);
    // The same gather started and waited on with nothing else to do: what the thread scheme costs
    // in time, and how much of a core the communication thread keeps busy meanwhile (the caller
    // sleeps in wait(), so the process's CPU time is the thread's).
    std::vector<double> async_alone;
    double cpu_s = 0, wall_s = 0;
    for (int i = 0; i < reps; ++i) {
      async_alone.push_back(timed(world, [&] {
        const double c0 = process_cpu_seconds();
        const auto t0 = Clock::now();
        world.iall_gather(std::span<const float>(mine), std::span<float>(gathered))->wait();
        wall_s += seconds_since(t0);
        cpu_s += process_cpu_seconds() - c0;
      }));
    }
    const double t_async_alone = median(async_alone);
    const double comm_cpu = world.all_reduce_scalar(cpu_s / wall_s, dist::ReduceOp::max);

    // A square GEMM sized to take about t_comm: scaled from a first guess twice, with rank 0's
    // choice for every rank.
    int64_t side = 256;
    for (int round = 0; round < 2; ++round) {
      Tensor a = random_matrix(side, 1), b = random_matrix(side, 2);
      std::vector<double> t;
      for (int i = 0; i < 3; ++i) t.push_back(timed(world, [&] { ops::matmul(a, b); }));
      const double scaled = static_cast<double>(side) * std::cbrt(t_comm / std::max(median(t), 1e-6));
      side = std::clamp<int64_t>(static_cast<int64_t>(scaled) / 16 * 16, 64, 8192);
      world.broadcast(std::span<int64_t>(&side, 1), 0);
    }
    Tensor a = random_matrix(side, 3), b = random_matrix(side, 4);
    const bool computes = gemm_on_every_rank || rt.rank() == 0;
    auto gemm = [&] {
      if (computes) ops::matmul(a, b);
    };
    gemm();
    // The two schedules alternate, so that both see the same load on a shared machine.
    std::vector<double> gemm_only, blocking, async;
    for (int i = 0; i < reps; ++i) {
      gemm_only.push_back(timed(world, gemm));
      blocking.push_back(timed(world, [&] {
        gather();
        gemm();
      }));
      async.push_back(timed(world, [&] {
        dist::WorkHandle h = world.iall_gather(std::span<const float>(mine), std::span<float>(gathered));
        gemm();
        h->wait();
      }));
    }
    const double t_gemm = median(gemm_only), t_blocking = median(blocking), t_async = median(async);
    for (int p = 0; p < n; ++p)  // the async gather delivered every rank's block
      LOOM_CHECK(gathered[static_cast<size_t>(p * chunk)] == 1.0f + static_cast<float>(p), Error,
                 "bench_comm_overlap: the gathered block of rank ", p, " is wrong");
    const double hidden = t_blocking - t_async;
    const double overlap = hidden / std::min(t_comm, t_gemm);
    if (rt.rank() == 0) {
      std::printf("all_gather %.0f MB (%.1f MB per rank): comm %.2f ms (async alone %.2f ms, comm thread busy %.0f%% "
                  "of it), gemm %lldx%lld %.2f ms | blocking %.2f ms, async %.2f ms, hidden %.2f ms, overlap %.0f%%\n",
                  mb, mb / n, t_comm * 1e3, t_async_alone * 1e3, comm_cpu * 100, static_cast<long long>(side),
                  static_cast<long long>(side), t_gemm * 1e3, t_blocking * 1e3, t_async * 1e3, hidden * 1e3,
                  overlap * 100);
      Json r = {{"ranks", n},
                {"gemm_on", gemm_on_every_rank ? "all" : "rank0"},
                {"threads_per_rank", num_threads()},
                {"cores", cores},
                {"gathered_mb", mb},
                {"gemm_side", side},
                {"comm_s", t_comm},
                {"async_alone_s", t_async_alone},
                {"comm_thread_cpu_fraction", comm_cpu},
                {"gemm_s", t_gemm},
                {"blocking_s", t_blocking},
                {"async_s", t_async},
                {"overlap_fraction", overlap}};
      std::printf("RESULT %s\n", r.dump().c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime& rt = dist::Runtime::init(&argc, &argv);
  return dist::run_guarded([&] { return run(argc, argv, rt); });
}
