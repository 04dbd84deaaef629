// Memory-bound fused ops against a stream-copy bandwidth figure measured in the same run
// (target: memory-bound ops at least 50% of stream copy). Each case prints GB/s (minimal traffic:
// every input read once, every output written once) and vs_copy = GB/s / stream-copy GB/s.
// Shapes: rms_norm [4096, 768], swiglu [2048, 2048], rope [4, 512, 12, 64], cross_entropy over a
// 32k vocabulary with 2048 tokens; linear_cross_entropy (size B head: 2048 × 768 → 32000) next to
// linear + cross_entropy, with GFLOP/s and the peak memory of a forward+backward.
// Run: ./build/bench/bench_ops (BM_stream_copy runs first; the ratios need it).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <string>

#include "loom/autograd/engine.h"
#include "loom/core/allocator.h"
#include "loom/core/parallel.h"
#include "loom/core/rng.h"
#include "loom/kernels/cpu/cross_entropy.h"
#include "loom/kernels/cpu/elementwise.h"
#include "loom/kernels/cpu/swiglu.h"
#include "loom/kernels/cpu/norm.h"
#include "loom/kernels/cpu/rope.h"
#include "loom/ops/linear.h"
#include "loom/ops/loss.h"
#include "loom/ops/rope.h"
#include "cpu_path.h"

using namespace loom;
namespace k = loom::kernels::cpu;

namespace {

double g_stream_gbps = 0;  // set by BM_stream_copy

Tensor random(const Shape& s, uint64_t seed, DType dtype = DType::f32, double stddev = 1.0) {
  Tensor t = Tensor::empty(s);
  fill_normal(t, 0, stddev, RngState{seed, 1, 0});
  return t.to(dtype);
}

// Runs body once per iteration, timing each call, and reports GB/s for `bytes` moved per call:
// GB/s from the fastest call (the machine is shared: a neighbour stalling one of our threads
// inflates the mean, never the best) and mean_GB/s over all calls.
template <typename Body>
void run_memory_bound(benchmark::State& state, double bytes, Body&& body) {
  double seconds = 0, best = 1e30;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += dt;
    best = std::min(best, dt);
  }
  const double gbps = bytes / best / 1e9;
  state.counters["GB/s"] = gbps;
  state.counters["mean_GB/s"] = bytes * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["threads"] = num_threads();
  if (g_stream_gbps > 0) state.counters["vs_copy"] = gbps / g_stream_gbps;
}

// memcpy of 256 MB split over the threads (STREAM "copy": read + write counted).
void BM_stream_copy(benchmark::State& state) {
  const int64_t bytes = int64_t{256} << 20;
  Tensor src = Tensor::empty({bytes / 4}), dst = Tensor::empty({bytes / 4});
  std::memset(src.raw_data(), 1, bytes);
  std::memset(dst.raw_data(), 0, bytes);
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(dst.raw_data());
  run_memory_bound(state, 2.0 * bytes, [&] {
    parallel_for(0, bytes, int64_t{1} << 20, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, e - b); });
    benchmark::ClobberMemory();
  });
  g_stream_gbps = state.counters["GB/s"];
}

void BM_rms_norm_fwd_bwd(benchmark::State& state) {
  const DType dt = state.range(0) ? DType::bf16 : DType::f32;
  state.SetLabel(state.range(0) ? "bf16 [4096, 768]" : "f32 [4096, 768]");
  const int64_t N = 4096, D = 768;
  Tensor x = random({N, D}, 1, dt), w = random({D}, 2, dt), g = random({N, D}, 3, dt);
  // forward reads x, writes y; backward reads g and x, writes dx (weight-sized traffic ignored)
  run_memory_bound(state, 5.0 * N * D * dtype_size(dt), [&] {
    Tensor rstd, dx, dw;
    Tensor y = k::rms_norm(x, w, 1e-6, DType::f32, rstd);
    k::rms_norm_backward(g, x, w, rstd, &dx, &dw);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::DoNotOptimize(dx.raw_data());
  });
}

void BM_swiglu_fwd_bwd(benchmark::State& state) {
  state.SetLabel("f32 [2048, 2048]");
  const int64_t n = 2048 * 2048;
  Tensor gate = random({2048, 2048}, 4), up = random({2048, 2048}, 5), g = random({2048, 2048}, 6);
  // forward reads gate, up, writes out; backward reads g, gate, up, writes d_gate, d_up
  run_memory_bound(state, 8.0 * n * 4, [&] {
    Tensor y = k::swiglu(gate, up);
    Tensor dg, du;
    k::swiglu_backward(g, gate, up, dg, du);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::DoNotOptimize(dg.raw_data());
  });
}

