// Expert-parallel traffic, load and throughput (dist/expert_parallel.h): the training step of
// `loom train` with one micro-batch — forward, backward seeded with the layout's backward scale,
// FSDP's reductions, the clipped global grad norm over replica factors, the configured optimizer
// on the local pieces, the routing-count sums — for a configuration resolved as `loom train`
// resolves it (--config FILE, --set overrides, --ep N, the world size from mpirun), built through
// dist::parallelize (no memory policy: recompute would run the dispatch again), on random tokens. Prints one RESULT {json} line from rank 0:
//
//   tokens_per_s           global tokens per second (median step after the warm-up)
//   ep_bytes_sent          what this rank handed to MPI on the ep group in the last step, in the
//                          forward and in the backward (the ep group has its own communicator)
//   counted_bytes          the same from the routing: per MoE layer, the rows this rank sends to
//                          experts on other ranks (S) plus the rows other ranks send to its
//                          experts and get back (R), × hidden × the activation's bytes, in each
//                          direction of forward (dispatch S, combine R) and backward (the
//                          reverse of each: S and R again), plus the counts exchanged in the
//                          forward ((ep-1)·E/ep int64 per layer); routing from the dispatcher's
//                          own inputs (an outer wrapper on its "dispatch" operation)
//   bytes_ratio            measured / counted, forward and backward
//   inter_node_bytes       what every ep rank of the group sends to ranks on other nodes (nodes of
//                          npu_nums_per_device consecutive ep ranks), counted from the last step's
//                          routing for both dispatchers: alltoall (a copy per expert there, and
//                          E/ep counts per remote rank) and alltoall_deredundancy (a row per token
//                          and node, its K int32 choices and K weights, a row-count per node);
//                          counted_bytes above follows the configured dispatcher, so a run with
//                          either one checks its own count against what MPI was handed
//   token_node_pairs_with_several_experts  (token, remote node) pairs with more than one copy:
//                          where deredundancy sends fewer rows
//   rows_per_rank          token copies each ep rank's experts computed in the last step;
//                          load_imbalance = max / mean
//   expert_state_bytes     this rank's routed-expert parameter + grad + optimizer bytes, and
//                          one process's (each scaled to its global size) / ep: the target
//
//   mpirun -np 2 --oversubscribe --bind-to none build/bench/bench_ep --config configs/bench/size_a.yaml --ep 2 ...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/autograd/engine.h"
#include "loom/autograd/grad_mode.h"
#include "loom/config/config.h"
#include "loom/core/parallel.h"
#include "loom/core/rng.h"
#include "loom/dist/parallelize.h"
#include "loom/dist/runtime.h"
#include "loom/nn/causal_lm.h"
#include "loom/optim/grad_norm.h"
#include "loom/optim/lr_scheduler.h"
#include "loom/optim/optimizer_factory.h"
#include "loom/runtime/cpu/cpu_peak.h"
#include "loom/runtime/model_runtime.h"
#include "loom/runtime/parallel_options.h"
#include "loom/train/model_hooks.h"

#include "bench_util.h"

using namespace loom;
using Json = nlohmann::ordered_json;

