// Generation speed (runtime/generation.h) on a Qwen3-shaped model in bf16 with random weights:
//
//   decode    batch-1 tokens/s after a prompt, against the memory-bandwidth bound: the bytes one
//             decode step reads (every weight the matmuls use, the cache up to that position)
//             divided by the stream-copy bandwidth measured in the same run (read + write counted,
//             as STREAM does)
//   prefill   the prompt's forward (flash attention, as training): GFLOP/s and the share of the
//             bf16 peak Loom reports for this CPU (`loom cpu`)
//
// It prints a RESULT JSON line (with the greedy ids, so the PyTorch peer's can be compared) and,
// with --save-hf DIR, writes the weights as a Hugging Face folder the peer loads
// (bench/torch_decode_reference.py; bench/generate_throughput.sh runs both).
//
//   bench_decode [--layers N] [--prompt N] [--new N] [--repeats N] [--save-hf DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu_path.h"
#include "loom/core/error.h"
#include "loom/core/parallel.h"
#include "loom/core/rng.h"
#include "loom/models/hf_checkpoint.h"
#include "loom/models/registry.h"
#include "loom/runtime/cpu/cpu_peak.h"
#include "loom/runtime/generation.h"

namespace {

using namespace loom;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

// Qwen3-0.6B's shape (hidden 1024, 16 query / 8 KV heads of 128, SwiGLU 3072, tied 151936-token
// embedding): 0.44B parameters in the layers, 0.16B in the embedding.
Json qwen3_section(int64_t layers) {
  return {{"model_type", "qwen3"},          {"vocab_size", 151936},        {"hidden_size", 1024},
          {"intermediate_size", 3072},      {"num_hidden_layers", layers}, {"num_attention_heads", 16},
          {"num_key_value_heads", 8},       {"head_dim", 128},             {"max_position_embeddings", 4096},
          {"rope_theta", 1000000.0},        {"rms_norm_eps", 1e-6},        {"tie_word_embeddings", true},
          {"params_dtype", "bfloat16"},     {"compute_dtype", "bfloat16"}};
}

// STREAM copy of 512 MiB split over the threads, best of five: bytes read + written per second.
double copy_bandwidth() {
  const int64_t bytes = int64_t{512} << 20;
  std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes), 0);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    parallel_for(0, bytes, int64_t{1} << 20,
                 [&](int64_t b, int64_t e) { std::memcpy(dst.data() + b, src.data() + b, static_cast<size_t>(e - b)); });
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(bytes) / best;
}

