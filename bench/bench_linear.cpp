// Linear forward and both backward GEMMs on the projection shapes of sizes A and B
// (configs/bench/size_a.yaml, size_b.yaml), next to raw OpenBLAS sgemm on the same shapes and
// threads, in one run, and the same forward through oneDNN (fp32, and bf16 where the CPU has bf16
// matrix units), and the bf16 backward next to its two products on oneDNN. Figures: GFLOP/s per
// case; compare loom_* with raw_* / onednn_* of the same shape.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include "loom/autograd/engine.h"
#include "loom/core/parallel.h"
#include "loom/core/rng.h"
#include "loom/kernels/cpu/onednn_gemm.h"
#include "loom/ops/linear.h"
#include "loom/ops/reduce.h"
#include "cpu_path.h"

using namespace loom;

namespace {

struct LinearShape {
  const char* name;
  int64_t tokens, in, out;
};

// tokens = batch · seq; the in/out pairs are the q, kv, mlp-up, mlp-down and lm-head projections.
const LinearShape kShapes[] = {
    {"A_q", 2048, 256, 256},     {"A_kv", 2048, 256, 128},    {"A_up", 2048, 256, 768},
    {"A_down", 2048, 768, 256},  {"A_head", 2048, 256, 8192}, {"B_q", 2048, 768, 768},
    {"B_kv", 2048, 768, 256},    {"B_up", 2048, 768, 2048},   {"B_down", 2048, 2048, 768},
    {"B_head", 2048, 768, 32000},
};

Tensor random(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::empty(s);
  fill_normal(t, 0, 1, RngState{seed, 1, 0});
  return t;
}

void set_threads(benchmark::State& state) { set_num_threads(static_cast<int>(state.range(1))); }

void report(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// y = x·Wᵀ
void BM_loom_linear_forward(benchmark::State& state) {
  set_threads(state);
  const auto& s = kShapes[state.range(0)];
  state.SetLabel(s.name);
  Tensor x = random({s.tokens, s.in}, 1), w = random({s.out, s.in}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(ops::linear(x, w).raw_data());
  report(state, 2.0 * s.tokens * s.in * s.out);
}

void BM_raw_sgemm_forward(benchmark::State& state) {
  set_threads(state);
  const auto& s = kShapes[state.range(0)];
  state.SetLabel(s.name);
  Tensor x = random({s.tokens, s.in}, 1), w = random({s.out, s.in}, 2), y = Tensor::empty({s.tokens, s.out});
  for (auto _ : state)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.tokens, s.out, s.in, 1.f, x.data<float>(), s.in,
                w.data<float>(), s.in, 0.f, y.data<float>(), s.out);
  report(state, 2.0 * s.tokens * s.in * s.out);
}

// Backward through autograd: dx = g·W and dW = gᵀ·x (two GEMMs), timed without the forward. For
// bf16 (what the trainer runs under compute_dtype bf16) dx is bf16 and dW fp32.
void linear_backward(benchmark::State& state, DType dtype) {
  set_threads(state);
  const auto& s = kShapes[state.range(0)];
  state.SetLabel(s.name);
  Tensor x = random({s.tokens, s.in}, 1).to(dtype), w = random({s.out, s.in}, 2).to(dtype);
  Tensor g = random({s.tokens, s.out}, 3).to(dtype);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  for (auto _ : state) {
    state.PauseTiming();
    Tensor y = ops::linear(x, w);
    x.set_grad(Tensor());
    w.set_grad(Tensor());
    state.ResumeTiming();
    autograd::backward(y, g);
  }
  report(state, 4.0 * s.tokens * s.in * s.out);
}
void BM_loom_linear_backward(benchmark::State& state) { linear_backward(state, DType::f32); }

void BM_raw_sgemm_backward(benchmark::State& state) {
  set_threads(state);
  const auto& s = kShapes[state.range(0)];
  state.SetLabel(s.name);
  Tensor x = random({s.tokens, s.in}, 1), w = random({s.out, s.in}, 2), g = random({s.tokens, s.out}, 3);
  Tensor dx = Tensor::empty({s.tokens, s.in}), dw = Tensor::empty({s.out, s.in});
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.tokens, s.in, s.out, 1.f, g.data<float>(), s.out,
                w.data<float>(), s.in, 0.f, dx.data<float>(), s.in);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.out, s.in, s.tokens, 1.f, g.data<float>(), s.out,
                x.data<float>(), s.in, 0.f, dw.data<float>(), s.in);
  }
  report(state, 4.0 * s.tokens * s.in * s.out);
}

