// Attention forward+backward (ops::attention through autograd) at S = 512 and 2048, head dim 64,
// causal, MHA and GQA, next to raw OpenBLAS sgemm on the attention GEMM shapes in the same run
// and threads; prints a summary with the ratio (target: >= 50% at S = 2048).
//
// FLOP convention (the FlashAttention papers'): forward = 2·B·H·(D + Dv)·pairs, where pairs =
// Sq·Sk for full attention and S·(S+1)/2 for causal (= 4·B·H·S²·D·~0.5 when Dv = D); backward =
// 2.5 × forward (five GEMMs instead of two); forward+backward = 3.5 × forward. Recomputation of P
// in the backward is not counted as useful work. The sgemm reference: [S,64]×[64,S] (QKᵀ shape)
// and [S,S]×[S,64] (PV shape), each 2·S²·64 FLOPs, combined as total FLOPs / total time.
//
// Size B (batch 4, seq 512, 12 heads / 4 kv heads, head dim 64, causal): the kernel's forward and
// backward timed apart, for fp32 inputs, bf16 inputs on the fp32 path (widened to fp32 sgemm
// tiles) and bf16 inputs on the process's matrix path (bf16 tile products where it is a bf16
// path). On CPUs with AVX512-BF16 also the two ways of putting one flash tile on the bf16 units
// side by side, single-threaded: oneDNN's cached matmul primitive on bf16 tiles against the
// kernel's vdpbf16ps micro-kernel (packing from fp32 included), on the QKᵀ [64,64]·[64,256] and
// PV [64,256]·[256,64] tiles.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "loom/autograd/engine.h"
#include "loom/core/parallel.h"
#include "loom/core/rng.h"
#include "loom/kernels/cpu/attention.h"
#include "loom/kernels/cpu/attention_bf16.h"
#include "loom/kernels/cpu/onednn_gemm.h"
#include "loom/ops/attention.h"
#include "cpu_path.h"

using namespace loom;

namespace {

constexpr int64_t kHeadDim = 64;

Tensor random(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::empty(s);
  fill_normal(t, 0, 1, RngState{seed, 3, 0});
  return t;
}

void report(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

double attention_forward_flops(int64_t B, int64_t H, int64_t S, bool causal) {
  const double pairs = causal ? 0.5 * double(S) * double(S + 1) : double(S) * double(S);
  return 2.0 * B * H * (kHeadDim + kHeadDim) * pairs;
}

void attention_fwd_bwd(benchmark::State& state, int64_t S, int64_t H, int64_t KV, int threads) {
  const int64_t B = 1;
  set_num_threads(threads);
  Tensor q = random({B, S, H, kHeadDim}, 1), k = random({B, S, KV, kHeadDim}, 2),
         v = random({B, S, KV, kHeadDim}, 3), dout = random({B, S, H, kHeadDim}, 4);
  q.set_requires_grad(true);
  k.set_requires_grad(true);
  v.set_requires_grad(true);
  ops::AttentionOptions opt;
  opt.softmax_scale = 0.125;
  for (auto _ : state) {
    q.set_grad(Tensor());
    k.set_grad(Tensor());
    v.set_grad(Tensor());
    Tensor out = ops::attention(q, k, v, opt);
    autograd::backward(out, dout);
    benchmark::DoNotOptimize(q.grad().raw_data());
  }
  report(state, 3.5 * attention_forward_flops(B, H, S, true));
}

void attention_fwd(benchmark::State& state, int64_t S, int64_t H, int64_t KV, int threads) {
  const int64_t B = 1;
  set_num_threads(threads);
  Tensor q = random({B, S, H, kHeadDim}, 1), k = random({B, S, KV, kHeadDim}, 2),
         v = random({B, S, KV, kHeadDim}, 3);
  for (auto _ : state) benchmark::DoNotOptimize(ops::attention(q, k, v).raw_data());
  report(state, attention_forward_flops(B, H, S, true));
}

// shape 0: [S,64]×[64,S] (the QKᵀ shape); shape 1: [S,S]×[S,64] (the PV shape).
void sgemm(benchmark::State& state, int64_t S, int shape, int threads) {
  const int64_t D = kHeadDim;
  set_num_threads(threads);
  Tensor a = random({S, D}, 5), b = random({D, S}, 6), c = random({S, S}, 7), d = Tensor::empty({S, D});
  for (auto _ : state) {
    if (shape == 0)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, D, 1.f, a.data<float>(), D,
                  b.data<float>(), S, 0.f, c.data<float>(), S);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, D, S, 1.f, c.data<float>(), S,
                  a.data<float>(), D, 0.f, d.data<float>(), D);
  }
  report(state, 2.0 * double(S) * double(S) * double(D));
}

