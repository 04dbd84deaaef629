// loom train --rank-report (train/rank_report.h): the report of one step holds what the rank's
// tensors and counters say, for the step asked for, and nothing when the run never reaches it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "loom/train/rank_report.h"
#include "trainer_fixture.h"

using namespace loom;
using namespace loom::train;
namespace lt = loom::testing;

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

TrainerOptions reporting(const std::string& run_dir, int64_t step) {
  TrainerOptions o = lt::quiet_options(run_dir);
  o.rank_report_step = step;
  return o;
}

}  // namespace

TEST(RankReport, OneProcessHoldsItsParametersGradsAndAdamStateAndSendsNothing) {
  lt::TempDir dir;
  const std::string run = dir.file("run");
  Trainer t(lt::tiny_config(lt::tiny_config_yaml(lt::write_pattern_dataset(dir), 3, 2, 4)),
            reporting(run, 0));
  t.train();
  const nlohmann::json r = read_json(rank_report_path(run, 0));
  // fp32 parameters, none tied: one fp32 grad each, AdamW's two fp32 moments, no master copies.
  int64_t numel = 0;
  for (auto& [name, p] : t.model().module().named_parameters()) numel += p->tensor.numel();
  EXPECT_EQ(r["step"], 3);
  EXPECT_EQ(r["world_size"], 1);
  EXPECT_EQ(r["parameter_bytes"], numel * 4);
  EXPECT_EQ(r["gradient_bytes"], numel * 4);
  EXPECT_EQ(r["optimizer_bytes"], 2 * numel * 4);
  const HeldBytes held = measure_held_bytes(t);
  EXPECT_EQ(r["parameter_bytes"], held.parameter_bytes);
  // The static state was live when the step began; the step rose above it (activations).
  EXPECT_GE(r["mem_start_bytes"].get<int64_t>(), 4 * numel * 4);
  EXPECT_GT(r["mem_peak_bytes"].get<int64_t>(), r["mem_start_bytes"].get<int64_t>());
  // One process: every axis is the world's one-rank group, which moves no bytes.
  EXPECT_EQ(r["bytes_sent_per_step"], (nlohmann::json{{"world", 0}}));
  for (auto& [axis, group] : r["mesh_groups"].items()) EXPECT_EQ(group, "world") << axis;
}

TEST(RankReport, AChosenStepIsReportedAndOneTheRunNeverReachesIsNot) {
  lt::TempDir dir;
  const std::string data = lt::write_pattern_dataset(dir);
  const std::string yaml = lt::tiny_config_yaml(data, 3, 2, 4);
  Trainer two(lt::tiny_config(yaml), reporting(dir.file("a"), 2));
  two.train();
  EXPECT_EQ(read_json(rank_report_path(dir.file("a"), 0))["step"], 2);
  Trainer beyond(lt::tiny_config(yaml), reporting(dir.file("b"), 4));
  beyond.train();
  EXPECT_FALSE(std::filesystem::exists(rank_report_path(dir.file("b"), 0)));
  Trainer off(lt::tiny_config(yaml), lt::quiet_options(dir.file("c")));
  off.train();
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir.file("c")) / "rank_report"));
}