// The same product through oneDNN's matmul (cpu/onednn_gemm.h): fp32 operands against OpenBLAS
// above (which library fp32 GEMMs should use), bf16 operands where oneDNN has a bf16 matmul (the
// standalone figure Loom's bf16 linear is measured against).
void onednn_forward(benchmark::State& state, DType dtype) {
  set_threads(state);
  const auto& s = kShapes[state.range(0)];
  Tensor x = random({s.tokens, s.in}, 1).to(dtype), w = random({s.out, s.in}, 2).to(dtype);
  Tensor y = Tensor::empty({s.tokens, s.out}, dtype);
  state.SetLabel(std::string(s.name) + " " + kernels::cpu::onednn_implementation(dtype, s.tokens, s.out, s.in));
  for (auto _ : state) kernels::cpu::onednn_gemm(x, false, w, true, y, 1.0, 0.0);
  report(state, 2.0 * s.tokens * s.in * s.out);
}
void BM_onednn_f32_forward(benchmark::State& state) { onednn_forward(state, DType::f32); }
void BM_onednn_bf16_forward(benchmark::State& state) { onednn_forward(state, DType::bf16); }

// Loom's linear on bf16 activations and weights, on the path the dispatch chose (oneDNN on the
// matrix units; widen, sgemm, round on the fp32 path: compare with BM_raw_sgemm_forward).
void BM_loom_linear_forward_bf16(benchmark::State& state) {
  set_threads(state);
  const auto& s = kShapes[state.range(0)];
  state.SetLabel(s.name);
  Tensor x = random({s.tokens, s.in}, 1).to(DType::bf16), w = random({s.out, s.in}, 2).to(DType::bf16);
  for (auto _ : state) benchmark::DoNotOptimize(ops::linear(x, w).raw_data());
  report(state, 2.0 * s.tokens * s.in * s.out);
}

// The bf16 backward next to the same two products straight on oneDNN.
void BM_loom_linear_backward_bf16(benchmark::State& state) { linear_backward(state, DType::bf16); }

void BM_onednn_bf16_backward(benchmark::State& state) {
  set_threads(state);
  const auto& s = kShapes[state.range(0)];
  Tensor x = random({s.tokens, s.in}, 1).to(DType::bf16), w = random({s.out, s.in}, 2).to(DType::bf16);
  Tensor g = random({s.tokens, s.out}, 3).to(DType::bf16);
  Tensor dx = Tensor::empty({s.tokens, s.in}, DType::bf16), dw = Tensor::empty({s.out, s.in}, DType::f32);
  state.SetLabel(s.name);
  for (auto _ : state) {
    kernels::cpu::onednn_gemm(g, false, w, false, dx, 1.0, 0.0);
    kernels::cpu::onednn_gemm(g, true, x, false, dw, 1.0, 0.0);
  }
  report(state, 4.0 * s.tokens * s.in * s.out);
}

void shapes_and_threads(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (int i = 0; i < static_cast<int>(std::size(kShapes)); ++i) b->Args({i, threads});
  b->ArgNames({"shape", "threads"})->Unit(benchmark::kMillisecond)->MinTime(0.3)->UseRealTime();
}

}  // namespace

// Raw and Loom alternate per shape so drift on this shared machine hits both alike.
BENCHMARK(BM_raw_sgemm_forward)->Apply(shapes_and_threads);
BENCHMARK(BM_loom_linear_forward)->Apply(shapes_and_threads);
BENCHMARK(BM_raw_sgemm_backward)->Apply(shapes_and_threads);
BENCHMARK(BM_loom_linear_backward)->Apply(shapes_and_threads);
BENCHMARK(BM_onednn_f32_forward)->Apply(shapes_and_threads);
BENCHMARK(BM_loom_linear_forward_bf16)->Apply(shapes_and_threads);
BENCHMARK(BM_loom_linear_backward_bf16)->Apply(shapes_and_threads);
int main(int argc, char** argv) {
  if (kernels::cpu::onednn_has_matmul(DType::bf16)) {
    benchmark::RegisterBenchmark("BM_onednn_bf16_forward", BM_onednn_bf16_forward)->Apply(shapes_and_threads);
    benchmark::RegisterBenchmark("BM_onednn_bf16_backward", BM_onednn_bf16_backward)->Apply(shapes_and_threads);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("cpu_matrix_path", bench::cpu_matrix_path());
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
