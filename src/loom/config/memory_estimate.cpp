#include "loom/config/memory_estimate.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "loom/config/checks.h"
#include "loom/core/allocator.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/kernels/tiling.h"
#include "loom/models/accounting.h"

namespace loom::config {

namespace {

using models::checked_add;
using models::checked_mul;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0); }

// The shape of one micro-batch on one rank, for sizing the tensors it saves.
struct MicroBatch {
  std::int64_t tokens;     // this rank's tokens: local_batch_size · seq_length / context_parallel
  std::int64_t split;      // of them, a sequence-parallel shard: tokens / tensor_parallel
  std::int64_t tp;
  std::int64_t cb;         // bytes of compute_dtype
  std::int64_t logit_rows; // rows of one chunk of the fused loss's logits
};

// A [rows, width] tensor as the device allocator holds it: rounded to its size class
// (CachingAllocator::size_class, up to 12.5% on a large tensor, which is what a rank pays).
std::int64_t tensor_bytes(std::int64_t rows, std::int64_t width, std::int64_t element) {
  const char* f = "hidden_size";
  const std::int64_t n = checked_mul(checked_mul(rows, std::max<std::int64_t>(width, 1), "rows × width", f), element,
                                     "tensor bytes", f);
  return static_cast<std::int64_t>(CachingAllocator::size_class(static_cast<size_t>(n)));
}

std::int64_t per_tp(std::int64_t width, std::int64_t tp) { return std::max<std::int64_t>(1, ceil_div(width, tp)); }

// What the forward of a layer leaves for its backward, and what a recompute rebuilds of it.
struct LayerSaved {
  std::int64_t kept = 0;
  std::int64_t rebuilt = 0;  // the most one recomputed module (or the whole layer) rebuilds at once
};

// What the forward of decoder layer `index` leaves for its backward, tensor by tensor as the
// modules save them, each with the module that saves it (a tensor that is a module's input is
// kept when that module is recomputed, so those are the layer's): the residual stream in and
// after attention (sequence-split under tp); the two norm outputs (under tp the column-parallel
// linears keep their all-gathered copies of the whole sequence instead) and their fp32 1/rms;
// the rotated q and k, v, the attention output and its fp32 log-sum-exp; the MLP's fc1 output and
// activation, or the MoE's router scores, the routed copies of its T·K rows (permuted input,
// expert fc1 and activation, expert output and the combined rows) and the shared experts. A fully
// recomputed layer keeps its input only.
LayerSaved layer_saved(const models::ModelArgs& a, std::int64_t index, const LayerRecompute& r, const MicroBatch& m) {
  const std::int64_t D = a.hidden_size, T = m.tokens, Ts = m.split, tp = m.tp, cb = m.cb;
  LayerSaved out;
  std::map<std::string, std::int64_t> rebuilt;  // per recomputed module
  auto save = [&](const std::string& owner, std::int64_t bytes) {
    const std::string by = r.covering(owner);
    if (by.empty()) out.kept = checked_add(out.kept, bytes, "activation bytes", "seq_length");
    else rebuilt[by] += bytes;
  };
  save("", 2 * tensor_bytes(Ts, D, cb) + 2 * tensor_bytes(T, D, cb));  // residuals, norm outputs
  save("input_layernorm", tensor_bytes(Ts, 1, 4));
  save("pre_mlp_layernorm", tensor_bytes(Ts, 1, 4));
  const std::int64_t H = per_tp(a.num_attention_heads, tp);
  if (a.multi_latent_attention) {
    const std::int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    save("self_attention",
         tensor_bytes(T, a.kv_lora_rank + a.qk_rope_head_dim, cb) + tensor_bytes(T, a.kv_lora_rank, cb));
    if (a.q_lora_rank > 0) save("self_attention", 2 * tensor_bytes(T, a.q_lora_rank, cb));
    save("self_attention", 2 * tensor_bytes(T, H * qk, cb) + 2 * tensor_bytes(T, H * a.v_head_dim, cb));
  } else {
    const std::int64_t KV = per_tp(a.num_key_value_heads, tp), hd = a.head_dim;
    save("self_attention", 2 * tensor_bytes(T, H * hd, cb) + 2 * tensor_bytes(T, KV * hd, cb));
    if (a.qk_layernorm)
      save("self_attention", tensor_bytes(T, H * hd, cb) + tensor_bytes(T, KV * hd, cb) + tensor_bytes(T, H + KV, 4));
  }
  save("self_attention.core_attention", tensor_bytes(T, H, 4));
  if (a.is_moe_layer(index)) {
    const std::int64_t rows = checked_mul(Ts, a.moe_topk, "tokens × num_experts_per_tok", "num_experts_per_tok");
    const std::int64_t I = a.moe_intermediate_size;
    save("mlp.router", 3 * tensor_bytes(Ts, a.num_experts, 4) + 3 * tensor_bytes(Ts, a.moe_topk, 8));
    save("mlp", 3 * tensor_bytes(rows, D, cb));
    save("mlp.experts", tensor_bytes(rows, 2 * I, cb) + tensor_bytes(rows, I, cb));
    if (a.shared_expert_intermediate_size > 0) {
      const std::int64_t S = per_tp(a.shared_expert_intermediate_size, tp);
      save("mlp.shared_experts", tensor_bytes(T, 2 * S, cb) + tensor_bytes(T, S, cb));
    }
  } else {
    const std::int64_t I = per_tp(a.intermediate_size, tp);
    save("mlp", tensor_bytes(T, (a.gated_linear_unit ? 2 : 1) * I, cb) + tensor_bytes(T, I, cb));
  }
  if (r.full) {
    std::int64_t all = out.kept;
    for (const auto& [module, bytes] : rebuilt) all += bytes;
    return {tensor_bytes(Ts, D, cb), all};
  }
  for (const auto& [module, bytes] : rebuilt) out.rebuilt = std::max(out.rebuilt, bytes);
  return out;
}

