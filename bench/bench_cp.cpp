// Context parallelism, per rank: activation bytes held from forward to backward, step time,
// bytes the cp group sent against the ring's analytic volume, and the attention work of each rank
// (dist/context_parallel.h). One micro-batch of random tokens through dist::parallelize at
// cp = the number of processes (FSDP over the cp ranks, as the trainer builds it): forward,
// backward and FSDP's reductions, no optimizer. Prints one RESULT {json} line from rank 0:
//
//   held_activation_bytes   per rank: allocator bytes live after the forward minus before it
//                           (what the forward keeps for backward), less the parameters FSDP
//                           still holds gathered then (the root unit's), max over the ranks
//   step_s                  forward + backward + finish_backward, median of the measured steps
//   ring_bytes_sent         bytes this rank's cp group handed to the transport while the rings
//                           ran, forward and backward, in one step (dist::RingWork); and
//   ring_bytes_analytic     layers · [(n-1)·(K+V) forward + (n-1)·(K+V) + n·(dK+dV) backward],
//                           K, V, dK, dV the fp32 bytes of one ring rank's block, n the ring size
//                           (c; c/u for hybrid, whose ring ranks hold u·S/c tokens, H/u heads)
//   all_to_all_bytes_sent   the same for Ulysses' exchanges (ulysses, hybrid); and
//   all_to_all_bytes_analytic  layers · 2 (forward, backward) · (u-1)/u · (q + k + v + o), the fp32
//                           bytes of one rank's q, k, v (KV heads repeated up to u) and output
//   visible_pairs           per rank, the (query, key) pairs its ring steps computed (forward, one
//                           layer), and blocks computed / skipped
//
// --packed gives every sample EOD-packed documents (lengths drawn from [S/32, S/4], fixed seed):
// the load-balanced split cuts each document (dist::SequenceSplit), --per-sequence cuts the
// sample as one, for the balance before/after. --method ring|ulysses|hybrid (hybrid: u = 2),
// --async posts Ulysses' all-to-alls ahead (parallelism.context_parallel_async).
//
//   mpirun -np 2 --oversubscribe --bind-to none build/bench/bench_cp --seq 4096 [--contiguous]
//       [--packed [--per-sequence]] [--method ulysses [--async]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/autograd/engine.h"
#include "loom/core/allocator.h"
#include "loom/core/parallel.h"
#include "loom/core/rng.h"
#include "loom/dist/context_parallel.h"
#include "loom/dist/parallelize.h"
#include "loom/dist/runtime.h"
#include "loom/models/registry.h"
#include "loom/runtime/cpu/cpu_peak.h"

#include "bench_util.h"

using namespace loom;
using Json = nlohmann::ordered_json;

namespace {

int run(int argc, char** argv, dist::Runtime& rt) {
  int64_t S = 4096, layers = 2, hidden = 256, heads = 8, kv_heads = 4, ffn = 512, vocab = 2048;
  int steps = 3;
  bool balanced = true, packed = false, per_document = true, async = false;
  std::string method = "ring";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> int64_t { LOOM_CHECK(i + 1 < argc, ValueError, a, " needs a value"); return std::stoll(argv[++i]); };
    if (a == "--seq") S = next();
    else if (a == "--layers") layers = next();
    else if (a == "--hidden") hidden = next();
    else if (a == "--heads") heads = next();
    else if (a == "--kv-heads") kv_heads = next();
    else if (a == "--steps") steps = static_cast<int>(next());
    else if (a == "--contiguous") balanced = false;
    else if (a == "--packed") packed = true;
    else if (a == "--per-sequence") per_document = false;
    else if (a == "--async") async = true;
    else if (a == "--method" && i + 1 < argc) method = argv[++i];
    else LOOM_THROW(ValueError, "unknown option ", a, "; use --seq N --layers N --hidden N --heads N --kv-heads N "
                    "--steps N [--contiguous] [--packed [--per-sequence]] [--method ring|ulysses|hybrid] [--async]");
  }
  LOOM_CHECK(method == "ring" || method == "ulysses" || method == "hybrid", ValueError, "--method ", method,
             ": use ring, ulysses or hybrid");
  apply_thread_env();
  const int c = rt.world_size();
  const int64_t head_dim = hidden / heads;
  const Json section{{"model_type", "llama"}, {"vocab_size", vocab}, {"hidden_size", hidden},
                     {"num_hidden_layers", layers}, {"num_attention_heads", heads},
                     {"num_key_value_heads", kv_heads}, {"intermediate_size", ffn},
                     {"max_position_embeddings", S}, {"compute_dtype", "float32"}};
  dist::ParallelDegrees degrees;
  degrees.context_parallel = c;
  auto mesh = std::make_shared<dist::DeviceMesh>(rt.world(), dist::ParallelDims::infer(c, degrees));
  models::BuiltModel built = models::build_model(section);
  dist::ParallelizeOptions po;
  po.context.load_balanced = balanced;
  po.context.per_document = per_document;
  po.context.async = async;
  const int u = method == "ring" ? 1 : method == "ulysses" ? c : 2;  // the Ulysses degree
  if (method == "ulysses") po.context.method = dist::ContextParallelMethod::ulysses;
  if (method == "hybrid") {
    po.context.method = dist::ContextParallelMethod::hybrid;
    po.context.ulysses_degree = u;
  }
  auto parallel = dist::parallelize(*built.model, mesh, po);
  parallel->materialize(7);
  auto gathered = [&] { return parallel->fsdp() ? parallel->fsdp()->memory().gathered_param_bytes : int64_t{0}; };

