// Data-parallel throughput and traffic: the training step of `loom train` (forward, backward with
// sense 1/world, FSDP reduce, global grad-norm clip, AdamW on shards) on size A or B of
// shared/bench/README.md with random tokens, run by mpirun at 1 and 2 processes (bench/dist_throughput.sh
// alternates them). Prints one RESULT {json} line from rank 0 with
//   tokens_per_s         global tokens per second (median step after warm-up)
//   bytes_sent_per_step  bytes this rank handed to MPI per step, and the analytic FSDP volume:
//                        (n-1)/n · 4 B · (2·P + P_layers) per micro-batch (forward all-gather of every
//                        parameter, backward all-gather of the layers, reduce-scatter of fp32 grads)
//   state_bytes          per-rank parameter + grad + AdamW state, against one process's / n plus the
//                        largest unit's full parameters (the memory target)
// One process runs the plain model (no FSDP), as `loom train` does.
//
//   mpirun -np 2 --oversubscribe --bind-to none build/bench/bench_dist --size a --steps 8
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
  LOOM_THROW(ValueError, "--size must be a or b, got '", name, "'");
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

int run(int argc, char** argv, dist::Runtime& rt) {
  std::string size_name = "a", policy = "default";
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
    else LOOM_THROW(ValueError, "unknown option ", a, "; use --size a|b --steps N --warmup N --reshard always|never");
  }
  apply_thread_env();
  const Size size = size_of(size_name);
  const int n = rt.world_size();
  LOOM_CHECK(size.batch % n == 0, ValueError, "the global batch of ", size.batch, " must divide over ", n, " processes");
  const int64_t local_batch = size.batch / n;
  models::BuiltModel built = models::build_model(size.model);
  nn::CausalLM& model = *built.model;

  std::shared_ptr<dist::DeviceMesh> mesh;
  std::shared_ptr<dist::FullyShardedModel> fsdp;
  optim::NamedParams params;
  int64_t full_param_bytes = 0, layer_param_bytes = 0;
  for (auto& [name, p] : model.named_parameters()) {
    full_param_bytes += p->global_shape.numel() * 4;
    if (name.rfind("decoder.layers.", 0) == 0) layer_param_bytes += p->global_shape.numel() * 4;
  }
  if (n > 1 || force_fsdp) {
    mesh = std::make_shared<dist::DeviceMesh>(rt.world(), dist::ParallelDims::infer(n, dist::ParallelDegrees{}));
    dist::FsdpOptions o;
    o.reshard_after_forward_policy = policy;
    fsdp = dist::apply_fsdp(model, mesh, o);
    fsdp->materialize(0);
  } else {
    model.materialize(0);
  }
  for (auto& [name, t] : model.local_parameters()) params.push_back({name, t});
  optim::AdamWOptions ao;
  ao.learning_rate = 3e-4;
  optim::AdamW opt(params, ao);
  const double sense = 1.0 / n;

  std::vector<double> times;
  int64_t bytes_per_step = 0;
  std::vector<double> comm_times;
  for (int step = 0; step < warmup + steps; ++step) {
    if (mesh) mesh->reset_stats();
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
    opt.step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step >= warmup) times.push_back(s);
    double comm_s = 0;
    if (mesh) {
      bytes_per_step = mesh->total_stats().bytes_sent;
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
  // Analytic per-rank volume of one micro-batch (fp32 parameters, fp32 grads).
  const double frac = static_cast<double>(n - 1) / n;
  const bool reshard = policy != "never";
  const double analytic = frac * (2.0 * full_param_bytes + (reshard ? layer_param_bytes : 0.0));
  int64_t state_bytes = 0, one_process_state = 4 * full_param_bytes;  // params, grads, adam m, adam v
  int64_t largest_unit = 0;
  if (fsdp) {
    const dist::FsdpMemory m = fsdp->memory();
    state_bytes = m.sharded_param_bytes + m.sharded_grad_bytes;
    for (const auto& s : opt.param_states()) state_bytes += static_cast<int64_t>(s.exp_avg.nbytes() + s.exp_avg_sq.nbytes());
    largest_unit = m.largest_unit_param_bytes;
  } else {
    state_bytes = one_process_state;
  }
  if (rt.rank() == 0) {
    Json r = {{"size", size_name},
              {"processes", n},
              {"threads_per_process", num_threads()},
              {"reshard_after_forward", policy},
              {"median_step_s", median},
              {"median_collective_s", comm_median},
              {"tokens_per_s", tokens_per_s},
              {"bytes_sent_per_step", bytes_per_step},
              {"analytic_fsdp_bytes_per_step", n > 1 ? analytic : 0.0},
              {"state_bytes_per_rank", state_bytes},
              {"one_process_state_bytes", one_process_state},
              {"memory_target_bytes", n > 1 ? one_process_state / n + largest_unit : one_process_state}};
    std::printf("RESULT %s\n", r.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime& rt = dist::Runtime::init(&argc, &argv);
  return dist::run_guarded([&] { return run(argc, argv, rt); });
}
