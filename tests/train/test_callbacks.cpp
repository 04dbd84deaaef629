// The callbacks list: registered types built with their keyword arguments; an unknown type lists
// the registered names. (spec configuration.md "callbacks".)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

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

namespace {

// ‖g‖₂ of a parameter's grad as this process holds it, summed in double here.
double grad_norm_of(train::Trainer& t, const std::string& name) {
  const nn::Parameter* p = t.model().module().find_parameter(name);
  EXPECT_NE(p, nullptr) << name;
  if (!p || !p->tensor.grad().defined()) return -1;
  double sum = 0;
  for (double v : p->tensor.grad().contiguous().to_double_vector()) sum += v * v;
  return std::sqrt(sum);
}

std::vector<nlohmann::json> metric_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST(Callbacks, MonitorWritesLocalLossAndSelectedParameterNorms) {
  // monitor.train_state.local_loss / local_norm (spec configuration.md "monitor"): the norm of
  // each selected parameter's grad after clipping. The last step's grads are still held when
  // train() returns, so its logged norms must be theirs.
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string monitor =
      "checkpoint:\n  enable_save: False\nmonitor:\n  train_state:\n    local_loss: True\n"
      "    local_norm: ['*final_layernorm*', 'output_layer.weight']\n";
  train::Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 2, 2, 2, monitor)),
                   lt::quiet_options(dir.file("run")));
  t.train();
  const auto lines = metric_lines(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json& last = lines.back();
  EXPECT_EQ(last["local_loss/dp_0"], last["loss"]);  // one process: the only data-parallel rank
  for (const std::string name : {"decoder.final_layernorm.weight", "output_layer.weight"}) {
    const double want = grad_norm_of(t, name);
    EXPECT_GT(want, 1e-4) << name;  // a grad that is there, so the comparison means something
    EXPECT_NEAR(last["local_norm/" + name].get<double>(), want, 1e-6 * want) << name;
  }
  EXPECT_FALSE(last.contains("local_norm/embedding.word_embeddings.weight"));
}

TEST(Callbacks, LocalNormsOfEveryParameterMakeUpTheClippedGlobalNorm) {
  // local_norm: True logs every parameter. Clipping scales every grad by max_norm / (norm + 1e-6)
  // when that is below 1 (MindFormers' clip_grad_norm), so on one process the per-parameter norms
  // must add up, in squares, to the logged pre-clip grad_norm times that factor, at every step.
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string monitor =
      "checkpoint:\n  enable_save: False\nmonitor:\n  train_state:\n    local_norm: True\n";
  train::Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 3, 2, 2, monitor), {"training.max_norm=0.5"}),
                   lt::quiet_options(dir.file("run")));
  t.train();
  const size_t parameters = t.model().module().named_parameters().size();
  const auto lines = metric_lines(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  int clipped = 0;
  for (const nlohmann::json& line : lines) {
    double squares = 0;
    size_t logged = 0;
    for (const auto& [key, value] : line.items())
      if (key.rfind("local_norm/", 0) == 0) {
        squares += value.get<double>() * value.get<double>();
        ++logged;
      }
    EXPECT_EQ(logged, parameters) << "step " << line["step"];
    const double norm = line["grad_norm"].get<double>();
    const double clip = std::min(1.0, 0.5 / (norm + 1e-6));
    clipped += clip < 1.0;
    EXPECT_NEAR(std::sqrt(squares), norm * clip, 1e-6 * norm) << "step " << line["step"];
  }
  EXPECT_GT(clipped, 0) << "no step was clipped: the check would not see the clip factor";
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