// What the backward of layer `index` holds beside the saved tensors at its worst moment: the MLP's
// grads (of fc1's output and of the activation; in an MoE layer the grad of its routed rows) and
// the residual grad coming in and going out; with recompute, what it rebuilds on top (measured
// by plan_check_test.py under FSDP).
std::int64_t layer_backward_bytes(const models::ModelArgs& a, std::int64_t index, const LayerRecompute& r,
                                  const MicroBatch& m) {
  const std::int64_t D = a.hidden_size, cb = m.cb;
  std::int64_t b = 2 * tensor_bytes(m.split, D, cb) + layer_saved(a, index, r, m).rebuilt;
  if (a.is_moe_layer(index)) {
    // The experts' grads are formed and freed one expert group at a time; what stays is the grad
    // of the combined rows, un-permuted back to the routed order.
    b += tensor_bytes(m.split * a.moe_topk, D, cb);
  } else {
    const std::int64_t I = per_tp(a.intermediate_size, m.tp);
    b += tensor_bytes(m.tokens, (a.gated_linear_unit ? 2 : 1) * I, cb) + tensor_bytes(m.tokens, I, cb);
  }
  return b;
}

// The head's saved tensors: the final norm's output (its all-gathered copy under tp) and 1/rms,
// and, since the fused loss forms its grads in the forward (ops/loss.cpp), the grad of the hidden
// states (the head weight's grad is the parameter's gradient, counted with the gradients).
std::int64_t head_saved_bytes(const models::ModelArgs& a, const MicroBatch& m) {
  const std::int64_t D = a.hidden_size;
  return tensor_bytes(m.tokens, D, m.cb) + tensor_bytes(m.split, 1, 4) + tensor_bytes(m.tokens, D, m.cb);
}

