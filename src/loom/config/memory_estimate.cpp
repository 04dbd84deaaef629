#include "loom/config/memory_estimate.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "loom/core/error.h"
#include "loom/models/accounting.h"

namespace loom::config {

namespace {

using models::checked_add;
using models::checked_mul;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0); }

// Elements one token keeps for the backward of decoder layer `index` (before the TP split).
std::int64_t layer_activation_elements(const models::ModelArgs& a, std::int64_t index, bool recomputed) {
  const std::int64_t D = a.hidden_size;
  if (recomputed) return D;  // the layer's input; its inside is rebuilt in the backward
  const char* f = "hidden_size";
  std::int64_t q, kv;
  if (a.multi_latent_attention) {
    q = checked_mul(a.num_attention_heads, a.qk_nope_head_dim + a.qk_rope_head_dim, "heads × qk head dim", f);
    kv = checked_add(a.kv_lora_rank, a.qk_rope_head_dim, "kv_lora_rank + qk_rope_head_dim", "kv_lora_rank");
  } else {
    q = checked_mul(a.num_attention_heads, a.head_dim, "num_attention_heads × head_dim", "num_attention_heads");
    kv = checked_mul(a.num_key_value_heads, a.head_dim, "num_key_value_heads × head_dim", "num_key_value_heads");
  }
  std::int64_t mlp;
  if (a.is_moe_layer(index)) {
    mlp = checked_mul(checked_mul(3, a.moe_intermediate_size, "3 × moe_intermediate_size", "moe_intermediate_size"),
                      a.moe_topk, "num_experts_per_tok × 3 × moe_intermediate_size", "num_experts_per_tok");
    mlp = checked_add(mlp, checked_mul(3, a.shared_expert_intermediate_size, "3 × shared expert width",
                                       "moe_shared_expert_intermediate_size"),
                      "MoE activations", "moe_intermediate_size");
  } else {
    mlp = checked_mul(a.gated_linear_unit ? 3 : 2, a.intermediate_size, "MLP activations", "intermediate_size");
  }
  std::int64_t n = checked_mul(4, D, "4 × hidden_size", f);
  n = checked_add(n, checked_mul(2, checked_add(q, kv, "q + kv width", f), "2 × (q + kv width)", f), "layer", f);
  return checked_add(n, mlp, "layer activations", f);
}

bool recomputed(const memory::RecomputeOptions& r, std::int64_t layer) {
  if (r.mode == memory::RecomputeOptions::Mode::full) return r.full_layers.count(layer) > 0;
  if (r.mode == memory::RecomputeOptions::Mode::select)
    for (const auto& s : r.select)
      if (s.layers.count(layer)) return true;
  return false;
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

std::optional<std::int64_t> parse_size(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.empty()) return std::nullopt;
  double scale = 1;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  const std::string units = "KMGT";
  if (auto u = units.find(last); u != std::string::npos) {
    scale = std::pow(1024.0, static_cast<double>(u + 1));
    text.pop_back();
  } else if (last == 'B') {
    text.pop_back();
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0 || v * scale > 9.0e18) return std::nullopt;
  return static_cast<std::int64_t>(v * scale);
}

std::int64_t MemoryEstimate::per_rank_bytes() const {
  const char* f = "the memory estimate";
  return checked_add(checked_add(parameter_bytes, gradient_bytes, f, "hidden_size"),
                     checked_add(optimizer_bytes, activation_bytes, f, "hidden_size"), f, "hidden_size");
}

std::int64_t MemoryEstimate::host_bytes() const {
  return checked_mul(per_rank_bytes(), ranks_per_host, "bytes per rank × ranks on the host", "hidden_size");
}

std::int64_t micro_batch_activation_bytes(const TrainConfig& c, const models::ModelArgs& a,
                                          const ParallelLayout& layout, const memory::RecomputeOptions& recompute,
                                          std::int64_t seq_length, const std::vector<std::int64_t>& layers,
                                          bool logits) {
  const auto& d = layout.dims;
  const std::int64_t tp = d.tp();
  const std::int64_t tokens = checked_mul(c.training.local_batch_size, ceil_div(seq_length, d.cp()),
                                          "local_batch_size × seq_length", "seq_length");
  std::int64_t per_token = 0, gathered = 0;
  for (std::int64_t i : layers) {
    const bool rebuilt = recomputed(recompute, i);
    per_token = checked_add(per_token, layer_activation_elements(a, i, rebuilt),
                            "num_hidden_layers × activations per layer", "num_hidden_layers");
    // Under sequence parallelism the attention and MLP inputs are all-gathered to the whole
    // sequence, and the column-parallel linears keep that gathered copy for their weight grads:
    // 2·hidden per token of the whole sequence, not split by tp.
    if (tp > 1 && !rebuilt) gathered = checked_add(gathered, 2 * a.hidden_size, "gathered inputs", "hidden_size");
  }
  const std::int64_t cb = static_cast<std::int64_t>(dtype_size(a.compute_dtype));
  const std::int64_t split = ceil_div(checked_mul(per_token, cb, "activation bytes per token", "hidden_size"), tp);
  const std::int64_t whole = checked_mul(gathered, cb, "gathered activation bytes per token", "hidden_size");
  const std::int64_t layer_bytes = checked_mul(checked_add(split, whole, "activation bytes per token", "hidden_size"),
                                               tokens, "activation bytes per token × tokens", "seq_length");
  if (!logits) return layer_bytes;
  const std::int64_t logit_bytes = checked_mul(checked_mul(ceil_div(a.vocab_size, tp), 4, "vocab_size × 4 bytes",
                                                           "vocab_size"),
                                               tokens, "vocab_size × tokens of a micro-batch", "vocab_size");
  return checked_add(layer_bytes, logit_bytes, "activation bytes", "seq_length");
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
  std::vector<std::int64_t> every_layer;
  for (std::int64_t i = 0; i < a.num_layers + a.mtp_num_layers; ++i) every_layer.push_back(i);
  e.activation_bytes = micro_batch_activation_bytes(c, a, layout, recompute, seq_length, every_layer, true);
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
    const auto bytes = parse_size(text);
    LOOM_CHECK(bytes.has_value(), ConfigError, "LOOM_MEMORY_LIMIT='", text, "' is not a size: write bytes or a number "
               "with K, M, G or T (binary units), e.g. LOOM_MEMORY_LIMIT=64G, or LOOM_MEMORY_LIMIT=off to skip the "
               "start-up memory check");
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