// ---- Size B through the kernel entry points, on a given path ----------------------------------

namespace kc = kernels::cpu;
constexpr int64_t kB = 4, kS = 512, kH = 12, kKV = 4;

enum class Inputs { f32, bf16_fp32_path, bf16_matrix_path };
const char* inputs_name(Inputs in) {
  return in == Inputs::f32 ? "f32" : in == Inputs::bf16_fp32_path ? "bf16_fp32path" : "bf16_matrixpath";
}

void size_b(benchmark::State& state, Inputs in, bool backward) {
  const DType dt = in == Inputs::f32 ? DType::f32 : DType::bf16;
  const kc::MatrixPath path = in == Inputs::bf16_matrix_path ? kc::matrix_dispatch().path : kc::MatrixPath::fp32;
  Tensor q = random({kB, kS, kH, kHeadDim}, 1).to(dt), k = random({kB, kS, kKV, kHeadDim}, 2).to(dt),
         v = random({kB, kS, kKV, kHeadDim}, 3).to(dt), dout = random({kB, kS, kH, kHeadDim}, 4).to(dt);
  kernels::AttentionMask mask;  // causal
  const double scale = 0.125;
  auto fwd = kc::attention_forward_on(path, q, k, v, scale, mask, false);
  for (auto _ : state) {
    if (backward) {
      auto g = kc::attention_backward_on(path, dout, q, k, v, fwd.out, fwd.lse, scale, mask);
      benchmark::DoNotOptimize(g.dq.raw_data());
    } else {
      auto f = kc::attention_forward_on(path, q, k, v, scale, mask, false);
      benchmark::DoNotOptimize(f.out.raw_data());
    }
  }
  report(state, (backward ? 2.5 : 1.0) * attention_forward_flops(kB, kH, kS, true));
}

std::string size_b_name(Inputs in, bool backward) {
  return std::string("sizeB_") + (backward ? "bwd/" : "fwd/") + inputs_name(in);
}

// ---- One flash tile on the bf16 units: oneDNN matmul vs the vdpbf16ps micro-kernel ----------

// shape 0: S = Q·Kᵀ, [64,64]·[64,256]; shape 1: O += P·V, [64,256]·[256,64]. fp32 output.
void tile_onednn(benchmark::State& state, int shape) {
  const int64_t m = 64, n = shape == 0 ? 256 : 64, k = shape == 0 ? 64 : 256;
  Tensor a = random({m, k}, 8).to(DType::bf16);
  Tensor b = shape == 0 ? random({n, k}, 9).to(DType::bf16) : random({k, n}, 9).to(DType::bf16);
  Tensor c = Tensor::zeros({m, n});
  const int before = num_threads();
  set_num_threads(1);
  for (auto _ : state) kc::onednn_gemm(a, false, b, shape == 0, c, 1.0, shape == 0 ? 0.0 : 1.0);
  set_num_threads(before);
  report(state, 2.0 * m * n * k);
}

