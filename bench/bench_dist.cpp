// Data-parallel throughput and traffic: the training step of `loom train` (forward, backward with
// sense 1/world, FSDP reduce, global grad-norm clip, AdamW on shards) on size A or B
// (configs/bench/size_a.yaml, size_b.yaml) with random tokens, run by mpirun at 1 and 2 processes
// (bench/dist_throughput.sh alternates them). Prints one RESULT {json} line from rank 0 with
//   tokens_per_s         global tokens per second (median step after warm-up)
//   bytes_sent_per_step  bytes this rank handed to MPI per step, and the analytic FSDP volume:
//                        (n-1)/n · (b·(P + P_layers) + 4 B·P) per micro-batch (forward all-gather of
//                        every parameter, backward all-gather of the layers, both in the parameters'
//                        dtype of b bytes, and the reduce-scatter of fp32 grads)
//   all_gather_bytes_per_step / reduce_scatter_bytes_per_step   the two parts of it FSDP counted
//                        (the reduce part includes HSDP's replicate all-reduce)
// --compute-dtype / --params-dtype (float32 or bfloat16; default float32 for both) set the model's
// precision: bf16 compute on float32 parameters gathers the matmul weights in bf16 and the rest in
// float32 (docs/distributed.md), bf16 parameters gather bf16; grads reduce in fp32 either way.
//   state_bytes          per-rank parameter + grad + AdamW state, against one process's / n plus the
//                        largest unit's full parameters (the memory target)
// One process runs the plain model (no FSDP), as `loom train` does.
//
// --optimizer muon --comm-strategy allgather|allgather_deredundency steps Muon instead (size mla,
// a DeepSeek-V3 shaped model: Muon needs multi-latent attention) and adds, per step, what the
// strategy costs this rank:
//   muon_ns_s             wall time in Newton–Schulz (median step)
//   muon_ns_matrices      whole matrices it orthogonalised
//   muon_bytes_sent / muon_bytes_received   bytes of the Muon exchange (its holder groups only)
//   optimizer_step_s      the whole optimizer step (median)
//
//   mpirun -np 2 --oversubscribe --bind-to none build/bench/bench_dist --size a --steps 8
//   mpirun -np 2 ... build/bench/bench_dist --size mla --optimizer muon --comm-strategy allgather
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/autograd/engine.h"
#include "loom/core/parallel.h"
#include "loom/core/rng.h"
#include "loom/dist/fsdp.h"
#include "loom/dist/runtime.h"
#include "loom/models/registry.h"
#include "loom/ops/elementwise.h"
#include "loom/optim/adamw.h"
#include "loom/optim/grad_norm.h"
#include "loom/optim/muon.h"
#include "loom/train/model_hooks.h"
#include "loom/runtime/cpu/cpu_peak.h"
#include "loom/optim/placement_muon_sharding.h"
#include "cpu_path.h"

using namespace loom;
using Json = nlohmann::ordered_json;