  // Packed documents, the same on every rank: ends of lengths drawn from [S/32, S/4].
  Tensor doc_ends;
  if (packed) {
    std::vector<int32_t> ends;
    for (int64_t at = 0, i = 0; at < S; ++i) {
      at = std::min<int64_t>(S, at + S / 32 + static_cast<int64_t>(stream_uniform({99, 4, 0}, i) * (S / 4 - S / 32)));
      ends.push_back(static_cast<int32_t>(at));
    }
    doc_ends = Tensor::from_vector(ends, {1, static_cast<int64_t>(ends.size())});
  }

  std::vector<double> times;
  int64_t held = 0, ring_bytes = 0, a2a_bytes = 0;
  dist::RingWork work;
  for (int step = 0; step < steps + 1; ++step) {  // step 0 warms the caches up
    mesh->world().barrier();
    dist::reset_ring_work();
    const auto t0 = std::chrono::steady_clock::now();
    parallel->zero_grad();
    const int64_t before = memory_stats().current_bytes, gathered_before = gathered();
    nn::LMBatch batch = bench::random_tokens<nn::LMBatch>(vocab, 1, S, static_cast<uint64_t>(step));
    batch.doc_ends = doc_ends;
    nn::LMOutput out = built.model->forward(batch);
    held = memory_stats().current_bytes - before - (gathered() - gathered_before);
    const int64_t pairs = dist::ring_work().visible_pairs;
    autograd::backward(out.loss, Tensor::full(out.loss.shape(), parallel->backward_scale()));
    parallel->finish_backward();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    work = dist::ring_work();
    work.visible_pairs = pairs;  // forward only (backward visits the same pairs)
    ring_bytes = work.bytes_sent;
    a2a_bytes = work.all_to_all_bytes;
    if (step > 0) times.push_back(s);
  }
  std::sort(times.begin(), times.end());
  const double step_s = times[times.size() / 2];

  // The analytic volumes (fp32), per rank and step.
  const int64_t Sl = S / c, kv_exchanged = std::max<int64_t>(kv_heads, u);  // KV heads repeated up to u
  const int64_t ring = c / u, block = u * Sl * (kv_exchanged / u) * head_dim * 4;  // K (= V = dK = dV)
  const int64_t analytic = ring > 1 ? layers * ((ring - 1) * 2 * block + (ring - 1) * 2 * block + ring * 2 * block) : 0;
  const int64_t qkvo = Sl * (2 * heads + 2 * kv_exchanged) * head_dim * 4;
  const int64_t a2a_analytic = u > 1 ? layers * 2 * qkvo * (u - 1) / u : 0;

  // Every rank's figures, gathered for rank 0.
  std::vector<int64_t> mine{held, ring_bytes, work.visible_pairs / layers, work.blocks_computed / layers,
                            work.blocks_skipped / layers, a2a_bytes};
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(c));
  rt.world()->all_gather(std::span<const int64_t>(mine), std::span<int64_t>(all));
  const double slowest = rt.world()->all_reduce_scalar(step_s, dist::ReduceOp::max);
  if (rt.rank() == 0) {
    Json ranks = Json::array();
    int64_t max_held = 0;
    for (int r = 0; r < c; ++r) {
      const int64_t* f = all.data() + r * mine.size();
      max_held = std::max(max_held, f[0]);
      ranks.push_back({{"held_activation_bytes", f[0]}, {"ring_bytes_sent", f[1]}, {"visible_pairs", f[2]},
                       {"blocks_computed", f[3]}, {"blocks_skipped", f[4]}, {"all_to_all_bytes_sent", f[5]}});
    }
    Json result{{"cpu", runtime::cpu::cpu_model_name()}, {"cpu_matrix_path", bench::cpu_matrix_path()}, {"threads", num_threads()}, {"cp", c}, {"seq", S},
                {"split", !balanced ? "contiguous" : packed && !per_document ? "per-sequence" : "load-balanced"},
                {"packed", packed}, {"documents", packed ? doc_ends.size(1) : 1}, {"method", method}, {"async", async},
                {"layers", layers}, {"hidden", hidden}, {"heads", heads}, {"kv_heads", kv_heads},
                {"held_activation_bytes", max_held}, {"step_s", slowest}, {"ring_bytes_analytic", analytic},
                {"all_to_all_bytes_analytic", a2a_analytic}, {"ranks", ranks}};
    std::printf("RESULT %s\n", result.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime& rt = dist::Runtime::init(&argc, &argv);
  return dist::run_guarded([&] { return run(argc, argv, rt); });
}