void tile_dpbf16(benchmark::State& state, int shape) {
  const int64_t m = 64, n = shape == 0 ? 256 : 64, k = shape == 0 ? 64 : 256;
  // The operands as the kernel holds them: fp32 rows (Q, P) packed per tile; K and V pre-packed.
  Tensor a = random({m, k}, 8).to(DType::bf16).to(DType::f32);
  Tensor b = (shape == 0 ? random({n, k}, 9) : random({k, n}, 9)).to(DType::bf16).to(DType::f32);
  Tensor c = Tensor::zeros({m, n});
  const int64_t kp = (k + 1) / 2;
  std::vector<uint32_t> aw(static_cast<size_t>(m * kp)), bw(static_cast<size_t>(kp * n));
  if (shape == 0) kc::bf16_tiles::pack_cols(b.data<float>(), k, n, k, bw.data(), n);
  else kc::bf16_tiles::pack_pairs(b.data<float>(), n, k, n, bw.data(), n);
  for (auto _ : state) {
    kc::bf16_tiles::pack_rows(a.data<float>(), k, m, k, aw.data());
    kc::bf16_tiles::gemm(m, n, kp, 1.f, aw.data(), kp, 1, bw.data(), n, shape == 0 ? 0.f : 1.f, c.data<float>(), n);
  }
  report(state, 2.0 * m * n * k);
}

// Best GFLOP/s over the repetitions of every run, so the summary can put attention next to the
// sgemm measured moments before it (this machine is shared: the best repetition is the least
// disturbed one).
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      auto it = r.counters.find("GFLOP/s");
      if (it == r.counters.end() || r.run_type != Run::RT_Iteration) continue;
      std::string name = r.benchmark_name();
      name = name.substr(0, name.find("/min_time:"));
      gflops[name] = std::max(gflops[name], it->second.value / 1e9);
      const bool cpu_time = name.rfind("tile_", 0) == 0;  // registered without UseRealTime
      const double t = cpu_time ? r.GetAdjustedCPUTime() : r.GetAdjustedRealTime();
      best_time[name] = best_time.count(name) ? std::min(best_time[name], t) : t;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> gflops;
  std::map<std::string, double> best_time;  // in the benchmark's unit
};

const std::pair<int64_t, int64_t> kHeads[] = {{8, 8}, {8, 2}};  // MHA and GQA (4 q heads per kv head)

std::string sgemm_name(int64_t S, int shape, int threads) {
  return "sgemm/S:" + std::to_string(S) + "/shape:" + std::to_string(shape) + "/threads:" + std::to_string(threads);
}
std::string attention_name(const char* what, int64_t S, int64_t H, int64_t KV, int threads) {
  return std::string(what) + "/S:" + std::to_string(S) + "/H:" + std::to_string(H) + "/KV:" +
         std::to_string(KV) + "/threads:" + std::to_string(threads);
}

}  // namespace

