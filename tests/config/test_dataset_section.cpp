// train_dataset as the data loader takes it (config/dataset_section.cpp): the spec's fields and
// the MindFormers BlendedMegatronDatasetDataLoader keys, with their defaults; each problem once,
// at its line; what a loader still needs (a gap) keeps `loom train` from running, not the file
// from being valid.
#include <gtest/gtest.h>

#include "config_test_util.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

namespace {

const std::string kSection =
    "train_dataset:\n"
    "  dataloader:\n"
    "    type: BlendedMegatronDatasetDataLoader\n"
    "    datasets_type: GPTDataset\n"
    "    sizes: [40, 0, 0]\n"
    "    column_names: [input_ids, labels, loss_mask, position_ids]\n"
    "    shuffle: false\n"
    "    config:\n"
    "      seq_length: 8\n"
    "      split: '1, 0, 0'\n"
    "      eod: 0\n"
    "      pad: -1\n"
    "      create_attention_mask: false\n"
    "      data_path: ['1', /data/x]\n"
    "  drop_remainder: true\n"
    "  num_parallel_workers: 2\n"
    // The model leaves the sequence length to the dataset (where both give one, they must agree).
    "model:\n  model_type: llama\n  num_hidden_layers: 8\n  num_attention_heads: 8\n";

// kSection with `line` (e.g. "      seq_length: 8\n") replaced by `with`.
std::string edited(const std::string& line, const std::string& with) {
  std::string s = kSection;
  const auto at = s.find(line);
  EXPECT_NE(at, std::string::npos) << line;
  return s.replace(at, line.size(), with);
}

data::LoaderOptions loader_of(const std::string& sections) { return load(sections, 1).resolved->loader_options(); }

// Everything that keeps `sections` from training: errors, else the gaps of the resolution.
std::string training_problems(const std::string& sections) {
  try {
    load(sections, 1).resolved->loader_options();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DatasetSection, ParsesTheTrainDatasetSection) {
  const data::LoaderOptions o = loader_of(kSection);
  EXPECT_EQ(o.type, "BlendedMegatronDatasetDataLoader");
  EXPECT_EQ(*o.sizes[0], 40);
  EXPECT_EQ(*o.sizes[1], 0);
  EXPECT_EQ(o.column_names.size(), 4u);
  EXPECT_FALSE(o.shuffle);
  EXPECT_TRUE(o.drop_remainder);
  EXPECT_EQ(o.num_parallel_workers, 2);
  EXPECT_EQ(o.prefetch_size, 1);
  EXPECT_EQ(o.config.seed, 1234);
  EXPECT_EQ(o.config.seq_length, 8);
  EXPECT_EQ(o.config.data_path, (std::vector<std::string>{"1", "/data/x"}));
  EXPECT_EQ(*o.config.split, "1, 0, 0");
  EXPECT_EQ(o.config.eod, 0);
  EXPECT_EQ(o.config.pad, -1);
  EXPECT_FALSE(o.config.create_attention_mask);
  EXPECT_FALSE(o.config.create_compressed_eod_mask);
  EXPECT_EQ(o.config.eod_pad_length, 128);
  EXPECT_TRUE(o.config.add_extra_token_to_sequence);
  EXPECT_FALSE(o.config.reset_position_ids);

  const data::LoaderOptions alias =
      loader_of(edited("      data_path: ['1', /data/x]\n",
                       "      compressed_eod_mask_length: 64\n      data_path: [0.3, /a, 0.7, /b]\n"));
  EXPECT_EQ(alias.config.eod_pad_length, 64);
  EXPECT_EQ(alias.config.data_path, (std::vector<std::string>{"0.3", "/a", "0.7", "/b"}));
}

// The typed fields of the section (shuffle, drop_remainder, workers, prefetch) and the loader's
// pass-through keys (sizes, config) meet in one set of options.
TEST(DatasetSection, TypedFieldsAndPassThroughKeysMeet) {
  std::string shuffled = edited("    shuffle: false\n", "    shuffle: true\n");
  shuffled.insert(shuffled.find("  num_parallel_workers"), "  prefetch_size: 2\n");
  const data::LoaderOptions o = loader_of(shuffled);
  EXPECT_TRUE(o.shuffle);
  EXPECT_EQ(o.prefetch_size, 2);
  EXPECT_EQ(*o.sizes[0], 40);
  EXPECT_EQ(o.config.seq_length, 8);
  const data::LoaderOptions p =
      loader_of(edited("  drop_remainder: true\n  num_parallel_workers: 2\n", "  drop_remainder: false\n  num_parallel_workers: 3\n"));
  EXPECT_FALSE(p.drop_remainder);
  EXPECT_EQ(p.num_parallel_workers, 3);
}

TEST(DatasetSection, ErrorsNameTheFieldAtItsLine) {
  EXPECT_NE(errors(edited("      seq_length: 8\n", "      seq_length: '4096'\n"))
                .find("test.yaml:9:19: train_dataset.dataloader.config.seq_length: expected an integer, got \"4096\" "
                      "(string)"),
            std::string::npos);
  EXPECT_NE(errors(edited("      eod: 0\n", "      eod: 0\n      reset_position_ids: 1\n"))
                .find("train_dataset.dataloader.config.reset_position_ids: expected True or False, got 1 (int)"),
            std::string::npos);
  EXPECT_NE(errors(edited("      split: '1, 0, 0'\n", "      split: '1,2,3,4'\n"))
                .find("train_dataset.dataloader.config.split: \"1,2,3,4\" gives 4 ratios"),
            std::string::npos);
  EXPECT_NE(errors(edited("[input_ids, labels, loss_mask, position_ids]", "[input_ids, tokens]"))
                .find("train_dataset.dataloader.column_names[1]: unknown column 'tokens'"),
            std::string::npos);
  EXPECT_NE(errors(edited("  num_parallel_workers: 2\n", "  num_parallel_workers: -1\n"))
                .find("train_dataset.num_parallel_workers: must be >= 1, got -1"),
            std::string::npos);
  EXPECT_NE(errors(edited("  num_parallel_workers: 2\n", "  num_parallel_workers: 300\n"))
                .find("train_dataset.num_parallel_workers: must be <= 256, got 300"),
            std::string::npos);
  EXPECT_NE(errors(edited("    sizes: [40, 0, 0]\n", "    sizes: [1.5]\n"))
                .find("train_dataset.dataloader.sizes[0]: expected an integer"),
            std::string::npos);
  EXPECT_NE(errors(edited("      eod: 0\n", "      eod: 0\n      eod_pad_length: 0\n"))
                .find("train_dataset.dataloader.config.eod_pad_length: must be at least 1"),
            std::string::npos);
}

// What a loader still needs is not an error of the file (check-config accepts it, with a note)
// but keeps a run from starting, each need at its line.
TEST(DatasetSection, WhatALoaderStillNeedsStopsOnlyTheRun) {
  const std::string no_path = edited("      data_path: ['1', /data/x]\n", "");
  EXPECT_EQ(errors(no_path, 1), "");
  EXPECT_NE(training_problems(no_path).find("test.yaml:9:7: train_dataset.dataloader.config.data_path is required"),
            std::string::npos)
      << training_problems(no_path);
  EXPECT_NE(training_problems(edited("      seq_length: 8\n", "")).find("train_dataset.dataloader.config.seq_length is required"),
            std::string::npos);
  const std::string other_type = edited("    type: BlendedMegatronDatasetDataLoader\n", "    type: HFDataLoader\n");
  EXPECT_EQ(errors(other_type, 1), "");
  EXPECT_NE(training_problems(other_type).find("test.yaml:3:11: train_dataset.dataloader.type: 'HFDataLoader' is not supported"),
            std::string::npos)
      << training_problems(other_type);
  EXPECT_EQ(training_problems(kSection), "");
}

// The loader's unknown keys are reported once, as a likely misspelling where there is one.
TEST(DatasetSection, UnknownKeysWarnOnce) {
  const std::string w = warnings(edited("    shuffle: false\n", "    shuffle: false\n    shufle: true\n") , 1);
  EXPECT_EQ(count(w, "shufle"), 1) << w;
  EXPECT_NE(w.find("train_dataset.dataloader.shufle: is passed to the data loader unchecked; did you mean 'shuffle'?"),
            std::string::npos);
  const std::string c = warnings(edited("      eod: 0\n", "      eod: 0\n      frobnicate: 1\n"), 1);
  EXPECT_NE(c.find("train_dataset.dataloader.config.frobnicate: is not a BlendedMegatronDatasetDataLoader option and "
                   "is ignored"),
            std::string::npos)
      << c;
}

// spec training_hyperparameters.md §3.3: training.seed unifies initialisation and data shuffling,
// so the per-epoch reshuffle (dataloader.shuffle) follows it unless dataloader.config.seed is
// written; the GPTDataset's own index shuffle keeps dataloader.config.seed (1234 by default).
TEST(DatasetSection, TrainingSeedDrivesTheShuffleUnlessTheDataSeedIsGiven) {
  const std::string shuffled = edited("    shuffle: false\n", "    shuffle: true\n");
  EXPECT_EQ(loader_of(shuffled).shuffle_seed, 42);  // training.seed's default
  const data::LoaderOptions seeded = loader_of(shuffled + "training:\n  seed: 9\n");
  EXPECT_EQ(seeded.shuffle_seed, 9);
  EXPECT_EQ(seeded.config.seed, 1234);
  const std::string own = edited("      seq_length: 8\n", "      seq_length: 8\n      seed: 5\n");
  const data::LoaderOptions explicit_seed = loader_of(own + "training:\n  seed: 9\n");
  EXPECT_EQ(explicit_seed.shuffle_seed, 5);
  EXPECT_EQ(explicit_seed.config.seed, 5);
}

// Without a loss_mask column the loss mask is input_ids != pad (MindFormers' CrossEntropyLoss), so
// eod_mask_loss has nothing to act on: one warning says so at the field.
TEST(DatasetSection, EodMaskLossWithoutALossMaskColumnWarns) {
  const std::string no_mask_column =
      edited("    column_names: [input_ids, labels, loss_mask, position_ids]\n", "    column_names: [input_ids, labels]\n");
  const std::string eod_masked = "      eod_mask_loss: true\n      seq_length: 8\n";
  const std::string w = warnings(edited("      seq_length: 8\n", eod_masked));
  EXPECT_EQ(w.find("column_names lists no loss_mask"), std::string::npos) << w;
  std::string both = no_mask_column;
  both.replace(both.find("      seq_length: 8\n"), 20, eod_masked);
  const std::string warned = warnings(both);
  EXPECT_EQ(count(warned, "train_dataset.dataloader.config.eod_mask_loss: is True but train_dataset.dataloader."
                          "column_names lists no loss_mask"),
            1)
      << warned;
}
