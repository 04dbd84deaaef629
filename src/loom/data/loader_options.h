// The train_dataset section as the loader sees it (spec/configuration.md "train_dataset", and the
// keys of MindFormers' BlendedMegatronDatasetDataLoader), typed. The configuration
// layer fills it and checks every field once, with the field's position in the file
// (config/dataset_section.cpp); the loader asserts on what it relies on.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/data/blend_split.h"

namespace loom::data {

// train_dataset.dataloader.config
struct MegatronDataConfig {
  int64_t seed = 1234;                       // numpy RandomState seed of the index shuffle
  int64_t seq_length = 0;                    // required
  std::vector<std::string> data_path;        // [prefix] or [w0, prefix0, w1, prefix1, ...]
  std::optional<std::string> split;          // "949,50,1"; required with data_path
  std::vector<std::string> train_data_path;  // blend_per_split alternative to data_path + split
  std::vector<std::string> valid_data_path;
  std::vector<std::string> test_data_path;
  std::string path_to_cache;                 // "" = `{prefix}/cache/GPTDataset_indices`
  int64_t num_dataset_builder_threads = 1;
  bool mmap_bin_files = true;                // accepted; Loom always maps the .bin
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool eod_mask_loss = false;
  bool create_attention_mask = true;
  bool create_compressed_eod_mask = false;
  int64_t eod_pad_length = 128;              // alias: compressed_eod_mask_length
  bool drop_last_partial_validation_sequence = true;
  bool add_extra_token_to_sequence = true;
  int64_t eod = -1;
  int64_t pad = -1;
};

// train_dataset (+ its dataloader map)
struct LoaderOptions {
  std::string type = "BlendedMegatronDatasetDataLoader";
  std::string datasets_type = "GPTDataset";
  std::array<std::optional<int64_t>, kNumSplits> sizes;  // [train, valid, test] samples; absent = one epoch
  std::vector<std::string> column_names = {"input_ids", "labels"};
  bool shuffle = false;                // reshuffle the blended samples every epoch (seeded)
  // The seed of that reshuffle: dataloader.config.seed when given, else training.seed (MindFormers
  // seeds MindSpore, and so its data pipeline's shuffle, with training.seed).
  int64_t shuffle_seed = 1234;
  bool drop_remainder = true;
  int64_t num_parallel_workers = 8;    // 0 = build batches on the calling thread
  int64_t prefetch_size = 1;
  MegatronDataConfig config;
};

}  // namespace loom::data
