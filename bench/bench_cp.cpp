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
//   ring_bytes_analytic     layers · [(c-1)·(K+V) forward + (c-1)·(K+V) + c·(dK+dV) backward],
//                           K, V, dK, dV the fp32 bytes of one rank's block
//   visible_pairs           per rank, the (query, key) pairs its ring steps computed (forward, one
//                           layer), and blocks computed / skipped
//
//   mpirun -np 2 --oversubscribe --bind-to none build/bench/bench_cp --seq 4096 [--contiguous]
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
#include "loom/train/hardware.h"

#include "bench_util.h"

using namespace loom;
using Json = nlohmann::ordered_json;

namespace {

int run(int argc, char** argv, dist::Runtime& rt) {
  int64_t S = 4096, layers = 2, hidden = 256, heads = 8, kv_heads = 4, ffn = 512, vocab = 2048;
  int steps = 3;
  bool balanced = true;
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
    else LOOM_THROW(ValueError, "unknown option ", a, "; use --seq N --layers N --hidden N --heads N --kv-heads N "
                    "--steps N [--contiguous]");
  }
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
  auto parallel = dist::parallelize(*built.model, mesh, po);
  parallel->materialize(7);
  auto gathered = [&] { return parallel->fsdp() ? parallel->fsdp()->memory().gathered_param_bytes : int64_t{0}; };

  std::vector<double> times;
  int64_t held = 0, ring_bytes = 0;
  dist::RingWork work;
  for (int step = 0; step < steps + 1; ++step) {  // step 0 warms the caches up
    mesh->world().barrier();
    dist::reset_ring_work();
    const auto t0 = std::chrono::steady_clock::now();
    parallel->zero_grad();
    const int64_t before = memory_stats().current_bytes, gathered_before = gathered();
    nn::LMOutput out = built.model->forward(bench::random_tokens<nn::LMBatch>(vocab, 1, S, static_cast<uint64_t>(step)));
    held = memory_stats().current_bytes - before - (gathered() - gathered_before);
    const int64_t pairs = dist::ring_work().visible_pairs;
    autograd::backward(out.loss, Tensor::full(out.loss.shape(), parallel->backward_scale()));
    parallel->finish_backward();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    work = dist::ring_work();
    work.visible_pairs = pairs;  // forward only (backward visits the same pairs)
    ring_bytes = work.bytes_sent;
    if (step > 0) times.push_back(s);
  }
  std::sort(times.begin(), times.end());
  const double step_s = times[times.size() / 2];

  const int64_t Sl = S / c, block = Sl * kv_heads * head_dim * 4;  // K (= V = dK = dV) bytes, fp32
  const int64_t analytic = c > 1 ? layers * ((c - 1) * 2 * block + (c - 1) * 2 * block + c * 2 * block) : 0;

  // Every rank's figures, gathered for rank 0.
  std::vector<int64_t> mine{held, ring_bytes, work.visible_pairs / layers, work.blocks_computed / layers,
                            work.blocks_skipped / layers};
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
                       {"blocks_computed", f[3]}, {"blocks_skipped", f[4]}});
    }
    Json result{{"cpu", train::cpu_model_name()}, {"cpu_matrix_path", bench::cpu_matrix_path()}, {"threads", num_threads()}, {"cp", c}, {"seq", S},
                {"split", balanced ? "load-balanced" : "contiguous"}, {"layers", layers}, {"hidden", hidden},
                {"heads", heads}, {"kv_heads", kv_heads}, {"held_activation_bytes", max_held}, {"step_s", slowest},
                {"ring_bytes_analytic", analytic}, {"ranks", ranks}};
    std::printf("RESULT %s\n", result.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime& rt = dist::Runtime::init(&argc, &argv);
  return dist::run_guarded([&] { return run(argc, argv, rt); });
}
