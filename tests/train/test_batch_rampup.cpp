// training.rampup_batch_size (Megatron-LM's RampupBatchsizeNumMicroBatchesCalculator, which
// MindFormers' dynamic batch follows): the global batch grows with the samples consumed, each
// step runs its own micro-batch count, metrics.jsonl shows the ramp, the injected losses' scale
// follows s / A, and a run resumed mid-ramp continues it exactly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "trainer_fixture.h"

using namespace loom;
using namespace loom::train;
namespace lt = loom::testing;
namespace fs = std::filesystem;

namespace {

struct Logged {
  std::vector<double> loss;
  std::vector<int64_t> global_batch_size, consumed_samples;
};

Logged logged(const std::string& run_dir) {
  Logged out;
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto row = nlohmann::json::parse(line);
    out.loss.push_back(row["loss"].get<double>());
    out.global_batch_size.push_back(row["global_batch_size"].get<int64_t>());
    out.consumed_samples.push_back(row["consumed_samples"].get<int64_t>());
  }
  return out;
}

// Local batch 2, target 8, ramping from 2 by 2 over the first 8 samples.
std::string ramped_yaml(const std::string& data, int64_t steps, const std::string& extra) {
  std::string yaml = lt::tiny_config_yaml(data, steps, 2, 8, extra);
  yaml.insert(yaml.find("  max_norm:"), "  rampup_batch_size: [2, 2, 8]\n");
  return yaml;
}

}  // namespace

// Megatron's closed form at consumed 0, 2, 4, 8, 16, ...: steps of 2, 2, 4 and then 8 samples
// (samples_per_increment = 8 / 3; int(4 / 2.67) = 1 increment, int(8 / 2.67) = 3).
TEST(BatchRampup, EachStepRunsTheRampsGlobalBatch) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  Trainer t(lt::tiny_config(ramped_yaml(data, 6, "checkpoint:\n  enable_save: False\n")),
            lt::quiet_options(dir.file("ramp")));
  EXPECT_EQ(t.state().num_accumulation_steps, 1);
  t.train();
  const Logged ramp = logged(dir.file("ramp"));
  EXPECT_EQ(ramp.global_batch_size, (std::vector<int64_t>{2, 2, 4, 8, 8, 8}));
  EXPECT_EQ(ramp.consumed_samples, (std::vector<int64_t>{2, 4, 8, 16, 24, 32}));
  EXPECT_EQ(t.state().num_accumulation_steps, 4);
  // The injected losses' backward factor follows the step's A (one process: s = 1).
  EXPECT_DOUBLE_EQ(t.runtime().causal_lm().auxiliary_loss_grad_scale(), 1.0 / 4);
  // The first two steps are a run at global batch 2, bit for bit (same samples, same updates).
  Trainer small(lt::tiny_config(lt::tiny_config_yaml(data, 2, 2, 2, "checkpoint:\n  enable_save: False\n")),
                lt::quiet_options(dir.file("small")));
  small.train();
  const Logged two = logged(dir.file("small"));
  ASSERT_EQ(two.loss.size(), 2u);
  EXPECT_EQ(two.loss[0], ramp.loss[0]);
  EXPECT_EQ(two.loss[1], ramp.loss[1]);
}

// A checkpoint saved mid-ramp (step 3, 8 samples consumed) resumes with the ramp's next batch and
// the same curve as the uninterrupted run.
TEST(BatchRampup, AResumedRunContinuesTheRamp) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  Trainer straight(lt::tiny_config(ramped_yaml(data, 6, "checkpoint:\n  enable_save: False\n")),
                   lt::quiet_options(dir.file("straight")));
  straight.train();
  const std::string save = "checkpoint:\n  save_interleaved_steps: 3\n  save_path: '" + dir.file("ck") + "'\n";
  {
    Trainer first(lt::tiny_config(ramped_yaml(data, 3, save)), lt::quiet_options(dir.file("first")));
    first.train();
  }
  Trainer resumed(lt::tiny_config(ramped_yaml(data, 6, save), {"checkpoint.load_path=" + dir.file("ck")}),
                  lt::quiet_options(dir.file("second")));
  EXPECT_EQ(resumed.state().consumed_samples, 8);
  EXPECT_EQ(resumed.state().num_accumulation_steps, 4);
  resumed.train();
  const Logged all = logged(dir.file("straight")), head = logged(dir.file("first")), tail = logged(dir.file("second"));
  ASSERT_EQ(head.loss.size() + tail.loss.size(), all.loss.size());
  std::vector<double> joined = head.loss;
  joined.insert(joined.end(), tail.loss.begin(), tail.loss.end());
  EXPECT_EQ(joined, all.loss);
  std::vector<int64_t> batches = head.global_batch_size;
  batches.insert(batches.end(), tail.global_batch_size.begin(), tail.global_batch_size.end());
  EXPECT_EQ(batches, all.global_batch_size);
}
