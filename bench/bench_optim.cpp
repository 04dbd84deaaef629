// Optimizer benchmarks: the fused AdamW pass against a STREAM-style triad over buffers of the
// same size in the same run (the update is memory-bound, so bandwidth is the figure of merit),
// and one Muon step (5 bf16-emulated Newton–Schulz iterations) on a 4096×4096 weight.
//
//   ./build/bench/bench_optim                      # everything (the 4096² Muon step takes a while)
//   ./build/bench/bench_optim --benchmark_filter=AdamW|Stream
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "loom/core/parallel.h"
#include "loom/core/tensor.h"
#include "loom/kernels/cpu/optimizer.h"
#include "loom/optim/muon.h"
#include "cpu_path.h"
#include "loom/runtime/cpu/cpu_peak.h"

using namespace loom;
using namespace loom::optim;

namespace {

// 16M floats = 64 MiB per buffer: far beyond any cache.
constexpr int64_t kElems = int64_t{1} << 24;
constexpr int64_t kGrain = 1 << 15;

// One optimizer's worth of n elements (parameter, grad, moments, bf16 copy), also as tensors.
struct Buffers {
  int64_t n;
  std::vector<float> p, g, m, v;
  std::vector<bf16> p16;
  Buffers(int64_t elems, float m0, float v0)
      : n(elems), p(elems, 0.5f), g(elems, 1e-3f), m(elems, m0), v(elems, v0), p16(elems) {}
  Tensor tp = Tensor::from_blob(p.data(), {n}, DType::f32);
  Tensor tg = Tensor::from_blob(g.data(), {n}, DType::f32);
  Tensor tm = Tensor::from_blob(m.data(), {n}, DType::f32);
  Tensor tv = Tensor::from_blob(v.data(), {n}, DType::f32);
  Tensor tp16 = Tensor::from_blob(p16.data(), {n}, DType::bf16);
};

Buffers& buffers() {
  static Buffers b(kElems, 0.f, 0.f);
  return b;
}

void BM_AdamWFusedF32(benchmark::State& state) {
  Buffers& b = buffers();
  const kernels::AdamWScalars s = adamw_scalars(1e-4, 0.01, 0.9, 0.95, 1e-8, 10);
  for (auto _ : state) {
    kernels::cpu::adamw_update(b.tp, b.tg, b.tm, b.tv, nullptr, s);
    benchmark::ClobberMemory();
  }
  // read p, g, m, v + write p, m, v
  state.SetBytesProcessed(state.iterations() * kElems * 7 * int64_t{sizeof(float)});
}

void BM_AdamWFusedBf16Param(benchmark::State& state) {
  Buffers& b = buffers();
  const kernels::AdamWScalars s = adamw_scalars(1e-4, 0.01, 0.9, 0.95, 1e-8, 10);
  for (auto _ : state) {
    kernels::cpu::adamw_update(b.tp, b.tg, b.tm, b.tv, &b.tp16, s);
    benchmark::ClobberMemory();
  }
  // read p, g, m, v + write p, m, v (fp32) + write the bf16 model copy
  state.SetBytesProcessed(state.iterations() * kElems * (7 * 4 + 2));
}

// STREAM triad a = b + s·c on three of the same buffers, same chunking.
void BM_StreamTriad(benchmark::State& state) {
  Buffers& b = buffers();
  float* a = b.m.data();
  const float* x = b.p.data();
  const float* y = b.g.data();
  for (auto _ : state) {
    parallel_for(0, kElems, kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) a[i] = x[i] + 0.5f * y[i];
    });
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElems * 3 * int64_t{sizeof(float)});
}

// The AdamW access pattern (read 4 streams, write 3 of them back) with trivial arithmetic: the
// bandwidth ceiling of the update itself.
void BM_StreamRead4Write3(benchmark::State& state) {
  Buffers& b = buffers();
  float *p = b.p.data(), *m = b.m.data(), *v = b.v.data();
  const float* g = b.g.data();
  for (auto _ : state) {
    parallel_for(0, kElems, kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {
        p[i] = p[i] + g[i];
        m[i] = m[i] + g[i];
        v[i] = v[i] + g[i];
      }
    });
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElems * 7 * int64_t{sizeof(float)});
}

// The non-finite guard's cost on size A (configs/bench/size_a.yaml: 7,342,336 parameters in
// fp32): the decision pass (adamw_update_is_finite, reads p, g, m, v) against the write pass it
// precedes, and the per-step check it replaced (a sum of squares over the updated parameters).
constexpr int64_t kSizeA = 7342336;

// Size A's parameter count with moments mid-training (m, v away from zero).
Buffers& size_a() {
  static Buffers a(kSizeA, 1e-4f, 1e-6f);
  return a;
}

