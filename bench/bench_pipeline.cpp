// Pipeline parallelism's idle time, activation memory, state bytes and speed: the training step
// of `loom train` (the pipeline schedule, or the plain one on a single process; the clipped grad
// norm; AdamW) for a configuration resolved as `loom train` resolves it (--config FILE, --set
// overrides, the world size from mpirun), on random tokens. Prints one RESULT {json} line from
// rank 0:
//
//   tokens_per_s              global tokens per second (median step after the warm-up)
//   idle_s, predicted_idle_s  per pp rank: the median step's time not spent in its own forwards and
//                             backwards (waiting for a neighbour, p2p, the step's bookkeeping),
//                             and the idle time of replaying pipeline_order with this run's mean
//                             forward and backward time of each chunk (runtime::replay_pipeline)
//   predicted_idle_with_costs_s  the same replay with measured costs: transfer_s (half a ping-pong
//                             round trip of one activation between pp ranks 0 and 1, before
//                             training), per rank action_overhead_s (the step's time outside its
//                             actions' compute, their waits and the tail, per action) and tail_s
//                             (after the last action: sends' completion, finish_backward)
//   grad_reduce_bytes_per_step  rank 0 under FSDP: bytes its grad reductions sent per step
//   activation_peak_bytes     rank 0: allocator peak of the last step minus what stays after it
//                             (activations plus backward's transient buffers)
//   in_flight_peak_bytes      rank 0: the most bytes held between two actions of the last step
//                             beyond the step's start and the parameter grads (the activations
//                             of the micro-batches in flight)
//   chunk_activation_bytes    rank 0: what one micro-batch's forward of its first chunk keeps for
//                             backward (measured on its own before training)
//   in_flight_bound           the schedule's bound on rank 0, in chunk micro-batches: 1F1B
//                             min(p, m), interleaved min((v-1)·N + 2(p-1) + 1, m·v)
//   state_bytes               per rank: parameter + grad + optimizer bytes; embedding_head_bytes
//                             the part of it in the embedding and the output head
//
//   mpirun -np 2 --oversubscribe --bind-to none build/bench/bench_pipeline
//       --config configs/bench/size_a.yaml --set parallelism.pipeline_parallel=2
//       --set training.local_batch_size=1
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/autograd/grad_mode.h"
#include "loom/config/config.h"
#include "loom/core/allocator.h"
#include "loom/core/parallel.h"
#include "loom/core/rng.h"
#include "loom/dist/parallelize.h"
#include "loom/dist/runtime.h"
#include "loom/optim/grad_norm.h"
#include "loom/optim/lr_scheduler.h"
#include "loom/optim/optimizer_factory.h"
#include "loom/runtime/cpu/cpu_peak.h"
#include "loom/runtime/model_runtime.h"
#include "loom/runtime/parallel_options.h"
#include "loom/runtime/pipeline_schedule.h"
#include "loom/train/model_hooks.h"

#include "bench_util.h"

