// The callbacks list: registered types built with their keyword arguments; an unknown type lists
// the registered names. (spec configuration.md "callbacks".)
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "loom/train/builtin_callbacks.h"
#include "trainer_fixture.h"

using namespace loom;
namespace lt = loom::testing;

TEST(Callbacks, RegistryBuildsKnownTypesAndNamesTheOthers) {
  train::register_builtin_callbacks();
  auto& r = train::CallbackRegistry::instance();
  EXPECT_TRUE(r.contains("LossCallback"));
  EXPECT_TRUE(r.contains("TokensPerExpertLogger"));
  auto cb = r.create("LossCallback", {{"log_interval", 10}}, "callbacks[0]");
  EXPECT_EQ(cb->name(), "LossCallback");
  try {
    r.create("MyCustomCallback", {}, "callbacks[1]");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("callbacks[1].type: unknown callback type 'MyCustomCallback'; registered "
                                         "callbacks are: LossCallback, MaxLogitsMonitor, TokensPerExpertLogger"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(r.create("LossCallback", {{"log_intervall", 10}}, "callbacks[0]"), ConfigError);
  EXPECT_THROW(r.create("LossCallback", {{"log_interval", 0}}, "callbacks[0]"), ConfigError);
}

TEST(Callbacks, UserCallbacksAreBuiltFromTheConfigAndCalled) {
  struct Counting : train::Callback {
    int* steps;
    explicit Counting(int* s) : steps(s) {}
    std::string name() const override { return "Counting"; }
    void on_step_end(train::CallbackContext& ctx) override {
      ++*steps;
      ctx.metrics->extra["counted"] = *steps;
    }
  };
  static int steps = 0;
  train::CallbackRegistry::instance().add("CountingCallback", [](const nlohmann::ordered_json&) {
    return std::make_unique<Counting>(&steps);
  });
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  train::Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 3, 2, 2, "checkpoint:\n  enable_save: False\ncallbacks:\n  - type: CountingCallback\n")), lt::quiet_options(dir.file("run")));
  t.train();
  EXPECT_EQ(steps, 3);
  try {
    train::Trainer bad(lt::tiny_config(lt::tiny_config_yaml(data, 3, 2, 2, "callbacks:\n  - type: Nope\n")), lt::quiet_options(dir.file("bad")));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown callback type 'Nope'"), std::string::npos) << e.what();
  }
}

TEST(Callbacks, MonitorWritesLocalLossAndSelectedParameterNorms) {
  // monitor.train_state.local_loss / local_norm (spec configuration.md "monitor").
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string monitor =
      "checkpoint:\n  enable_save: False\nmonitor:\n  train_state:\n    local_loss: True\n"
      "    local_norm: ['*final_layernorm*', 'output_layer.weight']\n";
  train::Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 2, 2, 2, monitor)),
                   lt::quiet_options(dir.file("run")));
  t.train();
  std::ifstream in(dir.file("run/metrics.jsonl"));
  std::string line;
  std::getline(in, line);
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["local_loss/dp_0"], j["loss"]);  // one process: the only data-parallel rank
  EXPECT_GT(j["local_norm/decoder.final_layernorm.weight"].get<double>(), 0.0);
  EXPECT_GT(j["local_norm/output_layer.weight"].get<double>(), 0.0);
  EXPECT_FALSE(j.contains("local_norm/embedding.word_embeddings.weight"));
}

TEST(Callbacks, LoraConfigIsRejectedClearly) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  try {
    train::Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 2, 2, 2, "lora_config:\n  target_modules: '.*linear_q'\n")), lt::quiet_options(dir.file("run")));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("LoRA fine-tuning is not supported by Loom yet"), std::string::npos);
  }
}

TEST(Callbacks, MoeMonitorWritesTokensPerExpertForTargetLayers) {
  // monitor.moe_monitor (spec configuration.md "monitor"): counts of the step, every interval.
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  std::string yaml = lt::tiny_config_yaml(data, 2, 2, 2,
                                          "checkpoint:\n  enable_save: False\nmonitor:\n  moe_monitor:\n"
                                          "    save_tokens_per_expert_interval: 2\n    target_layers: [1]\n");
  // the tiny Llama becomes a Qwen3-MoE: 4 experts, 2 per token
  yaml.replace(yaml.find("model_type: llama"), 17, "model_type: qwen3_moe\n  num_experts: 4\n  num_experts_per_tok: 2\n  moe_intermediate_size: 16");
  train::Trainer t(lt::tiny_config(yaml), lt::quiet_options(dir.file("run")));
  t.train();
  std::ifstream in(dir.file("run/metrics.jsonl"));
  std::string line1, line2;
  std::getline(in, line1);
  std::getline(in, line2);
  auto first = nlohmann::json::parse(line1), second = nlohmann::json::parse(line2);
  EXPECT_FALSE(first.contains("tokens_per_expert/layer_1/expert_0"));  // interval 2: step 2 only
  double total = 0;
  for (int e = 0; e < 4; ++e) total += second["tokens_per_expert/layer_1/expert_" + std::to_string(e)].get<double>();
  EXPECT_EQ(total, 2 * 32 * 2);  // batch 2 × seq 32 tokens, 2 experts each
  EXPECT_FALSE(second.contains("tokens_per_expert/layer_0/expert_0"));
}
