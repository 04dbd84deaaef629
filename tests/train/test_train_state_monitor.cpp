// monitor.train_state, monitor.health_checkpoint's embedding check and the MaxLogitsMonitor on one
// process (train/train_state_monitor.h; spec configuration.md "monitor"); every layout against
// one process in tests/dist/contract_parity_test.py (case monitoring).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/runtime/checkpoint_reader.h"
#include "loom/train/builtin_callbacks.h"
#include "trainer_fixture.h"

using namespace loom;
namespace lt = loom::testing;

namespace {

std::vector<nlohmann::json> metric_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

// device_norm and device_loss (spec configuration.md "monitor"): per-rank figures, here of the one
// rank: the norm of the grads it holds (the selected ones) and its own loss.
TEST(TrainStateMonitor, DeviceNormAndLossArePerRank) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string monitor = "checkpoint:\n  enable_save: False\nmonitor:\n  train_state:\n    device_loss: True\n"
                              "    device_norm: True\n    local_norm: True\n";
  train::Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 2, 2, 2, monitor)), lt::quiet_options(dir.file("run")));
  t.train();
  const nlohmann::json last = metric_lines(dir.file("run/metrics.jsonl")).back();
  EXPECT_EQ(last["device_loss/rank_0"], last["loss"]);
  double squares = 0;
  for (const auto& [key, value] : last.items())
    if (key.rfind("local_norm/", 0) == 0) squares += value.get<double>() * value.get<double>();
  EXPECT_NEAR(last["device_norm/rank_0"].get<double>(), std::sqrt(squares), 1e-9 * std::sqrt(squares));
}

// MindFormers' MaxLogitsMonitor: the maximum attention logit of each layer (over heads and
// positions, the QK-clip statistic), their max and mean, each step; listing it turns the tracking on.
TEST(TrainStateMonitor, MaxLogitsMonitorLogsEveryLayersMaximum) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string yaml = "checkpoint:\n  enable_save: False\ncallbacks:\n  - type: MaxLogitsMonitor\n";
  train::Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 3, 2, 2, yaml)), lt::quiet_options(dir.file("run")));
  t.train();
  const auto lines = metric_lines(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  for (const nlohmann::json& line : lines) {
    ASSERT_TRUE(line.contains("max_attention_logit/layer_0") && line.contains("max_attention_logit/layer_1")) << line;
    const double l0 = line["max_attention_logit/layer_0"], l1 = line["max_attention_logit/layer_1"];
    EXPECT_TRUE(std::isfinite(l0) && std::isfinite(l1));
    EXPECT_EQ(line["max_attention_logit/max"].get<double>(), std::max(l0, l1));
    EXPECT_NEAR(line["max_attention_logit/mean"].get<double>(), (l0 + l1) / 2, 1e-12);
  }
  // Without the callback (and without Muon's QK-clip) nothing is tracked or logged.
  train::Trainer plain(lt::tiny_config(lt::tiny_config_yaml(data, 1, 2, 2, "checkpoint:\n  enable_save: False\n")),
                       lt::quiet_options(dir.file("plain")));
  plain.train();
  EXPECT_FALSE(metric_lines(dir.file("plain/metrics.jsonl")).back().contains("max_attention_logit/layer_0"));
  EXPECT_THROW(train::make_configured_callbacks({config::CallbackConfig{"MaxLogitsMonitor", {{"interval", 2}}}}),
               ConfigError);
}

// monitor.health_checkpoint.embedding_local_norm_threshold, as the reference's checkpoint health
// monitor: a step whose embedding grad norm exceeds it leaves a checkpoint marked unhealthy, and
// a resume from the save directory takes the latest healthy iteration instead.
TEST(TrainStateMonitor, EmbeddingHealthCheckMarksCheckpointsAndResumeSkipsThem) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string save = "checkpoint:\n  save_interleaved_steps: 1\n  save_path: '" + dir.file("ck") + "'\n";
  auto run = [&](const std::string& name, int64_t steps, const std::string& threshold,
                 std::vector<std::string> overrides) {
    const std::string health = "monitor:\n  health_checkpoint:\n    embedding_local_norm_threshold: " + threshold + "\n";
    train::Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, steps, 2, 2, save + health), overrides),
                     lt::quiet_options(dir.file(name)));
    t.train();
    return metric_lines(dir.file(name + "/metrics.jsonl")).back();
  };
  const nlohmann::json healthy = run("healthy", 2, "1.e+9", {});
  EXPECT_GT(healthy["embedding_local_norm"].get<double>(), 0.0);
  std::ifstream common2(dir.file("ck/iteration_00000002/common.json"));
  EXPECT_TRUE(nlohmann::json::parse(common2)["loom"]["healthy"].get<bool>());
  // Step 3, from the checkpoint of step 2, with a threshold its embedding grad exceeds.
  ::testing::internal::CaptureStderr();
  run("unhealthy", 3, "1.e-12", {"checkpoint.load_path=" + dir.file("ck")});
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("step 3: the embedding grad norm"), std::string::npos);
  std::ifstream common3(dir.file("ck/iteration_00000003/common.json"));
  EXPECT_FALSE(nlohmann::json::parse(common3)["loom"]["healthy"].get<bool>());
  EXPECT_EQ(runtime::resolve_load_path(dir.file("ck")).dir, dir.file("ck") + "/iteration_00000002");
  EXPECT_EQ(runtime::resolve_load_path(dir.file("ck/iteration_00000003")).dir, dir.file("ck/iteration_00000003"));
}