struct Args {
  int64_t layers = 28, prompt = 256, new_tokens = 64, repeats = 3;
  std::string save_hf;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&]() -> std::string {
      LOOM_CHECK(i + 1 < argc, ValueError, f, " needs a value");
      return argv[++i];
    };
    if (f == "--layers") a.layers = std::stoll(next());
    else if (f == "--prompt") a.prompt = std::stoll(next());
    else if (f == "--new") a.new_tokens = std::stoll(next());
    else if (f == "--repeats") a.repeats = std::stoll(next());
    else if (f == "--save-hf") a.save_hf = next();
    else
      LOOM_THROW(ValueError, "unknown option ", f,
                 "; use [--layers N] [--prompt N] [--new N] [--repeats N] [--save-hf DIR]");
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    models::BuiltModel built = models::build_model(qwen3_section(a.layers));
    nn::CausalLM& model = *built.model;
    model.materialize(1234);
    const models::ModelArgs& m = built.args;
    if (!a.save_hf.empty()) models::save_hf_model(a.save_hf, m, model.state_dict());

    // Bytes a decode step reads: every weight of a matmul (the tied embedding once, as the head),
    // the norms, and the cache of the positions before it (K and V of every KV head and layer).
    int64_t weight_bytes = 0, matmul_params = 0;
    for (const auto& [name, p] : model.named_parameters()) {
      weight_bytes += static_cast<int64_t>(p->tensor.nbytes());
      if (p->tensor.dim() == 2) matmul_params += p->tensor.numel();
    }
    const int64_t head_dim = m.head_dim > 0 ? m.head_dim : m.hidden_size / m.num_attention_heads;
    const int64_t cache_per_position = 2 * m.num_key_value_heads * head_dim * m.num_layers * 2;

    // Measured before and after every repeat, the best taken: a shared machine's bandwidth
    // varies by a third from one minute to the next, and the bound is what the memory can give.
    double copy_bps = copy_bandwidth();
    std::vector<int64_t> prompt(static_cast<size_t>(a.prompt));
    for (int64_t i = 0; i < a.prompt; ++i)
      prompt[static_cast<size_t>(i)] = static_cast<int64_t>(stream_uniform({7, 1, 0}, i) * m.vocab_size) % m.vocab_size;

    runtime::TokenGenerator generator(model, m.max_position_embeddings);
    runtime::GenerationOptions o;
    o.max_new_tokens = a.new_tokens;
    generator.generate({prompt}, o);  // warm-up: oneDNN primitives, pages
    std::vector<double> decode_s, prefill_s;
    std::vector<int64_t> ids;
    int64_t steps = 0, cache_bytes = 0;
    for (int64_t r = 0; r < a.repeats; ++r) {
      ids = generator.generate({prompt}, o)[0].ids;
      const runtime::GenerationStats& s = generator.last_stats();
      decode_s.push_back(s.decode_s);
      prefill_s.push_back(s.prefill_s);
      steps = s.decode_steps;
      cache_bytes = s.cache_bytes;
      copy_bps = std::max(copy_bps, copy_bandwidth());
    }
    std::sort(decode_s.begin(), decode_s.end());
    std::sort(prefill_s.begin(), prefill_s.end());
    const double decode = decode_s[decode_s.size() / 2], prefill = prefill_s[prefill_s.size() / 2];

    // A decode step at position p reads the weights and p positions of cache; over the run the
    // mean position is the prompt plus half the new tokens.
    const double mean_position = static_cast<double>(a.prompt) + static_cast<double>(steps + 1) / 2.0;
    const double bytes_per_token = static_cast<double>(weight_bytes) + mean_position * cache_per_position;
    const double tok_s = static_cast<double>(steps) / decode;
    const double bound_tok_s = copy_bps / bytes_per_token;
    // Prefill FLOPs: 2 per matmul parameter and token (the head only for the last position, the
    // embedding table not at all), and causal attention's QK^T and PV: 2 · 2 · heads · head_dim
    // per (query, key) pair, P(P+1)/2 pairs per layer.
    const double P = static_cast<double>(a.prompt);
    const double head_params = static_cast<double>(m.vocab_size * m.hidden_size);
    const double prefill_flops = 2.0 * (static_cast<double>(matmul_params) - head_params) * P + 2.0 * head_params +
                                 4.0 * static_cast<double>(m.num_attention_heads * head_dim * m.num_layers) *
                                     P * (P + 1) / 2.0;
    const runtime::cpu::CpuPeak peak = runtime::cpu::cpu_peak(num_threads(), DType::bf16);
    const double prefill_gflops = prefill_flops / prefill / 1e9;

    std::printf("cpu: %s, %d threads; path: %s\n", runtime::cpu::cpu_model_name().c_str(), num_threads(),
                bench::cpu_matrix_path().c_str());
    std::printf("model: qwen3-shaped, %lld layers, %.3fB parameters (%.3fB in matmuls), bf16: %.1f MiB of weights\n",
                static_cast<long long>(a.layers), static_cast<double>(weight_bytes) / 2e9,
                static_cast<double>(matmul_params) / 1e9, static_cast<double>(weight_bytes) / (1 << 20));
    std::printf("copy bandwidth: %.1f GB/s (read + write, best of the measurements around the repeats)\n", copy_bps / 1e9);
    std::printf("decode (batch 1, prompt %lld, %lld steps): %.2f tokens/s; bound %.2f tokens/s (%.1f MiB per token) -> "
                "%.0f%% of the bound\n",
                static_cast<long long>(a.prompt), static_cast<long long>(steps), tok_s, bound_tok_s,
                bytes_per_token / (1 << 20), 100.0 * tok_s / bound_tok_s);
    std::printf("prefill (%lld tokens): %.3f s, %.1f GFLOP/s = %.0f%% of the bf16 peak %.1f GFLOP/s (%s)\n",
                static_cast<long long>(a.prompt), prefill, prefill_gflops, 100.0 * prefill_gflops / peak.gflops,
                peak.gflops, peak.description.c_str());
    std::printf("KV cache: %.1f MiB for %lld positions (%lld bytes per position)\n",
                static_cast<double>(cache_bytes) / (1 << 20), static_cast<long long>(a.prompt + a.new_tokens),
                static_cast<long long>(cache_per_position));
    const Json result = {{"cpu", runtime::cpu::cpu_model_name()},
                         {"path", bench::cpu_matrix_path()},
                         {"threads", num_threads()},
                         {"layers", a.layers},
                         {"params", weight_bytes / 2},
                         {"prompt", a.prompt},
                         {"decode_steps", steps},
                         {"decode_tok_s", tok_s},
                         {"bound_tok_s", bound_tok_s},
                         {"vs_bound", tok_s / bound_tok_s},
                         {"copy_gbps", copy_bps / 1e9},
                         {"prefill_s", prefill},
                         {"prefill_gflops", prefill_gflops},
                         {"bf16_peak_gflops", peak.gflops},
                         {"prefill_vs_peak", prefill_gflops / peak.gflops},
                         {"cache_bytes", cache_bytes},
                         {"prompt_ids", prompt},
                         {"ids", ids}};
    std::printf("RESULT %s\n", result.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
