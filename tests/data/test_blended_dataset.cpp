// Blending (Megatron's BlendedDataset), blend lists, split strings and sizes (its
// BlendedMegatronDatasetBuilder), and the dataset builder that combines them.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "loom/core/error.h"
#include "loom/data/blend_split.h"
#include "loom/data/blended_dataset.h"
#include "loom/data/dataset_builder.h"
#include "loom/data/gpt_dataset.h"

using namespace loom::data;
using namespace loom::data::testing_util;
using loom::testing::TempDir;

// build_blending_indices by hand.
TEST(Blending, GoldenExamples) {
  std::vector<int16_t> di;
  std::vector<int64_t> si;
  build_blending_indices(std::vector<double>{0.3, 0.7}, 10, di, si);
  EXPECT_EQ(di, (std::vector<int16_t>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(si, (std::vector<int64_t>{0, 0, 1, 2, 1, 3, 4, 2, 5, 6}));
  build_blending_indices(std::vector<double>{0.5, 0.25, 0.25}, 8, di, si);
  EXPECT_EQ(di, (std::vector<int16_t>{0, 1, 2, 0, 0, 1, 2, 0}));
  EXPECT_EQ(si, (std::vector<int64_t>{0, 0, 0, 1, 2, 1, 1, 3}));
}

// build_exhaustive_blending_indices: every dataset contributes exactly its size, in proportion.
TEST(Blending, ExhaustiveDrawsEverySampleOnce) {
  std::vector<int16_t> di;
  std::vector<int64_t> si;
  build_exhaustive_blending_indices(std::vector<int64_t>{3, 1, 0, 2}, di, si);
  ASSERT_EQ(di.size(), 6u);
  EXPECT_EQ(di, (std::vector<int16_t>{0, 3, 1, 0, 3, 0}));
  EXPECT_EQ(si, (std::vector<int64_t>{0, 0, 0, 1, 1, 2}));
}

// Megatron's get_blend_from_list.
TEST(BlendSplit, BlendFromList) {
  Blend a = blend_from_list({"/data/a_text_document"});
  EXPECT_EQ(a.prefixes, (std::vector<std::string>{"/data/a_text_document"}));
  EXPECT_FALSE(a.weights.has_value());
  Blend b = blend_from_list({"0.3", " /data/a ", "0.7", "/data/b"});
  EXPECT_EQ(b.prefixes, (std::vector<std::string>{"/data/a", "/data/b"}));
  EXPECT_EQ(*b.weights, (std::vector<double>{0.3, 0.7}));
  Blend c = blend_from_list({"/data/a", "/data/b"});  // even but not numbers: all prefixes
  EXPECT_EQ(c.prefixes.size(), 2u);
  EXPECT_FALSE(c.weights.has_value());
  Blend d = blend_from_list({"1", "/data/a", "x", "/data/b"});  // any non-number: all prefixes
  EXPECT_EQ(d.prefixes.size(), 4u);
  EXPECT_FALSE(d.weights.has_value());
  try {
    blend_from_list({"0", "/data/a"});
    FAIL();
  } catch (const loom::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train_dataset.dataloader.config.data_path[0]: blend weight 0 must be positive"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(normalize_weights({1, 3}), (std::vector<double>{0.25, 0.75}));
}

// Megatron's split "949,50,1" and its book-ends.
TEST(BlendSplit, SplitStringAndMatrix) {
  const auto s = parse_split("949,50,1");
  EXPECT_DOUBLE_EQ(s[0], 0.949);
  EXPECT_DOUBLE_EQ(s[1], 0.05);
  EXPECT_DOUBLE_EQ(s[2], 0.001);
  const auto m = split_matrix(s);
  ASSERT_TRUE(m[0] && m[1] && m[2]);
  EXPECT_EQ(m[0]->first, 0.0);
  EXPECT_DOUBLE_EQ(m[0]->second, 0.949);
  EXPECT_DOUBLE_EQ(m[1]->second, 0.999);
  EXPECT_DOUBLE_EQ(m[2]->second, 1.0);
  EXPECT_EQ(split_range(*m[0], 1000), (std::pair<int64_t, int64_t>{0, 949}));
  EXPECT_EQ(split_range(*m[1], 1000), (std::pair<int64_t, int64_t>{949, 999}));
  EXPECT_EQ(split_range(*m[2], 1000), (std::pair<int64_t, int64_t>{999, 1000}));
  const auto one = split_matrix(parse_split("1, 0, 0"));
  EXPECT_TRUE(one[0].has_value());
  EXPECT_FALSE(one[1].has_value());
  EXPECT_FALSE(one[2].has_value());
  EXPECT_EQ(parse_split("98,2")[2], 0.0);
  // Python's round() is half-to-even: 0.5 * 5 = 2.5 -> 2.
  EXPECT_EQ(split_range({0.0, 0.5}, 5), (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_THROW(parse_split("1,1,1,1"), loom::ConfigError);
  EXPECT_THROW(parse_split("0,0"), loom::ConfigError);
}

// Megatron's sizes: ceil(target * w * 1.005) per dataset (MindFormers' surplus).
TEST(BlendSplit, SizesPerDatasetCarryTheSurplus) {
  const auto rows = sizes_per_dataset({0.3, 0.7}, {1000, 10, std::nullopt});
  EXPECT_EQ(*rows[0][0], 302);  // ceil(301.5)
  EXPECT_EQ(*rows[1][0], 704);  // ceil(703.5)
  EXPECT_EQ(*rows[0][1], 4);    // ceil(3.015)
  EXPECT_EQ(*rows[1][1], 8);    // ceil(7.035)
  EXPECT_FALSE(rows[0][2].has_value());
}

namespace {

MegatronDataConfig config_for(std::vector<std::string> data_path, std::string split, int64_t S) {
  MegatronDataConfig c;
  c.seq_length = S;
  c.data_path = std::move(data_path);
  c.split = std::move(split);
  return c;
}

}  // namespace

// A weighted blend of two datasets: mid-level sizes with surplus, blended size = their sum, and
// the samples come from the dataset the blending index names.
TEST(DatasetBuilder, WeightedBlendOfTwoDatasets) {
  TempDir dir;
  write_dataset(dir.file("a"), TokenDType::u16, numbered_documents(std::vector<int64_t>(40, 10)));
  Documents b_docs;
  for (int d = 0; d < 40; ++d) b_docs.push_back({std::vector<int64_t>(10, 60000 + d)});
  write_dataset(dir.file("b"), TokenDType::u16, b_docs);
  MegatronDataConfig c = config_for({"0.25", dir.file("a"), "0.75", dir.file("b")}, "1,0,0", 8);
  c.path_to_cache = dir.file("cache");
  auto ds = build_megatron_dataset(c, {100, std::nullopt, std::nullopt});
  auto blended = std::dynamic_pointer_cast<const BlendedDataset>(ds);
  ASSERT_NE(blended, nullptr);
  // ceil(100*0.25*1.005) + ceil(100*0.75*1.005) = 26 + 76
  EXPECT_EQ(blended->size(), 26 + 76);
  EXPECT_GE(blended->datasets()[0]->size(), 26);
  EXPECT_GE(blended->datasets()[1]->size(), 76);
  std::vector<int64_t> text(9);
  int64_t from_b = 0;
  for (int64_t i = 0; i < blended->size(); ++i) {
    blended->read_sample(i, text);
    const bool is_b = text[0] >= 60000;
    EXPECT_EQ(is_b, blended->dataset_index()[static_cast<size_t>(i)] == 1) << i;
    from_b += is_b;
  }
  EXPECT_EQ(from_b, 76);
  // The blend is cached when path_to_cache is set, and reloads identically.
  auto again = std::dynamic_pointer_cast<const BlendedDataset>(build_megatron_dataset(c, {100, std::nullopt, std::nullopt}));
  EXPECT_EQ(again->dataset_index(), blended->dataset_index());
  EXPECT_EQ(again->dataset_sample_index(), blended->dataset_sample_index());
}

// A single prefix without weights is a plain GPTDataset; "949,50,1" keeps 949/1000 sequences.
TEST(DatasetBuilder, SinglePrefixUsesTheSplitShare) {
  TempDir dir;
  write_dataset(dir.file("a"), TokenDType::i32, numbered_documents(std::vector<int64_t>(1000, 5)));
  MegatronDataConfig c = config_for({dir.file("a")}, "949,50,1", 4);
  c.path_to_cache = dir.file("cache");
  auto ds = std::dynamic_pointer_cast<const GptDataset>(build_megatron_dataset(c, {}));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->indices().document_index.size(), 949u);
  EXPECT_EQ(ds->size(), (949 * 5 - 1) / 4);
  auto valid = std::dynamic_pointer_cast<const GptDataset>(build_megatron_dataset(c, {}, Split::valid));
  EXPECT_EQ(valid->indices().document_index.size(), 50u);
  auto sized = std::dynamic_pointer_cast<const GptDataset>(build_megatron_dataset(c, {3000, 0, 0}));
  EXPECT_EQ(sized->indices().num_epochs, 3);  // 3000*4+1 tokens need 3 epochs of 4745
}

// Without weights, blending is exhaustive (weights = dataset lengths), capped by sizes.
TEST(DatasetBuilder, UnweightedBlendIsExhaustive) {
  TempDir dir;
  write_dataset(dir.file("a"), TokenDType::u16, numbered_documents(std::vector<int64_t>(10, 9)));
  write_dataset(dir.file("b"), TokenDType::u16, numbered_documents(std::vector<int64_t>(30, 9)));
  MegatronDataConfig c = config_for({dir.file("a"), dir.file("b")}, "1,0,0", 8);
  auto ds = std::dynamic_pointer_cast<const BlendedDataset>(build_megatron_dataset(c, {}));
  ASSERT_NE(ds, nullptr);
  const int64_t la = ds->datasets()[0]->size();
  const int64_t lb = ds->datasets()[1]->size();
  EXPECT_EQ(ds->size(), la + lb);
  EXPECT_EQ(std::count(ds->dataset_index().begin(), ds->dataset_index().end(), 0), la);
  auto capped = build_megatron_dataset(c, {5, std::nullopt, std::nullopt});
  EXPECT_EQ(capped->size(), 5);
}

TEST(DatasetBuilder, ConfigurationErrorsNameTheField) {
  TempDir dir;
  write_dataset(dir.file("a"), TokenDType::u16, numbered_documents(std::vector<int64_t>(10, 9)));
  auto message = [&](const MegatronDataConfig& c, std::array<std::optional<int64_t>, 3> sizes) {
    try {
      build_megatron_dataset(c, sizes);
    } catch (const loom::Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(message(config_for({"0.5", dir.file("a"), "0.5", dir.file("a")}, "1,0,0", 8), {})
                .find("train_dataset.dataloader.sizes[0] is required for a weighted blend"),
            std::string::npos);
  EXPECT_NE(message(config_for({dir.file("a")}, "0,1,0", 8), {}).find("gives the train split no data"),
            std::string::npos);
  EXPECT_NE(message(config_for({dir.file("nope")}, "1,0,0", 8), {}).find(dir.file("nope") + ".idx does not exist"),
            std::string::npos);
}

// Per-split paths (blend_per_split): the train split uses its datasets whole.
TEST(DatasetBuilder, TrainDataPathUsesWholeDatasets) {
  TempDir dir;
  write_dataset(dir.file("a"), TokenDType::u16, numbered_documents(std::vector<int64_t>(10, 9)));
  MegatronDataConfig c;
  c.seq_length = 8;
  c.train_data_path = {dir.file("a")};
  auto ds = std::dynamic_pointer_cast<const GptDataset>(build_megatron_dataset(c, {}));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->indices().document_index.size(), 10u);
}
