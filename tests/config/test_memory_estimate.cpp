// The start-up memory estimate (config/memory_estimate.h): its numbers from the model's
// accounting and the memory policy, checked size arithmetic, the host limit and its override,
// and a run that cannot fit stopped as a gap with the numbers and the fix.
#include <gtest/gtest.h>

#include <cstdlib>

#include "config_test_util.h"
#include "loom/config/memory_estimate.h"
#include "loom/models/accounting.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

namespace {

// A tiny Llama: hidden 32, 4 heads of 8, 2 KV heads, gated MLP of 64, 2 layers, vocab 64, fp32.
std::string tiny(const std::string& extra = "") {
  return "training:\n  global_batch_size: 4\n  local_batch_size: 2\n"
         "train_dataset:\n  dataloader:\n    type: BlendedMegatronDatasetDataLoader\n    sizes: [100, 0, 0]\n"
         "    config:\n      seq_length: 32\n      split: '1,0,0'\n      data_path: [/data/tokens]\n"
         "model:\n  model_type: llama\n  vocab_size: 64\n  hidden_size: 32\n  intermediate_size: 64\n"
         "  num_hidden_layers: 2\n  num_attention_heads: 4\n  num_key_value_heads: 2\n"
         "  params_dtype: float32\n  compute_dtype: float32\n" + extra;
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string all_gaps(const LoadedConfig& c) {
  std::string s;
  for (const auto& g : c.resolved->gaps) s += g + "\n";
  return s;
}

}  // namespace

TEST(MemoryEstimate, BytesComeFromTheModelAccountingAndThePolicy) {
  ScopedEnv limit("LOOM_MEMORY_LIMIT", "off");
  LoadedConfig c = load(tiny(), 1);
  ASSERT_TRUE(c.resolved->memory.has_value());
  const MemoryEstimate& e = *c.resolved->memory;
  const int64_t params = models::count_parameters(c.resolved->model_args()).total;
  EXPECT_EQ(params, 2 * 64 * 32 + 32 + 2 * (2 * 32 + 32 * 32 * 2 + 2 * 16 * 32 + 3 * 64 * 32));
  EXPECT_EQ(params, 22688);
  EXPECT_EQ(e.parameter_bytes, params * 4);
  EXPECT_EQ(e.gradient_bytes, params * 4);
  EXPECT_EQ(e.optimizer_bytes, params * 8);  // two fp32 AdamW moments, no master copy for fp32
  // Per layer, 2·32 tokens in fp32 (every size here is its own allocator size class): the residual
  // in and after attention and the two norm outputs (4 × 64·32·4), their 1/rms (2 × 64·4); q and
  // the attention output (2 × 64·32·4), k and v (2 × 64·16·4), the log-sum-exp (64·4 heads·4);
  // fc1's output and the activation (64·128·4 + 64·64·4).
  const int64_t layer = 4 * 8192 + 2 * 256 + 2 * 8192 + 2 * 4096 + 1024 + 32768 + 16384;
  EXPECT_EQ(layer, 108032);
  EXPECT_EQ(e.activation_bytes, 2 * layer);
  EXPECT_EQ(e.per_rank_bytes(), params * 16 + 2 * layer);

  // Full recompute of layer 0 keeps its input only; two FSDP ranks hold half the state each.
  LoadedConfig r = load(tiny("recompute:\n  mode: full\n  full_recompute_layer: ['0']\n"), 1);
  EXPECT_EQ(r.resolved->memory->activation_bytes, 8192 + layer);
  LoadedConfig two = load(tiny(), 2);
  EXPECT_EQ(two.resolved->memory->parameter_bytes, (params + 1) / 2 * 4);
  EXPECT_EQ(two.resolved->memory->ranks_per_host, 2);
  EXPECT_EQ(two.resolved->memory->host_bytes(), 2 * two.resolved->memory->per_rank_bytes());
}

TEST(MemoryEstimate, SelectiveRecomputeDropsTheTensorsSavedInsideTheSelectedModules) {
  ScopedEnv limit("LOOM_MEMORY_LIMIT", "off");
  auto activations = [](const std::string& select) {
    return load(tiny("recompute:\n  mode: select\n  select_module:\n" + select), 1).resolved->memory->activation_bytes;
  };
  const int64_t layer = 108032;  // BytesComeFromTheModelAccountingAndThePolicy
  // The MLP keeps its input (the norm output, the layer's); fc1's output and the activation go.
  EXPECT_EQ(activations("    '.*mlp': ['0']\n"), 2 * layer - (32768 + 16384));
  // Attention drops q, k, v, its output and the log-sum-exp; core_attention alone only the
  // log-sum-exp (q, k, v are its inputs, the output linear_proj's).
  EXPECT_EQ(activations("    'self_attention': ['0-1']\n"), 2 * (layer - (2 * 8192 + 2 * 4096 + 1024)));
  EXPECT_EQ(activations("    '.*core_attention': ['1']\n"), 2 * layer - 1024);
  // A linear keeps its input, which is all it saves: nothing changes.
  EXPECT_EQ(activations("    'mlp.linear_fc1': ['0-1']\n"), 2 * layer);
}

TEST(MemoryEstimate, ContextParallelExchangeIsTheRingsBlocksOrUlyssesPackedCopies) {
  ScopedEnv limit("LOOM_MEMORY_LIMIT", "off");
  auto exchange = [](const std::string& parallel, int world) {
    LoadedConfig c = load(tiny("  use_attn_mask_compression: True\nparallelism:\n" + parallel), world);
    EXPECT_TRUE(c.resolved.has_value());
    return context_parallel_exchange_bytes(c.config, c.resolved->model_args(), c.resolved->layout, 32);
  };
  // cp 2: 2·16 tokens per rank in fp32; a K or V block is [32, 2 heads·8] = 2 KiB, q and the
  // output [32, 4·8] = 4 KiB.
  EXPECT_EQ(exchange("  context_parallel: 1\n", 1), 0);
  EXPECT_EQ(exchange("  context_parallel: 2\n", 2), 3 * (2048 + 2048));  // its own, a peer's, dK/dV
  EXPECT_EQ(exchange("  context_parallel: 2\n  context_parallel_method: ulysses\n", 2),
            2 * (2 * 4096 + 2048 + 2048));  // send and receive copies of q, k, v, out
  // cp 4 ring: a quarter of the tokens per block, five blocks.
  EXPECT_EQ(exchange("  context_parallel: 4\n", 4), 5 * (1024 + 1024));
}

TEST(MemoryEstimate, ARunTheHostCannotHoldIsAGapWithTheNumbersAndTheFix) {
  {
    ScopedEnv limit("LOOM_MEMORY_LIMIT", "100K");
    LoadedConfig c = load(tiny(), 1);
    const std::string gaps = all_gaps(c);
    EXPECT_NE(gaps.find("the run needs at least"), std::string::npos) << gaps;
    EXPECT_NE(gaps.find("model: the run needs at least 565.5 KiB per rank"), std::string::npos) << gaps;
    EXPECT_NE(gaps.find("this host gives 100.0 KiB (LOOM_MEMORY_LIMIT"), std::string::npos) << gaps;
    EXPECT_NE(gaps.find("parameters 88.6 KiB"), std::string::npos) << gaps;
    EXPECT_NE(gaps.find("model.hidden_size, num_hidden_layers, vocab_size"), std::string::npos) << gaps;
    EXPECT_THROW(c.resolved->require_runnable(), ConfigError);
  }
  {
    // Activations dominate: the fixes are recompute, a smaller batch or sequence.
    ScopedEnv limit("LOOM_MEMORY_LIMIT", "1G");
    LoadedConfig c = load(tiny(), 1, {"train_dataset.dataloader.config.seq_length=1000000"});
    const std::string gaps = all_gaps(c);
    EXPECT_NE(gaps.find("training.local_batch_size: the run needs at least"), std::string::npos) << gaps;
    EXPECT_NE(gaps.find("recompute.mode: full with full_recompute_layer: ['0-1']"), std::string::npos) << gaps;
    EXPECT_NE(gaps.find("train_dataset.dataloader.config.seq_length"), std::string::npos) << gaps;
  }
  {
    ScopedEnv limit("LOOM_MEMORY_LIMIT", "64G");
    EXPECT_TRUE(load(tiny(), 1).resolved->gaps.empty());
  }
  {
    ScopedEnv limit("LOOM_MEMORY_LIMIT", "lots");
    const std::string e = errors(tiny(), 1);
    EXPECT_NE(e.find("LOOM_MEMORY_LIMIT='lots' is not a size"), std::string::npos) << e;
  }
}

TEST(MemoryEstimate, HostMemoryReadsTheLimitOrTheOverride) {
  {
    ScopedEnv limit("LOOM_MEMORY_LIMIT", "1.5G");
    const auto h = host_memory();
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->bytes, int64_t{3} << 29);
    EXPECT_EQ(h->source, "LOOM_MEMORY_LIMIT");
  }
  {
    ScopedEnv limit("LOOM_MEMORY_LIMIT", "off");
    EXPECT_FALSE(host_memory().has_value());
  }
  {
    ScopedEnv limit("LOOM_MEMORY_LIMIT", nullptr);
    const auto h = host_memory();  // this machine's cgroup limit or MemAvailable
    ASSERT_TRUE(h.has_value());
    EXPECT_GT(h->bytes, 0);
  }
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(100), "100 B");
}