using namespace loom;
using Json = nlohmann::ordered_json;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv, dist::Runtime& rt) {
  apply_thread_env();
  bench::BenchCommandLine command_line = bench::parse_bench_command_line(argc, argv, rt);
  const int steps = command_line.steps, warmup = command_line.warmup;
  config::LoadedConfig& loaded = command_line.loaded;
  const config::TrainConfig& cfg = loaded.config;
  const config::ResolvedConfig& resolved = *loaded.resolved;
  const config::ParallelLayout& layout = resolved.layout;
  const int64_t B = cfg.training.local_batch_size, S = resolved.loader_options().config.seq_length;
  const int64_t m = layout.num_accumulation_steps;

  // The run's build, as `loom train` makes it.
  std::unique_ptr<runtime::Backend> backend = runtime::make_backend(resolved.device, rt.world());
  runtime::ModelRuntime model_runtime(cfg, resolved, *backend);
  model_runtime.initialize(static_cast<uint64_t>(cfg.training.seed));
  dist::DeviceMesh* mesh = &model_runtime.mesh();
  dist::ParallelModel* parallel = &model_runtime.parallel();
  runtime::LanguageModel* model = &model_runtime.model();
  const models::ModelArgs& args = resolved.model_args();
  train::ModelHooks hooks(args, model_runtime.causal_lm(), *parallel);
  hooks.set_backward_scale(runtime::micro_batch_backward_scale(*parallel, m));
  dist::PipelineStage* stage = parallel->pipeline();
  const int p = stage ? stage->pp_size() : 1, v = stage ? stage->num_chunks() : 1;

  // What one micro-batch's forward of rank 0's first chunk keeps for backward (no communication:
  // the first virtual stage embeds the batch; without FSDP or TP nothing is gathered).
  int64_t chunk_activation = 0;
  if (stage && stage->chunks().front().first && !parallel->fsdp() && mesh->size("tp") == 1) {
    const int64_t before = memory_stats().current_bytes;
    runtime::ForwardResult r = model->forward_chunk(bench::random_tokens<data::Batch>(args.vocab_size, B, S, 999), stage->chunks().front(),
                                                  Tensor(), {});
    chunk_activation = memory_stats().current_bytes - before;
  }

  runtime::Schedule* schedule = &model_runtime.schedule();
  auto* pipeline = dynamic_cast<runtime::PipelineSchedule*>(schedule);
  optim::NamedParams params;
  for (auto& [name, local] : model->module().local_parameters()) params.push_back({name, local});
  auto scheduler = std::shared_ptr<optim::LrScheduler>(
      optim::build_lr_scheduler(cfg.lr_scheduler.section, cfg.training.steps));
  std::unique_ptr<optim::Optimizer> optimizer = optim::build_optimizer(cfg.optimizer.section, params);
  optimizer->set_lr_scheduler(scheduler);

  // One activation's transfer between neighbouring stages (pp ranks 0 and 1): half the median
  // round trip of a [B, S/tp, D] fp32 tensor, before any training (the replay's transfer cost).
  double transfer_s = 0;
  if (stage) {
    dist::ProcessGroup& pp = stage->pp_group();
    Tensor message = Tensor::zeros({B, S / mesh->size("tp"), args.hidden_size}, DType::f32);
    std::vector<double> round_trips;
    constexpr int kPingTag = 1 << 20;  // above every schedule tag (2·stages + 1)
    for (int k = 0; k < 23 && pp.rank() <= 1; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      if (pp.rank() == 0) {
        pp.isend(message, 1, kPingTag)->wait();
        pp.irecv(message, 1, kPingTag)->wait();
      } else {
        pp.irecv(message, 0, kPingTag)->wait();
        pp.isend(message, 0, kPingTag)->wait();
      }
      if (k >= 3) round_trips.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    transfer_s = pp.all_reduce_scalar(pp.rank() == 0 ? median(round_trips) / 2 : 0.0, dist::ReduceOp::max);
  }

  const int shard = layout.dims.dataset_shard_id(rt.rank()), shards = layout.dims.num_dataset_shards();
  std::vector<double> times, idle, overhead, tail, reduce_bytes;
  int64_t in_flight_peak = 0;
  // Per chunk: summed forward and backward seconds over the timed steps' micro-batches.
  std::vector<double> forward_sum(static_cast<size_t>(v), 0.0), backward_sum(static_cast<size_t>(v), 0.0);
  MemoryStats mem;
  int64_t batch_index = 0;
  for (int step = 0; step < warmup + steps; ++step) {
    reset_peak_memory();
    if (parallel->fsdp()) parallel->fsdp()->reset_comm_stats();
    const auto t0 = std::chrono::steady_clock::now();
    const runtime::StepResult r = schedule->run([&] {
      return bench::random_tokens<data::Batch>(args.vocab_size, B, S, static_cast<uint64_t>((batch_index++) * shards + shard));
    }, runtime::Mode::train);
    dist::ProcessGroup& world = mesh->world();
    optim::clip_grad_norm(optimizer->named_params(), cfg.training.max_norm,
                          [&](const optim::NamedParam& q) { return parallel->replica_factor(q.name); },
                          [&world](double x) { return world.all_reduce_scalar(x); });
    optimizer->step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    mem = memory_stats();
    if (step < warmup) continue;
    times.push_back(s);
    if (parallel->fsdp()) reduce_bytes.push_back(static_cast<double>(parallel->fsdp()->grad_reduce_bytes()));
    if (pipeline) {
      const runtime::PipelineStepTimes& t = pipeline->last_times();
      double compute = 0, wait = 0;
      for (size_t i = 0; i < t.compute_s.size(); ++i) {
        const runtime::PipelineAction& a = pipeline->order()[i];
        compute += t.compute_s[i];
        wait += t.wait_s[i];
        (a.kind == runtime::PipelineAction::Kind::forward ? forward_sum : backward_sum)[static_cast<size_t>(a.chunk)] +=
            t.compute_s[i];
      }
      idle.push_back(t.step_s - compute);
      // Between the actions, outside their compute and their waits: the per-action bookkeeping.
      overhead.push_back((t.step_s - compute - wait - t.tail_s) / static_cast<double>(t.compute_s.size()));
      tail.push_back(t.tail_s);
      // Parameter grads appear with the step's first backward and stay: not activations.
      int64_t grads = 0;
      for (auto& [name, q] : model->module().named_parameters())
        if (q->local().grad().defined()) grads += static_cast<int64_t>(q->local().grad().nbytes());
      bool backward_ran = false;
      in_flight_peak = 0;
      for (size_t i = 0; i < t.live_bytes.size(); ++i) {
        backward_ran |= pipeline->order()[i].kind == runtime::PipelineAction::Kind::backward;
        in_flight_peak = std::max(in_flight_peak, t.live_bytes[i] - t.start_bytes - (backward_ran ? grads : 0));
      }
    }
    if (rt.rank() == 0)
      std::fprintf(stderr, "step %d: %.3f s, loss %.6f%s\n", step + 1, s, r.loss,
                   pipeline ? (", rank 0 idle " + std::to_string(idle.back()) + " s").c_str() : "");
  }

  // Per-rank figures to rank 0: the pp group's idle times and chunk times, every rank's state.
  auto bytes = [](const Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : int64_t{0}; };
  std::map<std::string, int64_t> optimizer_bytes;
  for (const optim::ParamState& st : optimizer->param_states())
    optimizer_bytes[st.name] = (st.has_own_master() ? bytes(st.master) : 0) + bytes(st.exp_avg) + bytes(st.exp_avg_sq);
  int64_t state = 0, ends = 0;
  for (auto& [name, q] : model->module().named_parameters()) {
    const int64_t mine = bytes(q->local()) + bytes(q->local().grad()) + optimizer_bytes[name];
    state += mine;
    if (name.rfind("embedding.", 0) == 0 || name.rfind("output_layer.", 0) == 0) ends += mine;
  }
  const int n = rt.world_size();
  std::vector<int64_t> all_state(static_cast<size_t>(n)), all_ends(static_cast<size_t>(n));
  rt.world()->all_gather(std::span<const int64_t>(&state, 1), std::span<int64_t>(all_state));
  rt.world()->all_gather(std::span<const int64_t>(&ends, 1), std::span<int64_t>(all_ends));
  Json pp_json = nullptr;
  if (stage) {
    dist::ProcessGroup& pp = stage->pp_group();
    const double per = static_cast<double>(steps) * static_cast<double>(m);
    std::vector<double> mine;
    mine.push_back(median(idle));
    mine.push_back(median(overhead));
    mine.push_back(median(tail));
    for (int c = 0; c < v; ++c) mine.push_back(forward_sum[static_cast<size_t>(c)] / per);
    for (int c = 0; c < v; ++c) mine.push_back(backward_sum[static_cast<size_t>(c)] / per);
    std::vector<double> all(mine.size() * static_cast<size_t>(p));
    pp.all_gather(std::span<const double>(mine), std::span<double>(all));
    std::vector<std::vector<double>> fwd(static_cast<size_t>(p)), bwd(static_cast<size_t>(p));
    Json measured = Json::array(), forward_s = Json::array(), backward_s = Json::array();
    runtime::PipelineReplayCosts costs;
    costs.transfer_s = transfer_s;
    costs.receives_posted_early = cfg.parallelism.pipeline_parallel_overlap_p2p;
    for (int r = 0; r < p; ++r) {
      const double* x = all.data() + static_cast<size_t>(r) * mine.size();
      measured.push_back(x[0]);
      costs.action_overhead_s.push_back(x[1]);
      costs.tail_s.push_back(x[2]);
      fwd[static_cast<size_t>(r)].assign(x + 3, x + 3 + v);
      bwd[static_cast<size_t>(r)].assign(x + 3 + v, x + 3 + 2 * v);
      forward_s.push_back(fwd[static_cast<size_t>(r)]);
      backward_s.push_back(bwd[static_cast<size_t>(r)]);
    }
    const runtime::PipelineScheduleOptions so = runtime::pipeline_schedule_options(cfg.parallelism, *layout.pipeline);
    const runtime::PipelineReplay replay = runtime::replay_pipeline(p, v, m, fwd, bwd, so.kind, so.overlap_b_f);
    const runtime::PipelineReplay costed = runtime::replay_pipeline(p, v, m, fwd, bwd, so.kind, so.overlap_b_f, costs);
    const int64_t rounds = std::max<int64_t>(1, m / p), per_round = m / rounds;
    const int64_t bound = v == 1 ? std::min<int64_t>(p, m)
                                 : std::min<int64_t>((v - 1) * per_round + 2 * (p - 1) + 1, m * v);
    pp_json = {{"pp", p},
               {"chunks", v},
               {"overlap_p2p", cfg.parallelism.pipeline_parallel_overlap_p2p},
               {"chunk_forward_s", forward_s},
               {"chunk_backward_s", backward_s},
               {"idle_s", measured},
               {"predicted_idle_s", replay.idle_s},
               {"predicted_idle_with_costs_s", costed.idle_s},
               {"transfer_s", transfer_s},
               {"action_overhead_s", costs.action_overhead_s},
               {"tail_s", costs.tail_s},
               {"chunk_activation_bytes", chunk_activation},
               {"in_flight_bound", bound},
               {"in_flight_bound_bytes", bound * chunk_activation},
               {"in_flight_peak_bytes", in_flight_peak},
               {"all_micro_batches_bytes", m * v * chunk_activation}};
  }
  if (rt.rank() == 0) {
    const double step_s = median(times);
    Json r = {{"config", command_line.config_path},
              {"cpu", runtime::cpu::cpu_model_name()},
              {"cpu_matrix_path", bench::cpu_matrix_path()},
              {"processes", n},
              {"threads_per_process", num_threads()},
              {"micro_batches", m},
              {"median_step_s", step_s},
              {"tokens_per_s", static_cast<double>(shards * m * B * S) / step_s},
              {"activation_peak_bytes", mem.peak_bytes - mem.current_bytes},
              {"state_bytes", all_state},
              {"embedding_head_bytes", all_ends},
              {"grad_reduce_bytes_per_step", reduce_bytes.empty() ? Json(nullptr) : Json(median(reduce_bytes))},
              {"pipeline", pp_json}};
    std::printf("RESULT %s\n", r.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime& rt = dist::Runtime::init(&argc, &argv);
  return dist::run_guarded([&] { return run(argc, argv, rt); });
}