namespace {

// What one dispatch call routed on this rank: the experts of each token's K copies, the row and
// routing-weight widths in bytes.
struct DispatchRecord {
  std::vector<int64_t> ids;  // [T, K]
  int64_t top_k = 0, row_bytes = 0, weight_bytes = 0;
};

// Bytes one ep rank sends in one MoE layer, forward and backward, counted from the routing.
struct Volume {
  int64_t forward = 0, backward = 0;
  void add(const Volume& v) {
    forward += v.forward;
    backward += v.backward;
  }
};

// The routing of one MoE layer on every ep rank: ids[q] = rank q's [T, K] expert ids.
struct LayerRouting {
  std::vector<std::vector<int64_t>> ids;
  int64_t K = 0, row_bytes = 0, weight_bytes = 0;
  int64_t tokens() const { return static_cast<int64_t>(ids[0].size()) / K; }
};

// Expert parallelism's layout: ep ranks, E/ep experts each, nodes of P consecutive ep ranks.
struct EpLayout {
  int ep = 1, P = 1;
  int64_t per_rank = 1;
  int owner(int64_t e) const { return static_cast<int>(e / per_rank); }
  int node(int rank) const { return rank / P; }
};

// alltoall (expert_parallel.h): every copy to its expert's rank and back; E/ep counts per peer.
// `inter_node` counts only the peers on other nodes.
Volume alltoall_volume(const LayerRouting& r, const EpLayout& l, int me, bool inter_node) {
  auto counted = [&](int q) { return q != me && (!inter_node || l.node(q) != l.node(me)); };
  int64_t copies = 0, peers = 0;
  for (int q = 0; q < l.ep; ++q) {
    if (!counted(q)) continue;
    ++peers;
    for (int64_t e : r.ids[static_cast<size_t>(me)]) copies += l.owner(e) == q;  // sent to q
    for (int64_t e : r.ids[static_cast<size_t>(q)]) copies += l.owner(e) == me;  // q's, computed here
  }
  return {copies * r.row_bytes + peers * l.per_rank * 8, copies * r.row_bytes};
}

// alltoall_deredundancy: a token once to each node holding one of its experts (with K int32
// choices and K weights), one partial sum back; inside the node alltoall's exchange of the copies.
Volume deredundant_volume(const LayerRouting& r, const EpLayout& l, int me, bool inter_node) {
  const int64_t T = r.tokens(), K = r.K, per_node = l.per_rank * l.P;
  const int nodes = l.ep / l.P, index = me % l.P, my_node = l.node(me);
  auto rows_to_node = [&](int q, int m) {  // rank q's tokens with an expert on node m
    int64_t rows = 0;
    for (int64_t t = 0; t < T; ++t) {
      bool needed = false;
      for (int64_t k = 0; k < K; ++k) needed = needed || r.ids[static_cast<size_t>(q)][static_cast<size_t>(t * K + k)] / per_node == m;
      rows += needed;
    }
    return rows;
  };
  Volume v;
  for (int m = 0; m < nodes; ++m) {
    if (m == my_node) continue;
    const int64_t sent = rows_to_node(me, m), received = rows_to_node(m * l.P + index, my_node);
    v.forward += sent * (r.row_bytes + K * 4 + K * r.weight_bytes) + 8 + received * r.row_bytes;
    v.backward += received * (r.row_bytes + K * r.weight_bytes) + sent * r.row_bytes;
  }
  if (inter_node) return v;
  // Inside the node: rank q = (my_node, i) holds the copies its peers across nodes sent it.
  auto copies_at = [&](int i, int owner) {  // copies for `owner`'s experts held by in-node rank i
    int64_t c = 0;
    for (int m = 0; m < nodes; ++m)
      for (int64_t e : r.ids[static_cast<size_t>(m * l.P + i)]) c += l.owner(e) == owner;
    return c;
  };
  for (int i = 0; i < l.P; ++i) {
    const int q = my_node * l.P + i;
    if (q == me) continue;
    const int64_t copies = copies_at(index, q) + copies_at(i, me);
    v.forward += copies * r.row_bytes + l.per_rank * 8;
    v.backward += copies * r.row_bytes;
  }
  return v;
}

int run(int argc, char** argv, dist::Runtime& rt) {
  apply_thread_env();
  bench::BenchCommandLine command_line = bench::parse_bench_command_line(argc, argv, rt, "--ep", "expert_parallel");
  const int steps = command_line.steps, warmup = command_line.warmup;
  config::LoadedConfig& loaded = command_line.loaded;
  const config::TrainConfig& cfg = loaded.config;
  const config::ResolvedConfig& resolved = *loaded.resolved;
  const config::ParallelLayout& layout = resolved.layout;
  LOOM_CHECK(layout.num_accumulation_steps == 1, ValueError, "bench_ep counts one micro-batch per step; set "
             "training.global_batch_size to local_batch_size × data parallel (", layout.samples_per_micro_step, ")");
  const int64_t B = cfg.training.local_batch_size, S = resolved.loader_options().config.seq_length;

  // The run's build, as `loom train` makes it.
  std::unique_ptr<runtime::Backend> backend = runtime::make_backend(resolved.device, rt.world());
  runtime::ModelRuntime model_runtime(cfg, resolved, *backend);
  model_runtime.initialize(static_cast<uint64_t>(cfg.training.seed));
  dist::DeviceMesh* mesh = &model_runtime.mesh();
  dist::ParallelModel* parallel = &model_runtime.parallel();
  runtime::LanguageModel* model = &model_runtime.model();
  const models::ModelArgs& args = resolved.model_args();
  train::ModelHooks hooks(args, model_runtime.causal_lm(), *parallel);
  hooks.set_backward_scale(runtime::micro_batch_backward_scale(*parallel, 1));
  nn::CausalLM& lm = model_runtime.causal_lm();
  const std::vector<nn::MoELayer*> moes = lm.moe_layers();
  LOOM_CHECK(!moes.empty(), ValueError, "bench_ep needs an MoE model (model_type qwen3_moe or deepseek_v3)");
  const int64_t E = lm.config().num_experts;
  const int ep = mesh->size("ep"), me = mesh->group("ep").rank();
  const int64_t L = E / ep;

  // The routing each dispatch saw, recorded from its own inputs (outermost wrapper).
  std::vector<DispatchRecord> records;
  for (nn::MoELayer* moe : moes)
    moe->token_dispatcher().add_operation_wrapper("dispatch", [&records](const nn::TensorFn& inner,
                                                                         const std::vector<Tensor>& in) {
      DispatchRecord r;
      r.ids = in[1].to_int_vector();
      r.top_k = in[1].size(1);
      r.row_bytes = in[0].size(1) * static_cast<int64_t>(dtype_size(in[0].dtype()));
      r.weight_bytes = static_cast<int64_t>(dtype_size(in[2].dtype()));
      records.push_back(r);
      return inner(in);
    });

  optim::NamedParams params;
  for (auto& [name, local] : model->module().local_parameters()) params.push_back({name, local});
  auto scheduler = std::shared_ptr<optim::LrScheduler>(
      optim::build_lr_scheduler(cfg.lr_scheduler.section, cfg.training.steps));
  std::unique_ptr<optim::Optimizer> optimizer = optim::build_optimizer(cfg.optimizer.section, params);
  optimizer->set_lr_scheduler(scheduler);

  const int shard = layout.dims.dataset_shard_id(rt.rank()), shards = layout.dims.num_dataset_shards();
  dist::ProcessGroup& ep_group = mesh->group("ep");
  std::vector<double> times;
  int64_t forward_sent = 0, backward_sent = 0;
  double loss = 0;
  for (int step = 0; step < warmup + steps; ++step) {
    records.clear();
    ep_group.reset_stats();
    const auto t0 = std::chrono::steady_clock::now();
    parallel->zero_grad();
    nn::LMOutput out = lm.forward(bench::random_tokens<nn::LMBatch>(args.vocab_size, B, S, static_cast<uint64_t>(step * shards + shard)));
    forward_sent = ep_group.stats().bytes_sent;
    autograd::backward(out.loss, Tensor::full(out.loss.shape(), parallel->backward_scale()));
    parallel->finish_backward();
    backward_sent = ep_group.stats().bytes_sent - forward_sent;
    dist::ProcessGroup& world = mesh->world();
    optim::clip_grad_norm(optimizer->named_params(), cfg.training.max_norm,
                          [&](const optim::NamedParam& p) { return parallel->replica_factor(p.name); },
                          [&world](double v) { return world.all_reduce_scalar(v); });
    optimizer->step();
    hooks.after_optimizer_step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    loss = out.loss.item();
    if (step >= warmup) times.push_back(s);
    if (rt.rank() == 0)
      std::fprintf(stderr, "step %d: %.3f s, loss %.6f, ep bytes sent forward %lld backward %lld\n", step + 1, s, loss,
                   static_cast<long long>(forward_sent), static_cast<long long>(backward_sent));
  }

  // The last step's routing of every ep rank.
  LOOM_CHECK(records.size() == moes.size(), ValueError, "bench_ep expected one dispatch per MoE layer, got ",
             records.size());
  std::vector<int64_t> mine;
  for (const DispatchRecord& r : records) mine.insert(mine.end(), r.ids.begin(), r.ids.end());
  Tensor all = Tensor::empty({static_cast<int64_t>(mine.size()) * ep}, DType::i64);
  ep_group.all_gather(Tensor::from_vector(mine, {static_cast<int64_t>(mine.size())}), all);
  const std::vector<int64_t> gathered = all.to_int_vector();
  const dist::ExpertParallelOptions expert = runtime::expert_parallel_options(cfg.parallelism);
  const bool deredundant = expert.dispatcher == dist::TokenDispatcher::alltoall_deredundancy;
  // Nodes of npu_nums_per_device ep ranks (the whole group when it is smaller: one node).
  const int node_size = std::min(ep, std::max(expert.ranks_per_node, 1));
  const EpLayout el{ep, ep % node_size == 0 ? node_size : 1, L};
  std::vector<LayerRouting> routing(records.size());
  for (size_t l = 0, at = 0; l < records.size(); ++l) {
    routing[l].K = records[l].top_k;
    routing[l].row_bytes = records[l].row_bytes;
    routing[l].weight_bytes = records[l].weight_bytes;
    for (int q = 0; q < ep; ++q)
      routing[l].ids.emplace_back(gathered.begin() + static_cast<std::ptrdiff_t>(q * mine.size() + at),
                                  gathered.begin() + static_cast<std::ptrdiff_t>(q * mine.size() + at + records[l].ids.size()));
    at += records[l].ids.size();
  }
  Volume counted;  // this rank, the configured dispatcher, every peer
  Volume inter_alltoall, inter_deredundant;  // every ep rank, peers on other nodes
  int64_t remote_rows = 0, several_on_one_remote_node = 0;
  std::vector<int64_t> rows_per_rank(static_cast<size_t>(ep), 0);
  for (const LayerRouting& r : routing) {
    counted.add(deredundant ? deredundant_volume(r, el, me, false) : alltoall_volume(r, el, me, false));
    for (int q = 0; q < ep; ++q) {
      inter_alltoall.add(alltoall_volume(r, el, q, true));
      inter_deredundant.add(deredundant_volume(r, el, q, true));
      for (int64_t e : r.ids[static_cast<size_t>(q)]) ++rows_per_rank[static_cast<size_t>(el.owner(e))];
      for (int64_t t = 0; t < r.tokens(); ++t) {  // a token with two copies on one other node
        std::map<int, int> per_node;
        for (int64_t k = 0; k < r.K; ++k) {
          const int m = el.node(el.owner(r.ids[static_cast<size_t>(q)][static_cast<size_t>(t * r.K + k)]));
          if (m != el.node(q)) ++per_node[m];
        }
        for (const auto& [m, c] : per_node) several_on_one_remote_node += c > 1 ? 1 : 0;
      }
    }
    for (int64_t e : r.ids[static_cast<size_t>(me)]) remote_rows += el.owner(e) != me;
  }
  const int64_t counted_forward = counted.forward, counted_backward = counted.backward;
  const double mean_rows = std::accumulate(rows_per_rank.begin(), rows_per_rank.end(), 0.0) / ep;
  const double max_rows = static_cast<double>(*std::max_element(rows_per_rank.begin(), rows_per_rank.end()));

  // Routed-expert state of this rank against one process's / ep.
  auto bytes = [](const Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : int64_t{0}; };
  std::map<std::string, int64_t> optimizer_bytes;
  for (const optim::ParamState& s : optimizer->param_states())
    optimizer_bytes[s.name] = (s.has_own_master() ? bytes(s.master) : 0) + bytes(s.exp_avg) + bytes(s.exp_avg_sq) +
                              bytes(s.momentum);
  int64_t expert_state = 0, one_process_expert_state = 0;
  for (auto& [name, p] : model->module().named_parameters()) {
    if (name.find(".mlp.experts.") == std::string::npos) continue;  // routed experts only
    const Tensor local = p->local();
    const int64_t state = bytes(local) + bytes(local.grad()) + optimizer_bytes[name];
    expert_state += state;
    if (local.numel() > 0) one_process_expert_state += state * p->global_shape.numel() / local.numel();
  }
  expert_state = static_cast<int64_t>(mesh->world().all_reduce_scalar(static_cast<double>(expert_state)) /
                                      mesh->world_size());  // the mean over ranks (efsdp shards may differ)

  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  if (rt.rank() == 0) {
    Json r = {{"config", command_line.config_path},
              {"model_type", args.model_type},
              {"cpu", runtime::cpu::cpu_model_name()},
              {"cpu_matrix_path", bench::cpu_matrix_path()},
              {"processes", rt.world_size()},
              {"threads_per_process", num_threads()},
              {"ep", ep},
              {"tp", mesh->size("tp")},
              {"experts", E},
              {"moe_layers", static_cast<int64_t>(moes.size())},
              {"median_step_s", median},
              {"tokens_per_s", static_cast<double>(shards * B * S) / median},
              {"last_loss", loss},
              {"remote_rows_sent", remote_rows},
              {"ep_bytes_sent", {{"forward", forward_sent}, {"backward", backward_sent}}},
              {"counted_bytes", {{"forward", counted_forward}, {"backward", counted_backward}}},
              {"bytes_ratio",
               {{"forward", counted_forward ? static_cast<double>(forward_sent) / static_cast<double>(counted_forward) : 1.0},
                {"backward",
                 counted_backward ? static_cast<double>(backward_sent) / static_cast<double>(counted_backward) : 1.0}}},
              {"dispatcher", deredundant ? "alltoall_deredundancy" : "alltoall"},
              {"ranks_per_node", el.P},
              {"inter_node_bytes",
               {{"alltoall", {{"forward", inter_alltoall.forward}, {"backward", inter_alltoall.backward}}},
                {"alltoall_deredundancy",
                 {{"forward", inter_deredundant.forward}, {"backward", inter_deredundant.backward}}}}},
              {"token_node_pairs_with_several_experts", several_on_one_remote_node},
              {"rows_per_rank", rows_per_rank},
              {"load_imbalance", mean_rows > 0 ? max_rows / mean_rows : 1.0},
              {"expert_state_bytes", expert_state},
              {"expert_state_target_bytes", one_process_expert_state / ep}};
    std::printf("RESULT %s\n", r.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime& rt = dist::Runtime::init(&argc, &argv);
  return dist::run_guarded([&] { return run(argc, argv, rt); });
}