// A product of sizes beyond 64 bits is an error naming the fields, never a wrapped size.
TEST(MemoryEstimate, SizeProductsThatOverflowNameTheFields) {
  ScopedEnv limit("LOOM_MEMORY_LIMIT", "off");
  const std::string hidden = errors(tiny(), 1, {"model.hidden_size=4611686018427387904"});
  EXPECT_NE(hidden.find("model: vocab_size × hidden_size = 64 × 4611686018427387904 overflows 64 bits"),
            std::string::npos) << hidden;
  const std::string vocab = errors(tiny(), 1, {"model.vocab_size=4611686018427387904"});
  EXPECT_NE(vocab.find("vocab_size × hidden_size = 4611686018427387904 × 32 overflows 64 bits"), std::string::npos)
      << vocab;
  const std::string seq = errors(tiny(), 1, {"train_dataset.dataloader.config.seq_length=4611686018427387904"});
  EXPECT_NE(seq.find("train_dataset.dataloader.config.seq_length: the memory estimate: local_batch_size × seq_length"),
            std::string::npos) << seq;
  const std::string layers = errors(tiny(), 1, {"model.num_hidden_layers=4611686018427387904"});
  EXPECT_NE(layers.find("model.num_hidden_layers = 4611686018427387904 is more layers than Loom builds (at most "
                        "1048576)"), std::string::npos) << layers;
}
