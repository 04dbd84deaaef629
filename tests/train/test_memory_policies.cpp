// Recompute and swap on a real model through the trainer: every policy trains exactly like none
// (fp32, same losses bit for bit). (spec memory_optimization.md.)
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "trainer_fixture.h"

using namespace loom;
namespace lt = loom::testing;

namespace {
std::vector<double> run_losses(const std::string& data, const std::string& dir, const std::string& extra) {
  train::Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 3, 2, 2, "checkpoint:\n  enable_save: False\n" + extra)), lt::quiet_options(dir));
  t.train();
  std::vector<double> out;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}
}  // namespace

TEST(TrainerMemoryPolicies, EveryPolicyTrainsExactlyLikeNone) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const auto base = run_losses(data, dir.file("none"), "");
  ASSERT_EQ(base.size(), 3u);
  const std::vector<std::pair<const char*, std::string>> policies = {
      {"full", "recompute:\n  mode: full\n  full_recompute_layer: ['0-1']\n"},
      {"select", "recompute:\n  mode: select\n  select_module:\n    '.*mlp': ['0']\n    'self_attention': ['1']\n"},
      {"full+select", "recompute:\n  mode: select\n  full_recompute_layer: ['0']\n  select_module:\n    '.*mlp': ['1']\n"},
      {"select core_attention", "recompute:\n  mode: select\n  select_module:\n    '.*core_attention': ['0-1']\n"},
      {"exclude_op", "recompute:\n  mode: full\n  full_recompute_layer: ['0-1']\n  exclude_op: ['linear']\n"},
      {"layer_swap", "swap:\n  enable: True\n  default_prefetch: 1\n  layer_swap:\n    - layers: ['0']\n"},
      {"op_swap", "swap:\n  enable: True\n  op_swap:\n    - op_name: '.*attention'\n      layers: ['0']\n"},
  };
  for (const auto& [name, yaml] : policies) EXPECT_EQ(run_losses(data, dir.file(name), yaml), base) << name;
}
