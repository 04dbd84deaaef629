// Validation during training (training.eval_interval, training.eval_iters): when it runs, what
// it writes, that it perturbs nothing the training reads (the curve is bit-identical with it
// off) and reads the same batches after a resume, its memory, and the configuration's rules.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "trainer_fixture.h"

using namespace loom;
using namespace loom::train;
namespace lt = loom::testing;
namespace fs = std::filesystem;

namespace {

// The tiny config with a validation share: 3/4 of the documents train, 1/4 validate.
std::string with_validation(const std::string& data, int64_t steps, const std::string& extra) {
  std::string yaml = lt::tiny_config_yaml(data, steps, 2, 4, extra);
  const auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = yaml.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    yaml.replace(at, from.size(), to);
  };
  replace("split: '1,0,0'", "split: '3,1,0'");
  replace("sizes: [400, 0, 0]", "sizes: [400]");
  return yaml;
}

struct Lines {
  std::vector<nlohmann::json> steps, evals;
};

Lines lines_of(const std::string& run_dir) {
  Lines out;
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    (j.contains("eval") ? out.evals : out.steps).push_back(j);
  }
  return out;
}

const std::string kNoSave = "checkpoint:\n  enable_save: False\n";

}  // namespace

TEST(Validation, RunsEveryIntervalAndAfterTheLastStep) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  Trainer t(lt::tiny_config(with_validation(data, 5, kNoSave), {"training.eval_interval=2", "training.eval_iters=3"}),
            lt::quiet_options(dir.file("run")));
  const TrainSummary s = t.train();
  const Lines l = lines_of(dir.file("run"));
  ASSERT_EQ(l.steps.size(), 5u);
  ASSERT_EQ(l.evals.size(), 3u);
  std::vector<int64_t> at;
  for (const auto& e : l.evals) {
    at.push_back(e["step"].get<int64_t>());
    EXPECT_EQ(e["eval"], "valid");
    for (const char* key : {"val_loss", "val_ppl", "val_tokens", "eval_time_s", "eval_mem_peak_bytes"})
      EXPECT_TRUE(e.contains(key)) << key;
    EXPECT_NEAR(e["val_ppl"].get<double>(), std::exp(e["val_loss"].get<double>()), 1e-9 * e["val_ppl"].get<double>());
    // 3 global batches of 4 samples of 32 tokens, every token counted (no mask in this data).
    EXPECT_EQ(e["val_tokens"].get<int64_t>(), 3 * 4 * 32);
  }
  EXPECT_EQ(at, (std::vector<int64_t>{2, 4, 5}));
  ASSERT_TRUE(s.last_val_loss.has_value());
  EXPECT_EQ(*s.last_val_loss, l.evals.back()["val_loss"].get<double>());
  // The model learns the patterns: held-out loss falls too.
  EXPECT_LT(l.evals.back()["val_loss"].get<double>(), l.evals.front()["val_loss"].get<double>());
}

