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

// start_step and end_step are absolute optimizer steps (spec configuration.md "profiler"): a run
// resumed at step 2 with the range 2..3 starts at step 3 and still traces it.
TEST(Profiler, AResumedRunTracesTheRestOfItsRange) {
  lt::TempDir dir;
  train::ProfilerOptions o;
  o.enable = true;
  o.start_step = 2;
  o.end_step = 3;
  train::Profiler resumed(o, 0, dir.file("trace"));
  resumed.on_step_begin(3);
  EXPECT_TRUE(resumed.active());
  resumed.on_step_end(3);
  ASSERT_FALSE(resumed.written_path().empty());
  std::ifstream in(resumed.written_path());
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::set<std::string> steps;
  for (const auto& e : trace["traceEvents"])
    if (e.value("cat", "") == "step") steps.insert(e["name"].get<std::string>());
  EXPECT_EQ(steps, (std::set<std::string>{"step 3"}));
  // After its range, and before it, nothing is traced.
  train::Profiler late(o, 0, dir.file("late"));
  late.on_step_begin(4);
  EXPECT_FALSE(late.active());
  train::Profiler early(o, 0, dir.file("early"));
  early.on_step_begin(1);
  EXPECT_FALSE(early.active());
}
