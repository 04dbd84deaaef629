// Recompute and swap on a real model through the trainer: every policy trains exactly like none
// (fp32, same losses bit for bit) and lowers the measured peak. (spec memory_optimization.md.)
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "trainer_fixture.h"

using namespace loom;
namespace lt = loom::testing;

namespace {
struct PolicyRun {
  std::vector<double> losses;
  int64_t peak_bytes = 0;  // the last step's allocator peak (metrics.jsonl mem_peak_bytes)
};

PolicyRun train_run(const std::string& data, const std::string& dir, const std::string& extra) {
  train::Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 3, 2, 2, "checkpoint:\n  enable_save: False\n" + extra)), lt::quiet_options(dir));
  t.train();
  PolicyRun out;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    out.losses.push_back(j["loss"].get<double>());
    out.peak_bytes = j["mem_peak_bytes"].get<int64_t>();
  }
  return out;
}
}  // namespace

TEST(TrainerMemoryPolicies, EveryPolicyTrainsExactlyLikeNoneWithALowerPeak) {
  // Same losses bit for bit shows a policy is harmless; a lower measured peak shows it engaged (a
  // policy the trainer ignored would train exactly like none too). Recompute drops the selected
  // modules' saved activations until backward, swap moves them to the host pool, which the
  // device allocator's peak does not count (spec memory_optimization.md). Steady-state step
  // (the last of 3), so the optimizer's state allocated at step 1 is in both.
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const PolicyRun none = train_run(data, dir.file("none"), "");
  ASSERT_EQ(none.losses.size(), 3u);
  ASSERT_GT(none.peak_bytes, 0);
  const std::vector<std::pair<const char*, std::string>> policies = {
      {"full", "recompute:\n  mode: full\n  full_recompute_layer: ['0-1']\n"},
      {"select", "recompute:\n  mode: select\n  select_module:\n    '.*mlp': ['0']\n    'self_attention': ['1']\n"},
      {"full+select", "recompute:\n  mode: select\n  full_recompute_layer: ['0']\n  select_module:\n    '.*mlp': ['1']\n"},
      {"select core_attention", "recompute:\n  mode: select\n  select_module:\n    '.*core_attention': ['0-1']\n"},
      {"exclude_op", "recompute:\n  mode: full\n  full_recompute_layer: ['0-1']\n  exclude_op: ['rms_norm']\n"},
      {"layer_swap", "swap:\n  enable: True\n  default_prefetch: 1\n  layer_swap:\n    - layers: ['0']\n"},
      {"op_swap", "swap:\n  enable: True\n  op_swap:\n    - op_name: '.*attention'\n      layers: ['0']\n"},
  };
  for (const auto& [name, yaml] : policies) {
    const PolicyRun got = train_run(data, dir.file(name), yaml);
    EXPECT_EQ(got.losses, none.losses) << name;
    EXPECT_LT(got.peak_bytes, none.peak_bytes) << name << ": the policy did not lower the peak";
  }
}
