// Sharded checkpoint pieces that need no second process: the reference's shard ids, one-process
// save plans, and the load errors (MindFormers' checkpoint layout). Resharding across ranks is
// tested under mpirun in tests/dist/mpi/test_checkpoint_mpi.cpp.
#include <gtest/gtest.h>

#include <fstream>

#include "loom/dist/sharded_checkpoint.h"
#include "loom/models/safetensors.h"
#include "testing/temp_dir.h"

namespace loom::dist {
namespace {

std::string names(bool optimizer, int rank, int world) {
  return std::string("checkpoint-") + (optimizer ? "opt" : "model") + "-" + std::to_string(rank) + "-" +
         std::to_string(world) + ".safetensors";
}

TEST(ShardedCheckpoint, ShardIdsArePythonTupleReprs) {
  // The reference keys storage_data by str((name, global_offset)).
  EXPECT_EQ(shard_id("w", {0, 16}), "('w', (0, 16))");
  EXPECT_EQ(shard_id("b", {8}), "('b', (8,))");
  EXPECT_EQ(shard_id("global_step", {}), "('global_step', ())");
}

TEST(ShardedCheckpoint, OneProcessSaveWritesEverythingAndDescribesIt) {
  auto world = make_single_rank_group("world");
  std::map<std::string, Tensor> model{{"a.weight", Tensor::ones({3, 2})}};
  std::map<std::string, Tensor> opt{{"adam_m.a.weight", Tensor::zeros({3, 2})},
                                    {"global_step", Tensor::scalar(4, DType::i64)}};
  nn::Module no_parameters("Empty");
  auto entries = checkpoint_entries(no_parameters, model, opt);
  ShardedSave s = prepare_sharded_save(*world, entries, names, /*remove_redundancy=*/true);
  EXPECT_EQ(s.model.size(), 1u);
  EXPECT_EQ(s.optimizer.size(), 2u);
  const auto& m = s.metadata["state_dict_metadata"];
  EXPECT_EQ(m["a.weight"]["global_shape"], nlohmann::ordered_json({3, 2}));
  EXPECT_EQ(m["a.weight"]["chunk"][0]["global_offset"], nlohmann::ordered_json({0, 0}));
  EXPECT_EQ(m["global_step"]["properties"]["dtype"], "Int64");
  EXPECT_EQ(s.metadata["storage_data"]["('adam_m.a.weight', (0, 0))"][0]["file_name"], "checkpoint-opt-0-1.safetensors");
}

TEST(ShardedCheckpoint, LoadWithoutMetadataTakesWholeTensorsAndNamesProblems) {
  testing::TempDir dir;
  models::write_safetensors(dir.file("checkpoint-model-0000000-0000001.safetensors"),
                            std::map<std::string, Tensor>{{"a.weight", Tensor::full({4, 2}, 2.0)}});
  auto world = make_single_rank_group("world");
  // Rows [2, 4) of the saved [4, 2] tensor.
  std::vector<ShardedTensorEntry> entries{{"a.weight", Tensor::zeros({2, 2}), {4, 2}, {{{0, 0}, {2, 0}, {2, 2}}}, false}};
  load_resharded(dir.path().string(), entries, false);
  EXPECT_EQ(entries[0].local.at({1, 1}), 2.0);

  std::vector<ShardedTensorEntry> bad{whole_entry("a.weight", Tensor::zeros({3, 2})), whole_entry("b.weight", Tensor::zeros({1}))};
  try {
    load_resharded(dir.path().string(), bad, false);
    FAIL();
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("shape mismatch: a.weight is [4, 2] in the checkpoint but [3, 2] in the model"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing: b.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir.path().string()), std::string::npos) << msg;
  }
}

TEST(ShardedCheckpoint, MissingFileNamedByMetadataIsAnError) {
  testing::TempDir dir;
  auto world = make_single_rank_group("world");
  std::map<std::string, Tensor> model{{"a.weight", Tensor::ones({3, 2})}};
  nn::Module no_parameters("Empty");
  ShardedSave s = prepare_sharded_save(*world, checkpoint_entries(no_parameters, model, {}), names, false);
  std::ofstream(dir.file("metadata.json")) << s.metadata.dump();
  std::vector<ShardedTensorEntry> entries{whole_entry("a.weight", Tensor::zeros({3, 2}))};
  try {
    load_resharded(dir.path().string(), entries, false);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint-model-0-1.safetensors"), std::string::npos) << e.what();
  }
}

TEST(ShardedCheckpoint, ALocalTensorOfSeveralPiecesIsStoredWholeAndLoadsByPiece) {
  // A block-sharded fused tensor: this rank holds gate rows 2..3 and up rows 6..7 of an [8, 3]
  // fc1. Its file stores the [4, 3] local tensor once; metadata.json has one chunk per piece,
  // each saying where it sits in the stored tensor.
  testing::TempDir dir;
  auto world = make_single_rank_group("world");
  Tensor local = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {4, 3});
  ShardedTensorEntry fused{"fc1", local, {8, 3}, {{{0, 0}, {2, 0}, {2, 3}}, {{2, 0}, {6, 0}, {2, 3}}}, false};
  ShardedSave s = prepare_sharded_save(*world, {fused}, names, false);
  ASSERT_EQ(s.model.size(), 1u);
  EXPECT_EQ(s.model.at("fc1").shape(), (Shape{4, 3}));
  const auto& chunks = s.metadata["state_dict_metadata"]["fc1"]["chunk"];
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[1]["global_offset"], nlohmann::ordered_json({6, 0}));
  EXPECT_EQ(s.metadata["storage_data"]["('fc1', (6, 0))"][0]["local_offset"], nlohmann::ordered_json({2, 0}));
  models::write_safetensors(dir.file("checkpoint-model-0-1.safetensors"), s.model);
  std::ofstream(dir.file("metadata.json")) << s.metadata.dump();

  // Another layout: rows 6..7 alone, then rows 3..6 (which only half the checkpoint covers).
  std::vector<ShardedTensorEntry> up{{"fc1", Tensor::zeros({2, 3}), {8, 3}, {{{0, 0}, {6, 0}, {2, 3}}}, false}};
  load_resharded(dir.path().string(), up, false);
  EXPECT_EQ(up[0].local.to_float_vector(), (std::vector<float>{6, 7, 8, 9, 10, 11}));
  std::vector<ShardedTensorEntry> middle{{"fc1", Tensor::zeros({4, 3}), {8, 3}, {{{0, 0}, {3, 0}, {4, 3}}}, false}};
  try {
    load_resharded(dir.path().string(), middle, false);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("incomplete: fc1 (6 of 12 elements"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom::dist