TEST(Validation, LeavesTheTrainingCurveBitIdentical) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  for (const char* run : {"on", "off"}) {
    std::vector<std::string> sets;
    if (std::string(run) == "on") sets = {"training.eval_interval=1", "training.eval_iters=2"};
    Trainer t(lt::tiny_config(with_validation(data, 6, kNoSave), sets), lt::quiet_options(dir.file(run)));
    t.train();
  }
  const Lines on = lines_of(dir.file("on")), off = lines_of(dir.file("off"));
  ASSERT_EQ(on.evals.size(), 6u);
  ASSERT_EQ(off.evals.size(), 0u);
  ASSERT_EQ(on.steps.size(), off.steps.size());
  for (size_t i = 0; i < on.steps.size(); ++i) {
    EXPECT_EQ(on.steps[i]["loss"].get<double>(), off.steps[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(on.steps[i]["grad_norm"].get<double>(), off.steps[i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
}

TEST(Validation, AResumedRunValidatesAsTheUninterruptedOne) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string save = "checkpoint:\n  save_interleaved_steps: 2\n  save_path: '" + dir.file("ck") + "'\n";
  const std::vector<std::string> every2 = {"training.eval_interval=2", "training.eval_iters=3"};
  Trainer straight(lt::tiny_config(with_validation(data, 6, kNoSave), every2), lt::quiet_options(dir.file("straight")));
  straight.train();
  {
    Trainer first(lt::tiny_config(with_validation(data, 4, save), every2), lt::quiet_options(dir.file("first")));
    first.train();
  }
  std::vector<std::string> resume = every2;
  resume.push_back("checkpoint.load_path=" + dir.file("ck"));
  Trainer resumed(lt::tiny_config(with_validation(data, 6, save), resume), lt::quiet_options(dir.file("second")));
  resumed.train();
  const Lines all = lines_of(dir.file("straight")), tail = lines_of(dir.file("second"));
  ASSERT_EQ(all.evals.size(), 3u);
  ASSERT_EQ(tail.evals.size(), 1u);
  EXPECT_EQ(tail.evals[0]["step"], 6);
  EXPECT_EQ(tail.evals[0]["val_loss"].get<double>(), all.evals[2]["val_loss"].get<double>());
}

// Evaluation keeps no activations for a backward: its peak stays below a training step's.
TEST(Validation, PeakIsAtMostTheTrainingPeak) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  Trainer t(lt::tiny_config(with_validation(data, 2, kNoSave), {"training.eval_interval=1", "training.eval_iters=2"}),
            lt::quiet_options(dir.file("run")));
  t.train();
  const Lines l = lines_of(dir.file("run"));
  ASSERT_EQ(l.evals.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_LE(l.evals[i]["eval_mem_peak_bytes"].get<int64_t>(), l.steps[i]["mem_peak_bytes"].get<int64_t>());
}

TEST(Validation, TheWholeSplitWithEvalItersMinusOne) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  Trainer t(lt::tiny_config(with_validation(data, 1, kNoSave), {"training.eval_interval=1", "training.eval_iters=-1"}),
            lt::quiet_options(dir.file("run")));
  t.train();
  const Lines l = lines_of(dir.file("run"));
  ASSERT_EQ(l.evals.size(), 1u);
  // 16 of the 64 documents of 130 tokens validate: 16·130 / 32 sequences of 32 tokens (+1), read
  // in whole global batches of 4.
  const int64_t sequences = (16 * 130 - 1) / 32;
  EXPECT_EQ(l.evals[0]["val_tokens"].get<int64_t>(), sequences / 4 * 4 * 32);
}

// A validation without validation data, or with a bad count, stops at start-up naming the field
// (check-config runs the same rules).
TEST(Validation, NeedsAValidationSplitAndSaneCounts) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  auto error_of = [&](const std::string& yaml, const std::vector<std::string>& sets) {
    try {
      lt::tiny_config(yaml, sets);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string no_share = error_of(lt::tiny_config_yaml(data, 2, 2, 4),
                                        {"training.eval_interval=2", "train_dataset.dataloader.sizes=[400]"});
  EXPECT_NE(no_share.find("training.eval_interval: is 2 but there is no validation data to evaluate"),
            std::string::npos) << no_share;
  EXPECT_NE(no_share.find("gives the valid split no share"), std::string::npos) << no_share;
  const std::string zero = error_of(with_validation(data, 2, kNoSave),
                                    {"training.eval_interval=2", "train_dataset.dataloader.sizes=[400, 0]"});
  EXPECT_NE(zero.find("asks for 0 valid samples"), std::string::npos) << zero;
  EXPECT_NE(error_of(with_validation(data, 2, kNoSave), {"training.eval_interval=-1"})
                .find("training.eval_interval: must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of(with_validation(data, 2, kNoSave), {"training.eval_iters=0"})
                .find("training.eval_iters: must be a positive number of global batches, or -1"),
            std::string::npos);
  EXPECT_EQ(error_of(with_validation(data, 2, kNoSave), {"training.eval_interval=2"}), "");
}
