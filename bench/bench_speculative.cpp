// Speculative decoding with DeepSeek-V3's multi-token prediction layers (runtime/generation.h,
// Speculative::mtp) against plain greedy decoding, on one model, side by side.
//
// MTP drafts are only worth checking when they are right, and random weights draft nothing the
// main model agrees with, so the bench first trains a small DeepSeek-V3 (MLA, MoE, 1 or 2 MTP
// layers) on arithmetic token sequences t_i = (a + i·s) mod 21 + 3 (s in 1..3), which the main head and the
// MTP heads can both learn. Then it generates greedily from held-out prompts of the same kind,
// plainly and speculatively, and prints the drafts kept, the tokens per main-model forward and
// the wall-clock decode rates (median of the repeats) — the speed-up is their ratio, and the
// tokens must be identical.
//
//   bench_speculative [--depth D] [--hidden N] [--layers N] [--steps N] [--new N] [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu_path.h"
#include "loom/autograd/engine.h"
#include "loom/core/error.h"
#include "loom/core/parallel.h"
#include "loom/models/registry.h"
#include "loom/optim/adamw.h"
#include "loom/runtime/cpu/cpu_peak.h"
#include "loom/runtime/generation.h"

namespace {

using namespace loom;
using Json = nlohmann::ordered_json;

struct Args {
  int64_t depth = 1, hidden = 128, layers = 8, steps = 300, new_tokens = 48, repeats = 3;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    LOOM_CHECK(i + 1 < argc, ValueError, f, " needs a value");
    const int64_t v = std::stoll(argv[++i]);
    if (f == "--depth") a.depth = v;
    else if (f == "--hidden") a.hidden = v;
    else if (f == "--layers") a.layers = v;
    else if (f == "--steps") a.steps = v;
    else if (f == "--new") a.new_tokens = v;
    else if (f == "--repeats") a.repeats = v;
    else LOOM_THROW(ValueError, "unknown flag ", f, "; use [--depth D] [--hidden N] [--layers N] [--steps N] [--new N] [--repeats N]");
  }
  return a;
}

constexpr int64_t kModulus = 21;

std::vector<int64_t> pattern(int64_t start, int64_t stride, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back((start + i * stride) % kModulus + 3);
  return out;
}

Json deepseek_section(const Args& a) {
  const int64_t heads = std::max<int64_t>(2, a.hidden / 32);
  return {{"model_type", "deepseek_v3"}, {"vocab_size", kModulus + 3}, {"hidden_size", a.hidden},
          {"num_hidden_layers", a.layers}, {"num_attention_heads", heads}, {"intermediate_size", 2 * a.hidden},
          {"moe_intermediate_size", a.hidden / 2}, {"n_routed_experts", 8}, {"num_experts_per_tok", 2},
          {"n_group", 2}, {"topk_group", 1}, {"n_shared_experts", 1}, {"first_k_dense_replace", 1},
          {"routed_scaling_factor", 2.5}, {"q_lora_rank", a.hidden / 2}, {"kv_lora_rank", a.hidden / 4},
          {"qk_nope_head_dim", 16}, {"qk_pos_emb_head_dim", 8}, {"v_head_dim", 16},
          {"num_nextn_predict_layers", a.depth}, {"mtp_loss_scaling_factor", 1.0},
          {"max_position_embeddings", 256}, {"compute_dtype", "float32"}};
}

// AdamW on batches of 16 patterns of 32 tokens, every (start, stride) in turn.
void train(nn::CausalLM& model, int64_t steps) {
  optim::NamedParams params;
  for (auto& [name, p] : model.named_parameters()) params.push_back({name, p->tensor});
  optim::AdamWOptions o;
  o.learning_rate = 5e-3;
  o.weight_decay = 0;
  optim::AdamW opt(params, o);
  constexpr int64_t B = 16, S = 32;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<int64_t> ids, labels;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t i = step * B + b;
      const std::vector<int64_t> p = pattern(i % kModulus, 1 + i / kModulus % 3, S + 1);
      ids.insert(ids.end(), p.begin(), p.end() - 1);
      labels.insert(labels.end(), p.begin() + 1, p.end());
    }
    nn::LMBatch batch;
    batch.input_ids = Tensor::from_vector(ids, {B, S});
    batch.labels = Tensor::from_vector(labels, {B, S});
    autograd::backward(model.forward(batch).loss);
    opt.step();
    opt.zero_grad();
  }
}