MicroBatch micro_batch(const TrainConfig& c, const models::ModelArgs& a, const ParallelLayout& layout,
                       std::int64_t seq_length) {
  const auto& d = layout.dims;
  MicroBatch m;
  m.tp = d.tp();
  m.tokens = checked_mul(c.training.local_batch_size, ceil_div(seq_length, d.cp()), "local_batch_size × seq_length",
                         "seq_length");
  m.split = ceil_div(m.tokens, m.tp);
  m.cb = static_cast<std::int64_t>(dtype_size(a.compute_dtype));
  m.logit_rows = kernels::linear_cross_entropy_chunk(m.tokens, per_tp(a.vocab_size, m.tp), 0);
  return m;
}

std::optional<std::int64_t> read_number_file(const char* path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  char* end = nullptr;
  const long long v = std::strtoll(word.c_str(), &end, 10);
  // cgroup v1 writes a huge page-aligned number for "no limit".
  if (*end != '\0' || v <= 0 || v >= (1LL << 60)) return std::nullopt;
  return v;
}

std::optional<std::int64_t> mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long long kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return static_cast<std::int64_t>(kib) * 1024;
  return std::nullopt;
}

}  // namespace

std::string LayerRecompute::covering(const std::string& owner) const {
  for (const std::string& s : modules)
    if (!owner.empty() && (owner == s || owner.rfind(s + ".", 0) == 0)) return s;
  return "";
}

std::map<std::int64_t, LayerRecompute> layer_recomputes(const models::ModelArgs& a, const memory::RecomputeOptions& r,
                                                        const std::vector<std::int64_t>& layers) {
  std::map<std::int64_t, LayerRecompute> out;
  // full_recompute_layer applies under mode full, and under select for other layers than its.
  const bool any = r.mode != memory::RecomputeOptions::Mode::none;
  for (std::int64_t i : layers) out[i].full = any && r.full_layers.count(i) > 0;
  if (r.mode != memory::RecomputeOptions::Mode::select) return out;
  const std::vector<std::string> paths = detail::layer_module_paths(a);
  for (const memory::PathSelection& s : r.select) {
    const std::vector<std::string> matched = detail::matching_modules(s.pattern, paths);
    for (std::int64_t i : layers)
      if (s.layers.count(i))
        for (const std::string& p : matched) out[i].modules.push_back(p);
  }
  // Outermost first, so that covering() names the module the run recomputes.
  for (auto& [i, lr] : out)
    std::sort(lr.modules.begin(), lr.modules.end(),
              [](const std::string& x, const std::string& y) { return x.size() < y.size(); });
  return out;
}

std::int64_t MemoryEstimate::per_rank_bytes() const {
  const char* f = "the memory estimate";
  return checked_add(checked_add(parameter_bytes, gradient_bytes, f, "hidden_size"),
                     checked_add(optimizer_bytes, activation_bytes, f, "hidden_size"), f, "hidden_size");
}

std::int64_t MemoryEstimate::host_bytes() const {
  return checked_mul(per_rank_bytes(), ranks_per_host, "bytes per rank × ranks on the host", "hidden_size");
}

std::vector<std::int64_t> layer_activation_bytes(const TrainConfig& c, const models::ModelArgs& a,
                                                 const ParallelLayout& layout,
                                                 const memory::RecomputeOptions& recompute, std::int64_t seq_length,
                                                 const std::vector<std::int64_t>& layers) {
  const MicroBatch m = micro_batch(c, a, layout, seq_length);
  const auto recomputes = layer_recomputes(a, recompute, layers);
  std::vector<std::int64_t> bytes;
  for (std::int64_t i : layers) bytes.push_back(layer_saved(a, i, recomputes.at(i), m).kept);
  return bytes;
}

std::int64_t micro_batch_activation_bytes(const TrainConfig& c, const models::ModelArgs& a,
                                          const ParallelLayout& layout, const memory::RecomputeOptions& recompute,
                                          std::int64_t seq_length, const std::vector<std::int64_t>& layers) {
  std::int64_t total = 0;
  for (std::int64_t b : layer_activation_bytes(c, a, layout, recompute, seq_length, layers))
    total = checked_add(total, b, "activation bytes", "seq_length");
  return total;
}