void BM_SizeA_AdamWWritePass(benchmark::State& state) {
  Buffers& a = size_a();
  const kernels::AdamWScalars s = adamw_scalars(3e-4, 0.1, 0.9, 0.95, 1e-8, 10);
  for (auto _ : state) {
    kernels::cpu::adamw_update(a.tp, a.tg, a.tm, a.tv, nullptr, s);
    benchmark::ClobberMemory();
  }
}

void BM_SizeA_AdamWDecisionPass(benchmark::State& state) {
  Buffers& a = size_a();
  const kernels::AdamWScalars s = adamw_scalars(3e-4, 0.1, 0.9, 0.95, 1e-8, 10);
  for (auto _ : state) benchmark::DoNotOptimize(kernels::cpu::adamw_update_is_finite(a.tp, a.tg, a.tm, a.tv, DType::f32, s));
}

void BM_SizeA_ReplacedSumOfSquaresCheck(benchmark::State& state) {
  Buffers& a = size_a();
  for (auto _ : state) benchmark::DoNotOptimize(kernels::cpu::sum_squares(a.tp));
}

void BM_MuonStep(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor w = Tensor::full({n, n}, 0.01);
  w.set_requires_grad(true);
  std::vector<float> g(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n * n; ++i) g[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  w.set_grad(Tensor::from_vector(g, {n, n}));
  MuonModelInfo model;
  model.multi_latent_attention = true;
  Muon opt({{"decoder.layers.0.self_attention.linear_proj.weight", w}}, MuonOptions{}, model);
  for (auto _ : state) opt.step_with_lr(2e-2);
  // Newton–Schulz FLOPs: per iteration X·Xᵀ and A·A as SYRK (n³ each), B·X as GEMM (2n³).
  state.counters["NS_GFLOP/s"] = benchmark::Counter(
      5.0 * 4.0 * double(n) * n * n * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_StreamTriad)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_StreamRead4Write3)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_AdamWFusedF32)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_AdamWFusedBf16Param)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_SizeA_AdamWWritePass)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_SizeA_AdamWDecisionPass)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_SizeA_ReplacedSumOfSquaresCheck)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_MuonStep)->Arg(1024)->Arg(4096)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// Prints the ratio lines after the usual table.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end()) gbps[r.benchmark_name()] = it->second.value / 1e9;
      if (r.benchmark_name().rfind("BM_MuonStep", 0) == 0)
        muon_ms[r.benchmark_name()] = r.GetAdjustedRealTime();
      if (r.benchmark_name().rfind("BM_SizeA_", 0) == 0) size_a_ms[r.benchmark_name()] = r.GetAdjustedRealTime();
    }
  }
  std::map<std::string, double> gbps, muon_ms, size_a_ms;
};

double find(const std::map<std::string, double>& m, const std::string& prefix) {
  for (const auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) return v;
  return 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  apply_thread_env();
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("cpu_matrix_path", bench::cpu_matrix_path());
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const double triad = find(reporter.gbps, "BM_StreamTriad");
  const double same = find(reporter.gbps, "BM_StreamRead4Write3");
  const double adam = find(reporter.gbps, "BM_AdamWFusedF32");
  const double adam16 = find(reporter.gbps, "BM_AdamWFusedBf16Param");
  std::printf("\ncpu: %s, fp32 path, threads: %d\n", runtime::cpu::cpu_model_name().c_str(), num_threads());
  if (triad > 0 && adam > 0)
    std::printf("fused AdamW (fp32): %.2f GB/s = %.0f%% of stream triad (%.2f GB/s)\n", adam,
                100.0 * adam / triad, triad);
  if (same > 0 && adam > 0)
    std::printf("fused AdamW (fp32): %.0f%% of the same read-4/write-3 stream (%.2f GB/s)\n",
                100.0 * adam / same, same);
  if (triad > 0 && adam16 > 0)
    std::printf("fused AdamW (bf16 param + fp32 master): %.2f GB/s = %.0f%% of stream triad\n",
                adam16, 100.0 * adam16 / triad);
  const double write = find(reporter.size_a_ms, "BM_SizeA_AdamWWritePass");
  const double decide = find(reporter.size_a_ms, "BM_SizeA_AdamWDecisionPass");
  const double squares = find(reporter.size_a_ms, "BM_SizeA_ReplacedSumOfSquaresCheck");
  if (write > 0 && decide > 0)
    std::printf("non-finite guard, AdamW on size A (%lld fp32 params): write pass %.2f ms, decision pass %.2f ms "
                "(+%.0f%% of the update); the post-update sum-of-squares check it replaces %.2f ms: net %+.2f ms per step\n",
                static_cast<long long>(kSizeA), write, decide, 100.0 * decide / write, squares, decide - squares);
  for (const auto& [name, ms] : reporter.muon_ms)
    std::printf("%s: one Muon step %.1f ms\n", name.c_str(), ms);
  return 0;
}
