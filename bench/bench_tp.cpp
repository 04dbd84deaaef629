// Tensor-parallel throughput, traffic and memory: the training step of `loom train` — the plain
// schedule's forward and backward (seed = the layout's backward scale), the tp grad sums of
// replicated parameters, the clipped global grad norm over replica factors, the configured
// optimizer on the local pieces, the routing-count sums — for a configuration resolved as
// `loom train` resolves it (--config FILE, --set overrides, the world size from mpirun), built
// through dist::parallelize with its memory policy, on random tokens. Prints one RESULT {json}
// line from rank 0:
//
//   tokens_per_s            global tokens per second (median step after the warm-up)
//   bytes_sent_per_step     what this rank handed to MPI in the last step: on the tp group, and
//                           over every group of the mesh
//   counted_bytes_per_step  the volume of tensor_parallel.h's collective sites (bench/tp_volume.h)
//                           on the tp group, and on the KV-sharing sub-group the mesh's stats miss
//   bytes_ratio             measured / counted on the tp group
//   state_bytes             per-rank parameter + grad + optimizer bytes; one_process_state_bytes
//                           scales each parameter's to its global size; the target is one process's
//                           / tp plus the state of the parameters every tp rank keeps whole
//                           (replicated, Partial) and of the KV heads shared by t/G ranks
//   activation_peak_bytes   allocator peak of the last step minus what stays after it
//   counted_sites           the count, site by site (kind, group, runs per step, bytes)
//
// and, on stderr, each step and the counted sites.
//
//   mpirun -np 2 --oversubscribe --bind-to none build/bench/bench_tp --config configs/bench/size_a.yaml --tp 2
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/config/config.h"
#include "loom/core/allocator.h"
#include "loom/core/parallel.h"
#include "loom/core/rng.h"
#include "loom/dist/parallelize.h"
#include "loom/dist/runtime.h"
#include "loom/memory/policy.h"
#include "loom/optim/grad_norm.h"
#include "loom/optim/lr_scheduler.h"
#include "loom/optim/optimizer_factory.h"
#include "loom/runtime/cpu/cpu_peak.h"
#include "loom/runtime/model_runtime.h"
#include "loom/runtime/schedule.h"
#include "loom/train/model_hooks.h"
#include "loom/plan/tp_volume.h"

#include "bench_util.h"

using namespace loom;
using Json = nlohmann::ordered_json;