namespace {

struct Size {
  Json model;
  int64_t seq, batch;
};

Size size_of(const std::string& name) {
  if (name == "a")
    return {Json{{"model_type", "llama"}, {"vocab_size", 8192}, {"hidden_size", 256}, {"intermediate_size", 768},
                 {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                 {"max_position_embeddings", 256}, {"tie_word_embeddings", false}, {"compute_dtype", "float32"}},
            256, 8};
  if (name == "b")
    return {Json{{"model_type", "llama"}, {"vocab_size", 32000}, {"hidden_size", 768}, {"intermediate_size", 2048},
                 {"num_hidden_layers", 12}, {"num_attention_heads", 12}, {"num_key_value_heads", 4},
                 {"max_position_embeddings", 512}, {"tie_word_embeddings", false}, {"compute_dtype", "float32"}},
            512, 4};
  if (name == "mla")  // DeepSeek-V3 shaped (MLA, MoE, shared expert), for Muon
    return {Json{{"model_type", "deepseek_v3"}, {"vocab_size", 8192}, {"hidden_size", 512}, {"num_hidden_layers", 4},
                 {"num_attention_heads", 8}, {"intermediate_size", 1408}, {"moe_intermediate_size", 256},
                 {"n_routed_experts", 8}, {"num_experts_per_tok", 2}, {"n_group", 1}, {"topk_group", 1},
                 {"n_shared_experts", 1}, {"first_k_dense_replace", 1}, {"q_lora_rank", 256}, {"kv_lora_rank", 128},
                 {"qk_nope_head_dim", 64}, {"qk_pos_emb_head_dim", 32}, {"v_head_dim", 64},
                 {"max_position_embeddings", 256}, {"compute_dtype", "float32"}},
            256, 8};
  LOOM_THROW(ValueError, "--size must be a, b or mla, got '", name, "'");
}

nn::LMBatch random_batch(int64_t vocab, int64_t B, int64_t S, uint64_t index) {
  nn::LMBatch b;
  std::vector<int32_t> ids(static_cast<size_t>(B * S)), labels(ids.size());
  for (int64_t i = 0; i < B * S; ++i) {
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(stream_uniform({index, 1, 0}, i) * vocab) % static_cast<int32_t>(vocab);
    labels[static_cast<size_t>(i)] = static_cast<int32_t>(stream_uniform({index, 2, 0}, i) * vocab) % static_cast<int32_t>(vocab);
  }
  b.input_ids = Tensor::from_vector(ids, {B, S});
  b.labels = Tensor::from_vector(labels, {B, S});
  return b;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv, dist::Runtime& rt) {
  std::string size_name = "a", policy = "default", optimizer = "adamw", comm_strategy = "allgather";
  std::string compute_dtype = "float32", params_dtype = "float32";
  bool force_fsdp = false;  // FSDP machinery even on one process (its copies without communication)
  int steps = 8, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { LOOM_CHECK(i + 1 < argc, ValueError, a, " needs a value"); return argv[++i]; };
    if (a == "--size") size_name = next();
    else if (a == "--steps") steps = std::stoi(next());
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--reshard") policy = next();
    else if (a == "--fsdp") force_fsdp = true;
    else if (a == "--optimizer") optimizer = next();
    else if (a == "--comm-strategy") comm_strategy = next();
    else if (a == "--compute-dtype") compute_dtype = next();
    else if (a == "--params-dtype") params_dtype = next();
    else LOOM_THROW(ValueError, "unknown option ", a, "; use --size a|b|mla --steps N --warmup N --reshard always|never "
                    "--optimizer adamw|muon --comm-strategy allgather|allgather_deredundency "
                    "--compute-dtype float32|bfloat16 --params-dtype float32|bfloat16");
  }
  apply_thread_env();
  Size size = size_of(size_name);
  size.model["compute_dtype"] = compute_dtype;
  size.model["params_dtype"] = params_dtype;
  const int n = rt.world_size();
  LOOM_CHECK(size.batch % n == 0, ValueError, "the global batch of ", size.batch, " must divide over ", n, " processes");
  const int64_t local_batch = size.batch / n;
  models::BuiltModel built = models::build_model(size.model);
  nn::CausalLM& model = *built.model;

  std::shared_ptr<dist::DeviceMesh> mesh;
  std::shared_ptr<dist::FullyShardedModel> fsdp;
  optim::NamedParams params;
  int64_t full_param_bytes = 0, layer_param_bytes = 0;  // in fp32 (grads, master weights)
  double gathered_bytes = 0, layer_gathered_bytes = 0;   // what the all-gathers carry (fsdp.h: compute_dtype)
  const bool bf16_compute = compute_dtype == "bfloat16";
  for (auto& [name, p] : model.named_parameters()) {
    const int64_t numel = p->global_shape.numel();
    const bool layer = name.rfind("decoder.layers.", 0) == 0;
    full_param_bytes += numel * 4;
    if (layer) layer_param_bytes += numel * 4;
    const size_t gather_elem = bf16_compute && p->multiplied_in_compute_dtype ? 2 : dtype_size(p->dtype);
    gathered_bytes += static_cast<double>(numel * gather_elem);
    if (layer) layer_gathered_bytes += static_cast<double>(numel * gather_elem);
  }
  if (n > 1 || force_fsdp) {
    mesh = std::make_shared<dist::DeviceMesh>(rt.world(), dist::ParallelDims::infer(n, dist::ParallelDegrees{}));
    dist::FsdpOptions o;
    o.reshard_after_forward_policy = policy;
    if (bf16_compute) o.compute_dtype = DType::bf16;  // as the trainer sets it
    fsdp = dist::apply_fsdp(model, mesh, o);
    fsdp->materialize(0);
  } else {
    model.materialize(0);
  }
  for (auto& [name, t] : model.local_parameters()) params.push_back({name, t});
  LOOM_CHECK(optimizer == "adamw" || optimizer == "muon", ValueError, "--optimizer must be adamw or muon, got '",
             optimizer, "'");
  std::unique_ptr<optim::Optimizer> opt;
  optim::Muon* muon = nullptr;
  std::shared_ptr<optim::PlacementMuonSharding> sharding;
  if (optimizer == "muon") {
    optim::MuonOptions mo;
    mo.learning_rate = 3e-4;  // also the AdamW fallback's (embedding, output layer): keep it sane
    mo.comm_strategy = comm_strategy;
    if (mesh) sharding = optim::PlacementMuonSharding::of_module(model, mesh);
    auto m = std::make_unique<optim::Muon>(params, mo, train::muon_model_info(built.args), false,
                                           optim::WeightDecayRules{}, sharding);
    muon = m.get();
    opt = std::move(m);
  } else {
    optim::AdamWOptions ao;
    ao.learning_rate = 3e-4;
    opt = std::make_unique<optim::AdamW>(params, ao);
  }
  const double sense = 1.0 / n;
  std::vector<double> opt_times, ns_times;
  int64_t muon_sent = 0, muon_received = 0, ns_matrices = 0;

  std::vector<double> times;
  int64_t bytes_per_step = 0, gather_bytes = 0, reduce_bytes = 0;
  std::vector<double> comm_times;
  for (int step = 0; step < warmup + steps; ++step) {
    if (mesh) mesh->reset_stats();
    if (fsdp) fsdp->reset_comm_stats();
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& p : params) p.param.set_grad(Tensor());
    nn::LMOutput out = model.forward(random_batch(size.model["vocab_size"].get<int64_t>(), local_batch, size.seq,
                                                  static_cast<uint64_t>(step * n + rt.rank())));
    if (n > 1) autograd::backward(out.loss, Tensor::full(out.loss.shape(), sense));
    else autograd::backward(out.loss);
    double loss = out.loss.item();
    optim::ReplicaFactorFn factor;
    optim::AllReduceSumFn sum;
    if (fsdp) {
      fsdp->finish_backward();
      loss = rt.world()->all_reduce_scalar(loss) / n;
      factor = [&model, m = mesh.get()](const optim::NamedParam& p) {
        return static_cast<double>(m->replica_factor(model.find_parameter(p.name)->placement));
      };
      sum = [w = rt.world()](double v) { return w->all_reduce_scalar(v); };
    }
    optim::clip_grad_norm(params, 1.0, factor, sum);
    if (sharding) sharding->reset_comm_stats();
    const auto t_opt = std::chrono::steady_clock::now();
    opt->step();
    const double opt_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_opt).count();
    if (step >= warmup) {
      opt_times.push_back(opt_s);
      if (muon) ns_times.push_back(muon->last_step_stats().ns_seconds);
    }
    if (muon) ns_matrices = muon->last_step_stats().ns_matrices;
    if (sharding) {
      muon_sent = sharding->comm_stats().bytes_sent;
      muon_received = sharding->comm_stats().bytes_received;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step >= warmup) times.push_back(s);
    double comm_s = 0;
    if (mesh) {
      bytes_per_step = mesh->total_stats().bytes_sent;
      if (fsdp) {
        gather_bytes = fsdp->param_gather_bytes();
        reduce_bytes = fsdp->grad_reduce_bytes();
      }
      comm_s = mesh->total_stats().seconds;
    }
    if (step >= warmup) comm_times.push_back(comm_s);
    if (rt.rank() == 0)
      std::fprintf(stderr, "step %d: %.3f s (%.3f s in collectives), loss %.6f, sent %.2f MB\n", step + 1, s, comm_s, loss,
                   bytes_per_step / 1e6);
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  std::sort(comm_times.begin(), comm_times.end());
  const double comm_median = comm_times[comm_times.size() / 2];
  const double tokens_per_s = static_cast<double>(size.batch * size.seq) / median;
  // Analytic per-rank volume of one micro-batch (parameters gathered in their gather dtype, fp32 grads).
  const double frac = static_cast<double>(n - 1) / n;
  const bool reshard = policy != "never";
  const double analytic = frac * (gathered_bytes + (reshard ? layer_gathered_bytes : 0.0) + full_param_bytes);
  // params, grads and the optimizer's state (AdamW: m and v; Muon: its momentum, m and v for the fallback)
  int64_t state_bytes = 0, one_process_state = 2 * full_param_bytes;
  for (const auto& s : opt->param_states())
    one_process_state += (s.rule == optim::UpdateRule::adamw ? 2 : 1) * model.find_parameter(s.name)->global_shape.numel() * 4;
  int64_t largest_unit = 0;
  if (fsdp) {
    const dist::FsdpMemory m = fsdp->memory();
    state_bytes = m.sharded_param_bytes + m.sharded_grad_bytes;
    for (const auto& s : opt->param_states())
      for (const Tensor* t : {&s.exp_avg, &s.exp_avg_sq, &s.momentum})
        if (t->defined()) state_bytes += static_cast<int64_t>(t->nbytes());
    largest_unit = m.largest_unit_param_bytes;
  } else {
    state_bytes = one_process_state;
  }
  if (rt.rank() == 0) {
    Json r = {{"size", size_name},
              {"processes", n},
              {"threads_per_process", num_threads()},
              {"cpu", runtime::cpu::cpu_model_name()},
              {"cpu_matrix_path", bench::cpu_matrix_path()},
              {"compute_dtype", compute_dtype},
              {"params_dtype", params_dtype},
              {"reshard_after_forward", policy},
              {"median_step_s", median},
              {"median_collective_s", comm_median},
              {"tokens_per_s", tokens_per_s},
              {"bytes_sent_per_step", bytes_per_step},
              {"analytic_fsdp_bytes_per_step", n > 1 ? analytic : 0.0},
              {"all_gather_bytes_per_step", gather_bytes},
              {"reduce_scatter_bytes_per_step", reduce_bytes},
              {"state_bytes_per_rank", state_bytes},
              {"one_process_state_bytes", one_process_state},
              {"memory_target_bytes", n > 1 ? one_process_state / n + largest_unit : one_process_state},
              {"optimizer", optimizer},
              {"optimizer_step_s", median_of(opt_times)}};
    if (muon) {
      r["comm_strategy"] = comm_strategy;
      r["muon_ns_s"] = median_of(ns_times);
      r["muon_ns_matrices"] = ns_matrices;
      r["muon_bytes_sent"] = muon_sent;
      r["muon_bytes_received"] = muon_received;
    }
    std::printf("RESULT %s\n", r.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime& rt = dist::Runtime::init(&argc, &argv);
  return dist::run_guarded([&] { return run(argc, argv, rt); });
}