void BM_rope_fwd_bwd(benchmark::State& state) {
  const bool interleaved = state.range(0) != 0;
  state.SetLabel(interleaved ? "f32 [4, 512, 12, 64] interleaved" : "f32 [4, 512, 12, 64] rotate-half");
  const int64_t n = 4 * 512 * 12 * 64;
  Tensor x = random({4, 512, 12, 64}, 7), g = random({4, 512, 12, 64}, 8);
  ops::RopeTable table = ops::make_rope_table(64, 512, 10000.0);
  Tensor pos = Tensor::arange(512, DType::i64);
  // forward reads x, writes y; backward reads g, writes dx (the [512, 32] tables stay in cache)
  run_memory_bound(state, 4.0 * n * 4, [&] {
    Tensor y = k::rope(x, table.cos, table.sin, pos, interleaved, false);
    Tensor dx = k::rope(g, table.cos, table.sin, pos, interleaved, true);
    benchmark::DoNotOptimize(y.raw_data());
    benchmark::DoNotOptimize(dx.raw_data());
  });
}

void BM_cross_entropy_fwd_bwd(benchmark::State& state) {
  const DType dt = state.range(0) ? DType::bf16 : DType::f32;
  state.SetLabel(state.range(0) ? "bf16 logits [2048, 32000]" : "f32 logits [2048, 32000]");
  const int64_t N = 2048, V = 32000;
  Tensor logits = random({N, V}, 9, dt, 2.0);
  Tensor labels = Tensor::empty({N}, DType::i64);
  for (int64_t i = 0; i < N; ++i) labels.data<int64_t>()[i] = (i * 7919) % V;
  Tensor weights = k::cross_entropy_row_weights(labels, Tensor(), -100, V, "bench");
  // forward reads the logits; backward reads them again and writes dlogits
  run_memory_bound(state, 3.0 * N * V * dtype_size(dt), [&] {
    Tensor lse;
    double total = k::cross_entropy_forward(logits, labels, weights, lse);
    Tensor d = k::cross_entropy_backward(logits, labels, weights, lse, 1.0 / N);
    benchmark::DoNotOptimize(total);
    benchmark::DoNotOptimize(d.raw_data());
  });
}

// The LM head + loss of size B: fused chunked version (recomputing backward, or grads formed in
// forward) vs linear then cross_entropy, through autograd.
enum class LmHead { fused_recompute, fused_grads_in_forward, unfused };

void lm_head_case(benchmark::State& state, LmHead mode, int64_t chunk_tokens = 0) {
  const int64_t N = 2048, D = 768, V = 32000;
  Tensor h = random({N, D}, 10), w = random({V, D}, 11, DType::f32, 0.02);
  Tensor labels = Tensor::empty({N}, DType::i64);
  for (int64_t i = 0; i < N; ++i) labels.data<int64_t>()[i] = (i * 7919) % V;
  h.set_requires_grad(true);
  w.set_requires_grad(true);
  int64_t peak = 0;
  for (auto _ : state) {
    h.set_grad(Tensor());
    w.set_grad(Tensor());
    reset_peak_memory();
    const int64_t base = memory_stats().current_bytes;
    Tensor loss = mode == LmHead::unfused
                      ? ops::cross_entropy(ops::linear(h, w), labels)
                      : ops::linear_cross_entropy(h, w, labels, Tensor(), -100, chunk_tokens,
                                                  mode == LmHead::fused_grads_in_forward);
    autograd::backward(loss);
    peak = std::max(peak, memory_stats().peak_bytes - base);
    benchmark::DoNotOptimize(w.grad().raw_data());
  }
  const double gemms = mode == LmHead::fused_recompute ? 4.0 : 3.0;  // recompute: one GEMM more
  state.counters["GFLOP/s"] = benchmark::Counter(gemms * 2.0 * N * D * V, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.counters["peak_MB"] = static_cast<double>(peak) / (1 << 20);
  state.counters["threads"] = num_threads();
}

void BM_linear_cross_entropy_fwd_bwd(benchmark::State& state) {
  state.SetLabel("fused, backward recomputes logits [2048, 768] x [32000, 768]");
  lm_head_case(state, LmHead::fused_recompute);
}

void BM_linear_cross_entropy_grads_in_forward(benchmark::State& state) {
  state.SetLabel("fused, grads in forward, chunk " + std::to_string(state.range(0)) + " [2048, 768] x [32000, 768]");
  lm_head_case(state, LmHead::fused_grads_in_forward, state.range(0));
}

void BM_linear_then_cross_entropy_fwd_bwd(benchmark::State& state) {
  state.SetLabel("linear + cross_entropy [2048, 768] x [32000, 768]");
  lm_head_case(state, LmHead::unfused);
}

}  // namespace

BENCHMARK(BM_stream_copy)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_rms_norm_fwd_bwd)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_swiglu_fwd_bwd)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_rope_fwd_bwd)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_cross_entropy_fwd_bwd)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_linear_cross_entropy_fwd_bwd)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_linear_cross_entropy_grads_in_forward)->Arg(0)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_linear_then_cross_entropy_fwd_bwd)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

int main(int argc, char** argv) {
  apply_thread_env();
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("cpu_matrix_path", bench::cpu_matrix_path());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
