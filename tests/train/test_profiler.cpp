// The profiler writes a Chrome trace for its step range with step, module and op spans and
// memory counters. (spec configuration.md "profiler".)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "trainer_fixture.h"

using namespace loom;
namespace lt = loom::testing;

TEST(Profiler, ChromeTraceWithStepModuleAndOpSpans) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string prof = "checkpoint:\n  enable_save: False\nprofiler:\n  enable_profiling: True\n  start_step: 2\n"
                           "  end_step: 3\n  profiler_level: 2\n  profile_memory: True\n  output_path: '" +
                           dir.file("trace") + "'\n";
  train::Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 4, 2, 2, prof)),
                   lt::quiet_options(dir.file("run")));
  t.train();
  const std::string path = dir.file("trace/trace_rank0.json");
  ASSERT_TRUE(std::filesystem::exists(path));
  std::ifstream in(path);
  auto trace = nlohmann::json::parse(in);
  std::set<std::string> steps, categories, ops;
  bool module_span = false, counter = false;
  for (auto& e : trace["traceEvents"]) {
    if (e["ph"] == "C") counter = true;
    if (e["ph"] != "X") continue;
    categories.insert(e["cat"].get<std::string>());
    const std::string name = e["name"];
    if (e["cat"] == "step" && name.rfind("step ", 0) == 0) steps.insert(name);
    if (e["cat"] == "op") ops.insert(name);
    if (e["cat"] == "module" && name.find("decoder.layers.0.mlp (MLP)") != std::string::npos) module_span = true;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
  }
  EXPECT_EQ(steps, (std::set<std::string>{"step 2", "step 3"}));  // only the configured range
  EXPECT_TRUE(categories.count("backward"));
  EXPECT_TRUE(module_span);
  EXPECT_TRUE(ops.count("linear") && ops.count("attention") && ops.count("rms_norm") && ops.count("swiglu"));
  EXPECT_TRUE(counter);
}