int main(int argc, char** argv) {
  const Inputs kInputs[] = {Inputs::f32, Inputs::bf16_fp32_path, Inputs::bf16_matrix_path};
  for (bool backward : {false, true})
    for (Inputs in : kInputs)
      benchmark::RegisterBenchmark(size_b_name(in, backward).c_str(), size_b, in, backward)
          ->Unit(benchmark::kMillisecond)->MinTime(0.5)->UseRealTime()->Repetitions(3);
  if (kc::matrix_dispatch().features.avx512_bf16)
    for (int shape : {0, 1}) {
      const std::string tile = shape == 0 ? "tile_QKt" : "tile_PV";
      // Single-threaded: CPU time, which a shared machine's other load disturbs less than wall time.
      benchmark::RegisterBenchmark((tile + "/onednn").c_str(), tile_onednn, shape)
          ->Unit(benchmark::kMicrosecond)->MinTime(0.2)->Repetitions(5);
      benchmark::RegisterBenchmark((tile + "/dpbf16").c_str(), tile_dpbf16, shape)
          ->Unit(benchmark::kMicrosecond)->MinTime(0.2)->Repetitions(5);
    }
  // Registered per (threads, S) group: sgemm then attention back to back, so drift on a shared
  // machine hits both sides of a ratio alike. Wall-clock rates: OpenMP workers' CPU time is not
  // the main thread's.
  for (int threads : {1, 2})
    for (int64_t S : {512, 2048}) {
      auto setup = [](benchmark::internal::Benchmark* b) {
        b->Unit(benchmark::kMillisecond)->MinTime(0.3)->UseRealTime()->Repetitions(3);
      };
      for (int shape : {0, 1})
        setup(benchmark::RegisterBenchmark(sgemm_name(S, shape, threads).c_str(), sgemm, S, shape, threads));
      for (auto [H, KV] : kHeads)
        setup(benchmark::RegisterBenchmark(attention_name("attention_fwd_bwd", S, H, KV, threads).c_str(),
                                           attention_fwd_bwd, S, H, KV, threads));
      for (auto [H, KV] : kHeads)
        setup(benchmark::RegisterBenchmark(attention_name("attention_fwd", S, H, KV, threads).c_str(),
                                           attention_fwd, S, H, KV, threads));
    }
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("cpu_matrix_path", bench::cpu_matrix_path());
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\nAttention fwd+bwd (causal, B=1, D=Dv=64) vs raw sgemm on [S,64]x[64,S] and [S,S]x[S,64]\n");
  std::printf("FLOPs: fwd = 2*B*H*(D+Dv)*S*(S+1)/2 (= 4*B*H*S^2*D*~0.5), bwd = 2.5*fwd, fwd+bwd = 3.5*fwd\n");
  std::printf("sgemm ref = both shapes together: total FLOPs / total time; ratio = attention / ref;\n");
  std::printf("each figure is the best of its repetitions\n");
  std::printf("%-8s %-6s %-6s %12s %12s %12s %12s %7s\n", "threads", "S", "H/KV", "attn GF/s", "QK^T GF/s",
              "PV GF/s", "ref GF/s", "ratio");
  for (int threads : {1, 2})
    for (int64_t S : {512, 2048}) {
      if (!reporter.gflops.count(sgemm_name(S, 0, threads)) || !reporter.gflops.count(sgemm_name(S, 1, threads)))
        continue;
      const double qk = reporter.gflops[sgemm_name(S, 0, threads)], pv = reporter.gflops[sgemm_name(S, 1, threads)];
      const double ref = 2.0 / (1.0 / qk + 1.0 / pv);  // equal FLOPs per shape
      for (auto [H, KV] : kHeads) {
        const std::string a = attention_name("attention_fwd_bwd", S, H, KV, threads);
        if (!reporter.gflops.count(a)) continue;
        const double ga = reporter.gflops[a];
        std::printf("%-8d %-6lld %lld/%-4lld %12.1f %12.1f %12.1f %12.1f %6.0f%%\n", threads,
                    static_cast<long long>(S), static_cast<long long>(H), static_cast<long long>(KV), ga,
                    qk, pv, ref, 100.0 * ga / ref);
      }
    }
  std::printf("\nSize B attention kernel (B=4, S=512, H=12, KV=4, D=Dv=64, causal), %d threads, wall time, best of 3;\n",
              num_threads());
  std::printf("FLOPs as above (bwd = 2.5*fwd); matrix path: %s\n", bench::cpu_matrix_path().c_str());
  std::printf("%-18s %10s %10s %10s %10s\n", "inputs", "fwd ms", "fwd GF/s", "bwd ms", "bwd GF/s");
  for (Inputs in : kInputs) {
    const std::string f = size_b_name(in, false), b = size_b_name(in, true);
    if (!reporter.gflops.count(f) || !reporter.gflops.count(b)) continue;
    std::printf("%-18s %10.2f %10.1f %10.2f %10.1f\n", inputs_name(in), reporter.best_time[f], reporter.gflops[f],
                reporter.best_time[b], reporter.gflops[b]);
  }
  for (const char* tile : {"tile_QKt", "tile_PV"}) {
    const std::string o = std::string(tile) + "/onednn", d = std::string(tile) + "/dpbf16";
    if (!reporter.gflops.count(o) || !reporter.gflops.count(d)) continue;
    std::printf("%-9s one thread, CPU time: oneDNN matmul %6.2f us (%6.1f GF/s), vdpbf16ps kernel %6.2f us (%6.1f GF/s)\n",
                tile, reporter.best_time[o], reporter.gflops[o], reporter.best_time[d], reporter.gflops[d]);
  }
  benchmark::Shutdown();
  return 0;
}