namespace {

// Random tokens for batch `index`; the tp ranks of a data shard pass the same index.
// The layers whose every sequence all-gather the plan recomputes in backward (what the count
// models); a plan that recomputes anything else changes the volume in ways it does not count.
std::set<int64_t> layers_with_recomputed_gathers(const memory::MemoryPlan& plan,
                                                 const std::vector<memory::LayerRef>& layers) {
  LOOM_CHECK(plan.full_recompute.empty() && plan.select_recompute.empty(), ValueError,
             "bench_tp counts the traffic of recompute_comm only: recomputed layers or modules would run their "
             "collectives again; leave recompute.mode at none");
  std::set<int64_t> out;
  for (const memory::LayerRef& layer : layers) {
    std::vector<std::string> gathers;
    for (const std::string& op : memory::collect_layer_paths(*layer.module).operations)
      if (op.ends_with(".all_gather")) gathers.push_back(op);
    auto it = plan.comm_recompute.find(layer.index);
    if (it == plan.comm_recompute.end()) continue;
    for (const std::string& op : it->second)
      LOOM_CHECK(op.ends_with(".all_gather"), ValueError, "bench_tp counts recomputed all-gathers only, but "
                 "recompute_comm selects ", layer.path, ".", op, "; select '.*\\.all_gather'");
    LOOM_CHECK(it->second.size() == gathers.size(), ValueError, "bench_tp counts a layer's all-gathers recomputed "
               "all or none, but recompute_comm selects ", it->second.size(), " of the ", gathers.size(), " in ",
               layer.path, "; select '.*\\.all_gather'");
    out.insert(layer.index);
  }
  return out;
}

struct StateBytes {
  int64_t total = 0, params = 0, grads = 0, optimizer = 0;
  int64_t one_process = 0;     // each parameter's state scaled to its global size
  int64_t replicated = 0;      // parameters kept whole on every tp rank (Partial)
  int64_t shared_kv = 0;       // slices shared by several tp ranks (KV heads with t > G)
};

StateBytes state_bytes(nn::Module& module, const optim::Optimizer& opt) {
  auto bytes = [](const Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : int64_t{0}; };
  std::map<std::string, int64_t> optimizer_bytes;
  for (const optim::ParamState& s : opt.param_states())
    optimizer_bytes[s.name] = (s.has_own_master() ? bytes(s.master) : 0) + bytes(s.exp_avg) + bytes(s.exp_avg_sq) +
                              bytes(s.momentum);
  StateBytes b;
  for (auto& [name, p] : module.named_parameters()) {
    const Tensor local = p->local();
    const int64_t param = bytes(local), grad = bytes(local.grad());
    const int64_t optimizer = optimizer_bytes.count(name) ? optimizer_bytes[name] : 0;
    const int64_t mine = param + grad + optimizer;
    b.params += param;
    b.grads += grad;
    b.optimizer += optimizer;
    b.total += mine;
    if (local.numel() > 0) b.one_process += mine * p->global_shape.numel() / local.numel();
    const nn::AxisPlacement* tp = p->placement.on("tp");
    if (tp && tp->kind == nn::AxisPlacement::Kind::partial) b.replicated += mine;
    if (tp && tp->kind == nn::AxisPlacement::Kind::shard && tp->copies > 1) b.shared_kv += mine;
  }
  return b;
}

void print_sites(const std::vector<plan::VolumeSite>& sites) {
  std::fprintf(stderr, "%-64s %-5s %6s %14s %14s\n", "counted site", "group", "count", "forward B", "backward B");
  for (const plan::VolumeSite& s : sites)
    std::fprintf(stderr, "%-64s %-5s %6lld %14lld %14lld\n", s.what.c_str(), s.group.c_str(),
                 static_cast<long long>(s.count), static_cast<long long>(s.forward_bytes),
                 static_cast<long long>(s.backward_bytes));
}

int run(int argc, char** argv, dist::Runtime& rt) {
  apply_thread_env();
  bench::BenchCommandLine command_line = bench::parse_bench_command_line(argc, argv, rt, "--tp", "tensor_parallel");
  const int steps = command_line.steps, warmup = command_line.warmup;
  config::LoadedConfig& loaded = command_line.loaded;
  const config::TrainConfig& cfg = loaded.config;
  const config::ResolvedConfig& resolved = *loaded.resolved;
  const config::ParallelLayout& layout = resolved.layout;
  LOOM_CHECK(layout.num_accumulation_steps == 1, ValueError, "bench_tp counts one micro-batch per step; set "
             "training.global_batch_size to local_batch_size × data parallel (", layout.samples_per_micro_step, ")");
  const int64_t B = cfg.training.local_batch_size, S = resolved.loader_options().config.seq_length;

  // The run's build, as `loom train` makes it: the backend, the model runtime (mesh, model on the
  // meta device, parallelize with the memory policy), each rank's pieces initialised, the
  // optimizer over the local pieces.
  std::unique_ptr<runtime::Backend> backend = runtime::make_backend(resolved.device, rt.world());
  runtime::ModelRuntime model_runtime(cfg, resolved, *backend);
  model_runtime.initialize(static_cast<uint64_t>(cfg.training.seed));
  dist::DeviceMesh* mesh = &model_runtime.mesh();
  dist::ParallelModel* parallel = &model_runtime.parallel();
  runtime::LanguageModel* model = &model_runtime.model();
  const models::ModelArgs& args = resolved.model_args();
  const int t = mesh->size("tp");
  const std::set<int64_t> recomputed = layers_with_recomputed_gathers(
      memory::plan_memory(model->layers(), model->num_layers() + model->num_mtp_layers(), resolved.recompute,
                          resolved.swap),
      model->layers());
  train::ModelHooks hooks(args, model_runtime.causal_lm(), *parallel);
  hooks.set_backward_scale(runtime::micro_batch_backward_scale(*parallel, 1));
  runtime::Schedule& schedule = model_runtime.schedule();
  optim::NamedParams params;
  for (auto& [name, local] : model->module().local_parameters()) params.push_back({name, local});
  auto scheduler = std::shared_ptr<optim::LrScheduler>(
      optim::build_lr_scheduler(cfg.lr_scheduler.section, cfg.training.steps));
  std::unique_ptr<optim::Optimizer> optimizer = optim::build_optimizer(cfg.optimizer.section, params);
  optimizer->set_lr_scheduler(scheduler);

  const int64_t total_layers = model->num_layers() + model->num_mtp_layers();
  LOOM_CHECK(recomputed.empty() || static_cast<int64_t>(recomputed.size()) == total_layers, ValueError,
             "bench_tp counts the all-gathers of every layer recomputed or none, but recompute_comm covers ",
             recomputed.size(), " of ", total_layers, " layers; list every layer");
  plan::TpStepShape shape;
  shape.batch = B;
  shape.seq = S;
  shape.gathers_recomputed = !recomputed.empty();
  shape.world_size = mesh->world_size();
  const std::vector<plan::VolumeSite> sites = plan::count_tp_volume(args, t, shape);

  const int shard = layout.dims.dataset_shard_id(rt.rank()), shards = layout.dims.num_dataset_shards();
  std::vector<double> times, comm_times;
  int64_t tp_bytes = 0, all_bytes = 0;
  MemoryStats mem;
  for (int step = 0; step < warmup + steps; ++step) {
    mesh->reset_stats();
    reset_peak_memory();
    const auto t0 = std::chrono::steady_clock::now();
    const runtime::StepResult r = schedule.run([&] {
      return bench::random_tokens<data::Batch>(args.vocab_size, B, S, static_cast<uint64_t>(step * shards + shard));
    }, runtime::Mode::train);
    dist::ProcessGroup& world = mesh->world();
    const double norm = optim::clip_grad_norm(
        optimizer->named_params(), cfg.training.max_norm,
        [&](const optim::NamedParam& p) { return parallel->replica_factor(p.name); },
        [&world](double v) { return world.all_reduce_scalar(v); });
    optimizer->step();
    hooks.after_optimizer_step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const dist::CommStats all = mesh->total_stats();
    tp_bytes = mesh->group("tp").stats().bytes_sent;
    all_bytes = all.bytes_sent;
    mem = memory_stats();
    if (step >= warmup) {
      times.push_back(s);
      comm_times.push_back(all.seconds);
    }
    if (rt.rank() == 0)
      std::fprintf(stderr, "step %d: %.3f s (%.3f s in collectives), loss %.6f, grad norm %.4f, sent %lld B on tp, "
                   "activation peak %.1f MiB\n", step + 1, s, all.seconds, r.loss, norm, static_cast<long long>(tp_bytes),
                   static_cast<double>(mem.peak_bytes - mem.current_bytes) / (1 << 20));
  }
  std::sort(times.begin(), times.end());
  std::sort(comm_times.begin(), comm_times.end());
  const double median = times[times.size() / 2], comm_median = comm_times[comm_times.size() / 2];
  const StateBytes state = state_bytes(model->module(), *optimizer);
  const int64_t counted_tp = plan::total_bytes(sites, "tp");
  if (rt.rank() == 0) {
    print_sites(sites);
    Json r = {{"config", command_line.config_path},
              {"model_type", args.model_type},
              {"cpu", runtime::cpu::cpu_model_name()},
              {"cpu_matrix_path", bench::cpu_matrix_path()},
              {"processes", rt.world_size()},
              {"threads_per_process", num_threads()},
              {"tp", t},
              {"data_parallel", layout.dims.data_parallel()},
              {"recompute_comm_all_gathers", shape.gathers_recomputed},
              {"median_step_s", median},
              {"median_collective_s", comm_median},
              {"tokens_per_s", static_cast<double>(shards * B * S) / median},
              {"bytes_sent_per_step", {{"tp", tp_bytes}, {"all_groups", all_bytes}}},
              {"counted_bytes_per_step", {{"tp", counted_tp}, {"tp_kv_not_in_stats", plan::total_bytes(sites, "tp_kv")}}},
              {"bytes_ratio", counted_tp > 0 ? static_cast<double>(tp_bytes) / static_cast<double>(counted_tp) : 1.0},
              {"state_bytes", {{"total", state.total}, {"params", state.params}, {"grads", state.grads},
                               {"optimizer", state.optimizer}}},
              {"one_process_state_bytes", state.one_process},
              {"replicated_state_bytes", state.replicated},
              {"shared_kv_state_bytes", state.shared_kv},
              {"state_target_bytes", state.one_process / t + state.replicated + state.shared_kv},
              {"persistent_bytes", mem.current_bytes},
              {"peak_bytes", mem.peak_bytes},
              {"activation_peak_bytes", mem.peak_bytes - mem.current_bytes},
              {"counted_sites", Json::array()}};
    for (const plan::VolumeSite& site : sites)
      r["counted_sites"].push_back({{"kind", plan::site_kind_name(site.kind)}, {"what", site.what},
                                    {"group", site.group}, {"count", site.count},
                                    {"forward_bytes", site.forward_bytes}, {"backward_bytes", site.backward_bytes}});
    std::printf("RESULT %s\n", r.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime& rt = dist::Runtime::init(&argc, &argv);
  return dist::run_guarded([&] { return run(argc, argv, rt); });
}