std::int64_t backward_transient_bytes(const TrainConfig& c, const models::ModelArgs& a, const ParallelLayout& layout,
                                      const memory::RecomputeOptions& recompute, std::int64_t seq_length,
                                      const std::vector<std::int64_t>& layers, bool head) {
  const MicroBatch m = micro_batch(c, a, layout, seq_length);
  const auto recomputes = layer_recomputes(a, recompute, layers);
  std::int64_t worst = 0;
  for (std::int64_t i : layers) worst = std::max(worst, layer_backward_bytes(a, i, recomputes.at(i), m));
  // The head's tensors live from the loss's forward until the backward reaches the last layer,
  // with the loss's chunk of fp32 logits at their worst; that layer's grads come after them.
  if (head)
    worst = std::max(worst, head_saved_bytes(a, m) + tensor_bytes(m.logit_rows, per_tp(a.vocab_size, m.tp), 4));
  return worst;
}

std::int64_t context_parallel_exchange_bytes(const TrainConfig& c, const models::ModelArgs& a,
                                             const ParallelLayout& layout, std::int64_t seq_length) {
  const std::int64_t cp = layout.dims.cp();
  if (cp <= 1) return 0;
  const MicroBatch m = micro_batch(c, a, layout, seq_length);
  const std::int64_t H = per_tp(a.num_attention_heads, m.tp);
  const bool mla = a.multi_latent_attention;
  const std::int64_t q = mla ? H * (a.qk_nope_head_dim + a.qk_rope_head_dim) : H * a.head_dim;
  const std::int64_t k = mla ? q : per_tp(a.num_key_value_heads, m.tp) * a.head_dim;
  const std::int64_t v = mla ? H * a.v_head_dim : k;
  const std::int64_t kv_block = tensor_bytes(m.tokens, k, m.cb) + tensor_bytes(m.tokens, v, m.cb);
  const std::int64_t packed = 2 * (2 * tensor_bytes(m.tokens, q, m.cb) + kv_block);
  const std::string& method = c.parallelism.context_parallel_method;
  if (method == "colossal") return (cp + 1) * kv_block;
  if (method == "ulysses") return packed;
  // hybrid: Ulysses inside rows of u ranks, the ring over the cp / u rows (a block after the
  // all-to-all holds u times the tokens of 1/u of the heads: the same bytes).
  const std::int64_t u = std::max(1, c.parallelism.ulysses_degree_in_cp.value_or(1));
  return packed + (cp / u + 1) * kv_block;
}

MemoryEstimate estimate_memory(const TrainConfig& c, const models::ModelArgs& a, const ParallelLayout& layout,
                               const memory::RecomputeOptions& recompute, std::int64_t seq_length, int ranks_per_host) {
  MemoryEstimate e;
  e.ranks_per_host = ranks_per_host;
  const auto& d = layout.dims;
  // Routed experts are split over ep · efsdp = tp · fsdp ranks, like the dense weights; pipeline
  // stages hold 1/pp of the layers each (at least: the end stages also hold the embedding/head).
  const std::int64_t shards = static_cast<std::int64_t>(d.tp()) * d.fsdp() * d.pp();
  const std::int64_t params = ceil_div(models::count_parameters(a).total, shards);
  const std::int64_t b = static_cast<std::int64_t>(dtype_size(a.params_dtype));
  e.parameter_bytes = checked_mul(params, b, "parameters per rank × params_dtype bytes", "hidden_size");
  e.gradient_bytes = e.parameter_bytes;
  const std::int64_t state = a.params_dtype == DType::f32 ? 8 : 12;
  e.optimizer_bytes = checked_mul(params, state, "parameters per rank × optimizer state bytes", "hidden_size");

  // One micro-batch's tokens on this rank through every layer of the model: under pp the first
  // stage holds 1/pp of the layers for up to pp micro-batches in flight (1F1B), the same bytes.
  // The head's tensors are left out: they come while the gradients are still being formed, so
  // counting both would no longer be a lower bound.
  std::vector<std::int64_t> every_layer;
  for (std::int64_t i = 0; i < a.num_layers + a.mtp_num_layers; ++i) every_layer.push_back(i);
  e.activation_bytes = micro_batch_activation_bytes(c, a, layout, recompute, seq_length, every_layer);
  return e;
}

