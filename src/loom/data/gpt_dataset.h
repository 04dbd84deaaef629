// Megatron's GPTDataset over one indexed dataset split (megatron/core/datasets/gpt_dataset.py):
// builds or loads the document/sample/shuffle indices and serves token windows of seq_length +
// add_extra_token.
//
// Index cache: `{cache_dir}/{md5(description)}-GPTDataset-{split}-{description.txt|
// document_index.npy|sample_index.npy|shuffle_index.npy}`, cache_dir = path_to_cache or
// `{prefix}/cache/GPTDataset_indices` as in Megatron. The description also records the size and
// modification time of the .idx/.bin, so regenerating a dataset invalidates its cache. Every cache
// file is published by atomic rename, so concurrent builders never read a half-written cache.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/data/blend_split.h"
#include "loom/data/gpt_indices.h"
#include "loom/data/indexed_dataset.h"
#include "loom/data/token_sample_dataset.h"

namespace loom::data {

struct GptDatasetOptions {
  int64_t sequence_length = 0;
  uint32_t random_seed = 1234;
  bool add_extra_token_to_sequence = true;
  bool drop_last_partial_validation_sequence = true;
  int64_t pad = -1;                 // fills short samples (only with drop_last = false)
  std::string path_to_cache;        // "" = next to the dataset, as Megatron
  bool use_cache = true;            // false: build in memory only
  std::string split;                // the split string, recorded in the description
  std::string split_matrix;         // its book-ends, recorded in the description
};

class GptDataset : public TokenSampleDataset {
 public:
  // `split_sequences` are the sequence ids of this split; num_samples absent = one epoch.
  GptDataset(std::shared_ptr<const IndexedDataset> dataset, std::vector<int32_t> split_sequences,
             std::optional<int64_t> num_samples, Split split, GptDatasetOptions options);

  int64_t size() const override { return indices_.num_samples(); }
  int64_t sample_length() const override {
    return options_.sequence_length + (options_.add_extra_token_to_sequence ? 1 : 0);
  }
  void read_sample(int64_t index, std::span<int64_t> out) const override;

  const GptIndices& indices() const { return indices_; }
  const std::string& unique_description() const { return description_; }
  const std::string& unique_description_hash() const { return hash_; }
  // True when the indices were computed rather than loaded from the cache.
  bool built_anew() const { return built_anew_; }
  // The cache directory in use ("" when caching is off).
  const std::string& cache_dir() const { return cache_dir_; }
  Split split() const { return split_; }
  const IndexedDataset& indexed_dataset() const { return *dataset_; }

 private:
  std::string describe(std::optional<int64_t> num_samples) const;
  bool load_cache(const std::string& stem);
  void save_cache(const std::string& stem) const;

  std::shared_ptr<const IndexedDataset> dataset_;
  std::vector<int32_t> split_sequences_;
  Split split_;
  GptDatasetOptions options_;
  std::string description_;
  std::string hash_;
  std::string cache_dir_;
  bool built_anew_ = false;
  GptIndices indices_;
};

}  // namespace loom::data
