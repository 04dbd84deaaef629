// `loom eval` (loom/eval/eval_command.h): the loss of a checkpoint equals the validation the
// training run logged at that step, the same weights exported to a Hugging Face folder give the
// same loss, multiple-choice files run on a checkpoint, and bad input ends in an error naming the
// flag or file.
#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "../train/trainer_fixture.h"
#include "loom/dist/process_group.h"
#include "loom/eval/eval_command.h"
#include "loom/models/convert.h"

namespace loom::eval {
namespace {

namespace lt = loom::testing;
using Json = nlohmann::json;

// The tiny config with a validation share, written to a file.
std::string write_config(const lt::TempDir& dir, const std::string& data, const std::string& extra) {
  std::string yaml = lt::tiny_config_yaml(data, 4, 2, 4, extra);
  yaml.replace(yaml.find("split: '1,0,0'"), 14, "split: '3,1,0'");
  yaml.replace(yaml.find("sizes: [400, 0, 0]"), 18, "sizes: [400]");
  const std::string path = dir.file("c.yaml");
  lt::write_file(path, yaml);
  return path;
}

Json run_json(EvalCommandOptions o) {
  o.json = true;
  std::ostringstream out;
  run_eval(o, std::shared_ptr<dist::ProcessGroup>(dist::make_single_rank_group("world")), out);
  return Json::parse(out.str());
}

TEST(EvalCommand, ACheckpointGivesTheLossItsRunValidatedAndSoDoesItsHfExport) {
  lt::TempDir dir;
  const std::string data = lt::write_pattern_dataset(dir);
  const std::string config = write_config(dir, data, "checkpoint:\n  save_path: '" + dir.file("ck") + "'\n");
  {
    train::Trainer t(lt::tiny_config(lt::read_file(config), {"training.eval_interval=4", "training.eval_iters=3"}),
                     lt::quiet_options(dir.file("run")));
    t.train();
  }
  double logged = 0;
  std::ifstream in(dir.file("run/metrics.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (Json j = Json::parse(line); j.contains("eval")) logged = j["val_loss"].get<double>();

  EvalCommandOptions o;
  o.config_path = config;
  o.load_path = dir.file("ck");
  o.iters = 3;
  const Json got = run_json(o);
  EXPECT_EQ(got["split"], "valid");
  EXPECT_EQ(got["global_batches"], 3);
  EXPECT_EQ(got["tokens"], 3 * 4 * 32);
  EXPECT_EQ(got["loss"].get<double>(), logged);
  EXPECT_NEAR(got["perplexity"].get<double>(), std::exp(logged), 1e-9 * std::exp(logged));
  EXPECT_NE(got["load"].get<std::string>().find("iteration_00000004"), std::string::npos);

  models::convert_to_hf(dir.file("ck"), dir.file("hf"));
  o.load_path = dir.file("hf");
  EXPECT_NEAR(run_json(o)["loss"].get<double>(), logged, 1e-9 * logged);
}

TEST(EvalCommand, MultipleChoiceRunsOnACheckpoint) {
  lt::TempDir dir;
  const std::string data = lt::write_pattern_dataset(dir);
  const std::string config = write_config(dir, data, "checkpoint:\n  save_path: '" + dir.file("ck") + "'\n");
  {
    train::Trainer t(lt::tiny_config(lt::read_file(config)), lt::quiet_options(dir.file("run")));
    t.train();
  }
  lt::write_file(dir.file("q.jsonl"), "{\"context_ids\": [3, 4, 5], \"choices_ids\": [[6], [40, 41]], \"label\": 0}\n"
                                      "{\"context_ids\": [10], \"choices_ids\": [[11], [12], [13]], \"label\": 2}\n");
  EvalCommandOptions o;
  o.config_path = config;
  o.load_path = dir.file("ck");
  o.choices_path = dir.file("q.jsonl");
  const Json got = run_json(o);
  EXPECT_EQ(got["examples"], 2);
  EXPECT_EQ(got["requests"], 5);
  EXPECT_EQ(got["tokens"], 3 + 4 + 1 + 1 + 1);
  EXPECT_GE(got["acc"].get<double>(), 0.0);
  EXPECT_LE(got["acc"].get<double>(), 1.0);
}

TEST(EvalCommand, BadInputNamesTheFlagOrFile) {
  auto parse_error = [](const std::vector<std::string>& args) {
    try {
      parse_eval_args(args);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(parse_error({"--config", "c.yaml"}).find("--load PATH is required"), std::string::npos);
  EXPECT_NE(parse_error({"--config", "c.yaml", "--load", "x", "--split", "dev"}).find("--split 'dev': use valid, test "
                                                                                       "or train"),
            std::string::npos);
  EXPECT_NE(parse_error({"--config", "c.yaml", "--load", "x", "--iters", "0"}).find("--iters '0'"), std::string::npos);
  EXPECT_NE(parse_error({"--config", "c.yaml", "--load", "x", "--bogus"}).find("unknown option '--bogus'"),
            std::string::npos);

  lt::TempDir dir;
  const std::string data = lt::write_pattern_dataset(dir);
  const std::string config = write_config(dir, data, "");
  EvalCommandOptions o;
  o.config_path = config;
  o.load_path = dir.file("nowhere");
  try {
    run_json(o);
    FAIL() << "a missing --load";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("--load '" + dir.file("nowhere") + "' does not exist"), std::string::npos)
        << e.what();
  }
  o.load_path = dir.path().string();  // a folder without a checkpoint
  try {
    run_json(o);
    FAIL() << "a folder that is neither a checkpoint nor an HF folder";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no checkpoint"), std::string::npos) << e.what();
  }
  {
    train::Trainer t(lt::tiny_config(lt::read_file(config), {"training.steps=1",
                                                             "checkpoint.save_path=" + dir.file("ck")}),
                     lt::quiet_options(dir.file("run")));
    t.train();
  }
  o.load_path = dir.file("ck");
  o.split = "test";
  try {
    run_json(o);
    FAIL() << "a split without samples";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--split test: train_dataset.dataloader.config.split \"3,1,0\" gives the "
                                         "test split no share"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom::eval