int ranks_per_host(int world_size) {
  // Open MPI's mpirun, then MPICH/Hydra's; without either every rank is taken to be on this host.
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char* local = std::getenv(name)) {
      const int n = std::atoi(local);
      if (n >= 1) return n;
    }
  return world_size;
}

std::optional<HostMemory> host_memory() {
  if (const char* env = std::getenv("LOOM_MEMORY_LIMIT"); env && *env) {
    const std::string text = env;
    if (text == "off") return std::nullopt;
    const auto bytes = parse_byte_size(text);
    LOOM_CHECK(bytes.has_value(), ConfigError, "LOOM_MEMORY_LIMIT='", text, "' is not a size: write ", kByteSizeUnits,
               ", or LOOM_MEMORY_LIMIT=off to skip the start-up memory check");
    return HostMemory{*bytes, "LOOM_MEMORY_LIMIT"};
  }
  std::optional<HostMemory> out;
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"})
    if (auto v = read_number_file(path)) {
      out = HostMemory{*v, std::string("the cgroup limit (") + path + ")"};
      break;
    }
  if (auto avail = mem_available(); avail && (!out || *avail < out->bytes)) out = HostMemory{*avail, "MemAvailable"};
  return out;
}

std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof(text), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return text;
}

std::string memory_fit_problem(const MemoryEstimate& e, const HostMemory& host, const TrainConfig& c,
                               const models::ModelArgs& model, const memory::RecomputeOptions& recompute) {
  const std::int64_t layers = model.num_layers + model.mtp_num_layers;
  const double usable = kUsableHostFraction * static_cast<double>(host.bytes);
  if (static_cast<double>(e.host_bytes()) <= usable) return "";
  std::ostringstream o;
  o << "the run needs at least " << format_bytes(e.per_rank_bytes()) << " per rank (parameters "
    << format_bytes(e.parameter_bytes) << ", gradients " << format_bytes(e.gradient_bytes) << ", optimizer state "
    << format_bytes(e.optimizer_bytes) << ", activations of one micro-batch " << format_bytes(e.activation_bytes)
    << ")";
  if (e.ranks_per_host > 1) o << ", " << format_bytes(e.host_bytes()) << " for the " << e.ranks_per_host << " ranks on this host";
  o << ", but this host gives " << format_bytes(host.bytes) << " (" << host.source << "; "
    << static_cast<int>(kUsableHostFraction * 100) << "% of it is usable). To fit: ";
  const bool state_heavy = e.parameter_bytes + e.gradient_bytes + e.optimizer_bytes >= e.activation_bytes;
  std::string fixes;
  auto fix = [&](const std::string& f) { fixes += (fixes.empty() ? "" : "; ") + f; };
  if (state_heavy) {
    fix("shard the model over more ranks on more hosts (parallelism.data_parallel_shard, tensor_parallel)");
    fix("or a smaller model (model.hidden_size, num_hidden_layers, vocab_size)");
  } else {
    if (recompute.mode != memory::RecomputeOptions::Mode::full)
      fix("recompute every layer (recompute.mode: full with full_recompute_layer: ['0-" +
          std::to_string(layers - 1) + "'])");
    fix("lower training.local_batch_size (now " + std::to_string(c.training.local_batch_size) +
        "; raise gradient accumulation through global_batch_size to keep the batch)");
    fix("lower the sequence length (train_dataset.dataloader.config.seq_length)");
    fix("or split it over more ranks on more hosts (parallelism.tensor_parallel, context_parallel)");
  }
  o << fixes << ". LOOM_MEMORY_LIMIT=<bytes> overrides the limit, LOOM_MEMORY_LIMIT=off skips this check";
  return o.str();
}

}  // namespace loom::config
