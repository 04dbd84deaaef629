// Checkpoint layout, atomic "latest", rotation, async == sync, load-path resolution and errors.
// (MindFormers' checkpoint layout; docs/training.md "Checkpoints and resuming".)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loom/models/safetensors.h"
#include "loom/train/checkpoint.h"
#include "testing/temp_dir.h"

using namespace loom;
using namespace loom::train;
namespace fs = std::filesystem;

namespace {

CheckpointContents contents(int64_t iteration, float fill) {
  CheckpointContents c;
  c.iteration = iteration;
  c.step_num = 100;
  c.global_batch_size = 8;
  c.consumed_samples = iteration * 8;
  c.model["decoder.layers.0.mlp.linear_fc1.weight"] = Tensor::full({4, 3}, fill);
  c.model["embedding.word_embeddings.weight"] = Tensor::full({5, 3}, fill, DType::bf16);
  c.optimizer["adam_m.decoder.layers.0.mlp.linear_fc1.weight"] = Tensor::full({4, 3}, fill * 2);
  c.optimizer["global_step"] = Tensor::full({}, static_cast<double>(iteration), DType::i64);
  c.extra = {{"data", {{"consumed_samples", iteration * 8}}}};
  return c;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(Checkpoint, ReferenceLayoutAndLatestWrittenLast) {
  loom::testing::TempDir dir;
  CheckpointOptions o;
  o.save_path = dir.file("ckpt");
  CheckpointManager m(o, 0, 1);
  m.save(contents(100, 1.5f));
  const fs::path it = fs::path(o.save_path) / "iteration_00000100";
  EXPECT_TRUE(fs::exists(it / "checkpoint-model-0000000-0000001.safetensors"));
  EXPECT_TRUE(fs::exists(it / "checkpoint-opt-0000000-0000001.safetensors"));
  EXPECT_TRUE(fs::exists(it / "common.json"));
  EXPECT_FALSE(fs::exists(it.string() + ".partial"));
  EXPECT_EQ(slurp(fs::path(o.save_path) / "latest_checkpointed_iteration.txt"), "100");
  auto common = nlohmann::json::parse(slurp(it / "common.json"));
  EXPECT_EQ(common["global_step"], 100);
  EXPECT_EQ(common["step_num"], 100);
  EXPECT_EQ(common["consumed_samples"], 800);
  EXPECT_EQ(common["global_batch_size"], 8);
  EXPECT_EQ(common["loom"]["data"]["consumed_samples"], 800);
  // prefix None: no prefix in the file names
  CheckpointOptions np = o;
  np.prefix = std::nullopt;
  np.save_path = dir.file("noprefix");
  CheckpointManager m2(np, 0, 1);
  m2.save(contents(1, 1.0f));
  EXPECT_TRUE(fs::exists(fs::path(np.save_path) / "iteration_00000001" / "model-0000000-0000001.safetensors"));
}

TEST(Checkpoint, LoadRoundTripsEveryTensorBitForBit) {
  loom::testing::TempDir dir;
  CheckpointOptions o;
  o.save_path = dir.file("ckpt");
  CheckpointManager m(o, 0, 1);
  m.save(contents(7, 0.3f));
  runtime::LoadedCheckpoint l = m.load(o.save_path, true);
  EXPECT_EQ(l.global_step(), 7);
  EXPECT_EQ(l.consumed_samples(), 56);
  EXPECT_EQ(l.model.at("embedding.word_embeddings.weight").dtype(), DType::bf16);
  EXPECT_EQ(l.model.at("decoder.layers.0.mlp.linear_fc1.weight").to_float_vector(), std::vector<float>(12, 0.3f));
  EXPECT_EQ(l.optimizer.at("global_step").item(), 7);
  EXPECT_EQ(l.extra["data"]["consumed_samples"], 56);
  // an iteration folder works as load_path too
  EXPECT_EQ(m.load(o.save_path + "/iteration_00000007", false).global_step(), 7);
}

TEST(Checkpoint, RotationKeepsSaveMaxOfThisRun) {
  loom::testing::TempDir dir;
  CheckpointOptions o;
  o.save_path = dir.file("ckpt");
  o.save_max = 2;
  CheckpointManager m(o, 0, 1);
  for (int64_t i : {1, 2, 3, 4}) m.save(contents(i, 1.0f));
  EXPECT_FALSE(fs::exists(fs::path(o.save_path) / "iteration_00000001"));
  EXPECT_FALSE(fs::exists(fs::path(o.save_path) / "iteration_00000002"));
  EXPECT_TRUE(fs::exists(fs::path(o.save_path) / "iteration_00000003"));
  EXPECT_TRUE(fs::exists(fs::path(o.save_path) / "iteration_00000004"));
}

TEST(Checkpoint, AsyncSaveWritesTheSameFilesAsSyncAndSnapshotsTheState) {
  loom::testing::TempDir dir;
  CheckpointOptions sync_o, async_o;
  sync_o.save_path = dir.file("sync");
  async_o.save_path = dir.file("async");
  async_o.async_save = true;
  CheckpointManager s(sync_o, 0, 1), a(async_o, 0, 1);
  CheckpointContents c = contents(5, 2.0f);
  Tensor live = c.model["decoder.layers.0.mlp.linear_fc1.weight"];
  s.save(c);
  a.save(c);
  live.fill_(-1.0);  // training continues and changes the weights while the writer runs
  a.wait();
  for (const char* f : {"checkpoint-model-0000000-0000001.safetensors", "checkpoint-opt-0000000-0000001.safetensors"})
    EXPECT_EQ(slurp(fs::path(sync_o.save_path) / "iteration_00000005" / f),
              slurp(fs::path(async_o.save_path) / "iteration_00000005" / f))
        << f;
}

TEST(Checkpoint, KilledWhileSavingLeavesLatestLoadable) {
  loom::testing::TempDir dir;
  CheckpointOptions o;
  o.save_path = dir.file("ckpt");
  CheckpointManager m(o, 0, 1);
  m.save(contents(10, 1.0f));
  // A crash mid-save leaves a partial folder behind; latest still names iteration 10.
  fs::create_directories(fs::path(o.save_path) / "iteration_00000020.partial");
  std::ofstream(fs::path(o.save_path) / "iteration_00000020.partial" / "checkpoint-model-0000000-0000001.safetensors") << "trunc";
  EXPECT_EQ(m.load(o.save_path, true).global_step(), 10);
  // A crash between moving iteration 10 aside and moving its replacement in: the copy is used.
  fs::rename(fs::path(o.save_path) / "iteration_00000010", fs::path(o.save_path) / "iteration_00000010.replaced");
  EXPECT_EQ(m.load(o.save_path, true).global_step(), 10);
}

TEST(Checkpoint, ClearErrorsForMissingPartialAndCorruptCheckpoints) {
  loom::testing::TempDir dir;
  CheckpointOptions o;
  o.save_path = dir.file("ckpt");
  CheckpointManager m(o, 0, 1);
  auto expect_error = [&](const std::string& path, bool optim, const std::string& text) {
    try {
      m.load(path, optim);
      ADD_FAILURE() << "expected an error containing: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_error(dir.file("nope"), true, "does not exist");
  fs::create_directories(dir.file("empty"));
  expect_error(dir.file("empty"), true, "holds no checkpoint");
  // no_save_optim checkpoint loaded with optimizer state
  CheckpointOptions weights_only = o;
  weights_only.no_save_optim = true;
  weights_only.save_path = dir.file("weights");
  CheckpointManager w(weights_only, 0, 1);
  w.save(contents(3, 1.0f));
  expect_error(weights_only.save_path, true, "no_load_optim: True");
  // truncated model file
  m.save(contents(4, 1.0f));
  const fs::path model = fs::path(o.save_path) / "iteration_00000004" / "checkpoint-model-0000000-0000001.safetensors";
  fs::resize_file(model, fs::file_size(model) - 10);
  expect_error(o.save_path, true, model.string());
  // latest naming a missing iteration
  std::ofstream(fs::path(o.save_path) / "latest_checkpointed_iteration.txt", std::ios::trunc) << "99";
  expect_error(o.save_path, true, "names iteration 99");
  std::ofstream(fs::path(o.save_path) / "latest_checkpointed_iteration.txt", std::ios::trunc) << "x";
  expect_error(o.save_path, true, "should hold an iteration number");
  // saved by another world size
  CheckpointManager other(o, 0, 2);
  std::ofstream(fs::path(o.save_path) / "latest_checkpointed_iteration.txt", std::ios::trunc) << "4";
  fs::remove(model);
  expect_error(o.save_path, false, "has no model file for rank 0 of 1");
}

TEST(Checkpoint, HfFolderNeedsNoLoadOptim) {
  loom::testing::TempDir dir;
  fs::create_directories(dir.file("hf"));
  models::write_safetensors(dir.file("hf/model.safetensors"), std::map<std::string, Tensor>{{"lm_head.weight", Tensor::zeros({2, 2})}});
  CheckpointOptions o;
  CheckpointManager m(o, 0, 1);
  try {
    m.load(dir.file("hf"), true);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("set checkpoint.no_load_optim: True"), std::string::npos) << e.what();
  }
  auto l = m.load(dir.file("hf"), false, [](const std::string&) { return std::map<std::string, Tensor>{{"x", Tensor::ones({1})}}; });
  EXPECT_TRUE(l.is_hf);
  EXPECT_EQ(l.model.count("x"), 1u);
}