struct Run {
  std::vector<runtime::Generation> out;
  runtime::GenerationStats stats;
  double decode_s = 0;
};

Run generate(runtime::TokenGenerator& g, const std::vector<std::vector<int64_t>>& prompts,
             const runtime::GenerationOptions& o, int64_t repeats) {
  Run r;
  std::vector<double> times;
  for (int64_t i = 0; i < repeats; ++i) {
    r.out = g.generate(prompts, o);
    r.stats = g.last_stats();
    times.push_back(r.stats.decode_s);
  }
  std::sort(times.begin(), times.end());
  r.decode_s = times[times.size() / 2];
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    models::BuiltModel built = models::build_model(deepseek_section(a));
    nn::CausalLM& model = *built.model;
    model.materialize(7);
    const auto t0 = std::chrono::steady_clock::now();
    train(model, a.steps);
    const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // Prompts of the training kind: the question is whether the drafts agree with the main model.
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t p = 0; p < 4; ++p) prompts.push_back(pattern(7 + 5 * p, 1 + p % 3, 6));
    runtime::TokenGenerator g(model, 256);
    runtime::GenerationOptions plain;
    plain.max_new_tokens = a.new_tokens;
    runtime::GenerationOptions speculative = plain;
    speculative.speculative = runtime::Speculative::mtp;
    Json rows = Json::array();
    for (bool batched : {false, true}) {
      const std::vector<std::vector<int64_t>> batch = batched ? prompts : std::vector<std::vector<int64_t>>{prompts[0]};
      const Run p = generate(g, batch, plain, a.repeats), s = generate(g, batch, speculative, a.repeats);
      bool same = true;
      int64_t on_pattern = 0, tokens = 0;
      for (size_t r = 0; r < batch.size(); ++r) {
        same = same && p.out[r].ids == s.out[r].ids;
        const std::vector<int64_t> whole = pattern(7 + 5 * static_cast<int64_t>(r), 1 + static_cast<int64_t>(r) % 3,
                                                   6 + a.new_tokens);
        for (size_t t = 0; t < p.out[r].ids.size(); ++t, ++tokens) on_pattern += p.out[r].ids[t] == whole[6 + t];
      }
      const auto decoded = [&](const Run& r) {
        return static_cast<double>(r.stats.generated_tokens - static_cast<int64_t>(batch.size())) / r.decode_s;
      };
      const double acceptance = s.stats.drafted_tokens ? static_cast<double>(s.stats.accepted_tokens) /
                                                             static_cast<double>(s.stats.drafted_tokens)
                                                       : 0.0;
      const double per_forward =
          static_cast<double>(s.stats.generated_tokens) / static_cast<double>(std::max<int64_t>(s.stats.row_forwards, 1));
      std::printf("batch %zu: plain %.1f tokens/s, speculative %.1f tokens/s -> %.2fx; %lld of %lld drafts kept "
                  "(%.0f%%), %.2f tokens per forward; tokens %s, %lld of %lld on the pattern\n",
                  batch.size(), decoded(p), decoded(s), decoded(s) / decoded(p),
                  static_cast<long long>(s.stats.accepted_tokens), static_cast<long long>(s.stats.drafted_tokens),
                  100 * acceptance, per_forward, same ? "identical" : "DIFFERENT", static_cast<long long>(on_pattern),
                  static_cast<long long>(tokens));
      rows.push_back({{"batch", batch.size()}, {"plain_tok_s", decoded(p)}, {"speculative_tok_s", decoded(s)},
                      {"speedup", decoded(s) / decoded(p)}, {"acceptance", acceptance},
                      {"tokens_per_forward", per_forward}, {"identical", same}});
    }
    std::printf("cpu: %s, %d threads; path: %s; model: deepseek_v3 hidden %lld, %lld layers, %lld MTP layer(s), "
                "trained %lld steps in %.1f s\n",
                runtime::cpu::cpu_model_name().c_str(), num_threads(), bench::cpu_matrix_path().c_str(),
                static_cast<long long>(a.hidden), static_cast<long long>(a.layers), static_cast<long long>(a.depth),
                static_cast<long long>(a.steps), train_s);
    const Json result = {{"cpu", runtime::cpu::cpu_model_name()}, {"path", bench::cpu_matrix_path()},
                         {"threads", num_threads()}, {"depth", a.depth}, {"runs", rows}};
    std::printf("RESULT %s\n", result.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
