// Megatron's BlendedDataset (helpers.cpp's build_blending_indices): interleaves several datasets so
// that after every sample the share drawn from each stays as close as possible to its weight.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "loom/data/token_sample_dataset.h"

namespace loom::data {

// helpers.cpp build_blending_indices: for each sample pick argmax_d(w[d]*max(s,1) - count[d])
// (ties to the lowest index).
void build_blending_indices(std::span<const double> weights, int64_t size,
                            std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);
// build_exhaustive_blending_indices: the same rule restricted to unfinished datasets, until
// dataset d has contributed exactly sizes[d] samples.
void build_exhaustive_blending_indices(std::span<const int64_t> sizes,
                                       std::vector<int16_t>& dataset_index,
                                       std::vector<int64_t>& dataset_sample_index);

class BlendedDataset : public TokenSampleDataset {
 public:
  // `weights` absent: draw every sample of every dataset (exhaustive blend, weights = lengths).
  // `size` absent requires absent weights. `cache_dir` "" disables the index cache (Megatron
  // caches the blend only when path_to_cache is set). `dataset_descriptions` identify the
  // datasets in the cache key.
  BlendedDataset(std::vector<std::shared_ptr<const TokenSampleDataset>> datasets,
                 std::optional<std::vector<double>> weights, std::optional<int64_t> size,
                 std::vector<std::string> dataset_descriptions, const std::string& split_name,
                 const std::string& cache_dir = "");

  int64_t size() const override { return static_cast<int64_t>(dataset_index_.size()); }
  int64_t sample_length() const override { return datasets_.front()->sample_length(); }
  void read_sample(int64_t index, std::span<int64_t> out) const override;

  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }
  const std::vector<std::shared_ptr<const TokenSampleDataset>>& datasets() const { return datasets_; }

 private:
  bool load_cache(const std::string& stem, const std::string& description);
  void save_cache(const std::string& stem, const std::string& description) const;

  std::vector<std::shared_ptr<const TokenSampleDataset>> datasets_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

}  // namespace loom::data
