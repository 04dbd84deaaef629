#include "loom/data/blended_dataset.h"

#include <filesystem>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/data/atomic_file.h"
#include "loom/data/blend_split.h"
#include "loom/data/md5.h"
#include "loom/data/npy.h"

namespace loom::data {

void build_blending_indices(std::span<const double> weights, int64_t size,
                            std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
  const size_t n = weights.size();
  dataset_index.assign(static_cast<size_t>(size), 0);
  dataset_sample_index.assign(static_cast<size_t>(size), 0);
  std::vector<int64_t> current(n, 0);
  for (int64_t s = 0; s < size; ++s) {
    const double sd = std::max(static_cast<double>(s), 1.0);
    size_t best = 0;
    double best_error = weights[0] * sd - static_cast<double>(current[0]);
    for (size_t d = 1; d < n; ++d) {
      const double error = weights[d] * sd - static_cast<double>(current[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    dataset_index[static_cast<size_t>(s)] = static_cast<int16_t>(best);
    dataset_sample_index[static_cast<size_t>(s)] = current[best];
    current[best] += 1;
  }
}

void build_exhaustive_blending_indices(std::span<const int64_t> sizes,
                                       std::vector<int16_t>& dataset_index,
                                       std::vector<int64_t>& dataset_sample_index) {
  const size_t n = sizes.size();
  int64_t total = 0;
  std::set<size_t> unspent;
  for (size_t d = 0; d < n; ++d) {
    total += sizes[d];
    if (sizes[d] > 0) unspent.insert(d);  // the reference would loop forever on an empty dataset
  }
  std::vector<double> weights(n);
  for (size_t d = 0; d < n; ++d) weights[d] = static_cast<double>(sizes[d]) / static_cast<double>(total);
  std::vector<int64_t> counts(n, 0);
  dataset_index.assign(static_cast<size_t>(total), 0);
  dataset_sample_index.assign(static_cast<size_t>(total), 0);
  int64_t s = 0;
  while (!unspent.empty()) {
    const double sd = std::max(static_cast<double>(s), 1.0);
    size_t best = 0;
    double best_error = std::numeric_limits<double>::lowest();
    for (size_t d : unspent) {
      const double error = weights[d] * sd - static_cast<double>(counts[d]);
      if (error > best_error) {
        best = d;
        best_error = error;
      }
    }
    dataset_index[static_cast<size_t>(s)] = static_cast<int16_t>(best);
    dataset_sample_index[static_cast<size_t>(s)] = counts[best];
    counts[best] += 1;
    if (counts[best] == sizes[best]) unspent.erase(best);
    ++s;
  }
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const TokenSampleDataset>> datasets,
                               std::optional<std::vector<double>> weights, std::optional<int64_t> size,
                               std::vector<std::string> dataset_descriptions, const std::string& split,
                               const std::string& cache_dir)
    : datasets_(std::move(datasets)) {
  LOOM_CHECK(!datasets_.empty(), ValueError, "BlendedDataset needs at least one dataset");
  LOOM_CHECK(datasets_.size() < 32767, ConfigError, "train_dataset.dataloader.config.data_path: a blend "
             "supports fewer than 32767 datasets, got ", datasets_.size());
  for (const auto& d : datasets_) {
    LOOM_CHECK(d->sample_length() == datasets_.front()->sample_length(), ValueError,
               "BlendedDataset: datasets produce samples of different lengths");
  }
  LOOM_CHECK(size.has_value() || !weights.has_value(), ConfigError,
             "train_dataset.dataloader.sizes: a weighted blend needs a sample count for the ",
             split, " split (size_is_none => weights_are_none)");
  std::vector<double> normalized;
  std::vector<int64_t> lengths;
  if (weights) {
    LOOM_CHECK(weights->size() == datasets_.size(), ConfigError,
               "train_dataset.dataloader.config.data_path: ", weights->size(), " weights for ",
               datasets_.size(), " datasets");
    normalized = normalize_weights(*weights);
  } else {
    for (const auto& d : datasets_) lengths.push_back(d->size());
    if (size) {
      int64_t total = 0;
      for (int64_t l : lengths) total += l;
      size = std::min(*size, total);  // the blend cannot exceed what the datasets hold
      std::vector<double> w(lengths.begin(), lengths.end());
      normalized = normalize_weights(w);
    }
  }
  nlohmann::ordered_json desc;
  desc["class"] = "BlendedDataset";
  desc["datasets"] = dataset_descriptions;
  desc["split"] = split;
  if (!normalized.empty()) desc["weights"] = normalized; else desc["weights"] = lengths;
  desc["size"] = size ? nlohmann::ordered_json(*size) : nlohmann::ordered_json(nullptr);
  const std::string description = desc.dump(4);
  std::string stem;
  if (!cache_dir.empty()) {
    stem = (std::filesystem::path(cache_dir) / (md5_hex(description) + "-BlendedDataset-" + split + "-")).string();
    if (load_cache(stem, description)) return;
  }
  if (size) {
    build_blending_indices(normalized, *size, dataset_index_, dataset_sample_index_);
  } else {
    build_exhaustive_blending_indices(lengths, dataset_index_, dataset_sample_index_);
  }
  std::vector<int64_t> asked(datasets_.size(), 0);
  for (int16_t d : dataset_index_) asked[static_cast<size_t>(d)] += 1;
  for (size_t d = 0; d < datasets_.size(); ++d) {
    LOOM_CHECK(asked[d] <= datasets_[d]->size(), DataError, "BlendedDataset ", split,
               " blend goes out of bounds for dataset ", d, ": it needs ", asked[d],
               " samples but the dataset has ", datasets_[d]->size(),
               " (raise its weight's surplus or check train_dataset.dataloader.sizes)");
  }
  if (!cache_dir.empty()) save_cache(stem, description);
}

bool BlendedDataset::load_cache(const std::string& stem, const std::string& description) {
  const std::string desc_path = stem + "description.txt";
  const std::string index_path = stem + "dataset_index.npy";
  const std::string sample_path = stem + "dataset_sample_index.npy";
  std::error_code ec;
  for (const auto* p : {&desc_path, &index_path, &sample_path}) {
    if (!std::filesystem::is_regular_file(*p, ec)) return false;
  }
  try {
    LOOM_CHECK(read_whole_file(desc_path) == description, DataError, desc_path, ": description differs");
    const NpyArray index = read_npy(index_path);
    const NpyArray sample = read_npy(sample_path);
    LOOM_CHECK(index.descr == "<i2" && index.shape.size() == 1, DataError, index_path, ": expected int16[N]");
    LOOM_CHECK(sample.shape == index.shape, DataError, sample_path, ": shape differs from ", index_path);
    std::vector<int64_t> wide = npy_to_int64(index, index_path);
    dataset_sample_index_ = npy_to_int64(sample, sample_path);
    dataset_index_.assign(wide.begin(), wide.end());
    for (size_t i = 0; i < wide.size(); ++i) {
      LOOM_CHECK(wide[i] >= 0 && wide[i] < static_cast<int64_t>(datasets_.size()) &&
                     dataset_sample_index_[i] >= 0 &&
                     dataset_sample_index_[i] < datasets_[static_cast<size_t>(wide[i])]->size(),
                 DataError, index_path, ": entry ", i, " is out of range");
    }
  } catch (const Error& e) {
    log::warn("ignoring the BlendedDataset index cache (", e.what(), "); rebuilding it");
    dataset_index_.clear();
    dataset_sample_index_.clear();
    return false;
  }
  return true;
}

void BlendedDataset::save_cache(const std::string& stem, const std::string& description) const {
  try {
    std::filesystem::create_directories(std::filesystem::path(stem).parent_path());
    const int64_t n = static_cast<int64_t>(dataset_index_.size());
    write_file_atomic(stem + "dataset_index.npy",
                      encode_npy("<i2", {n}, dataset_index_.data(), dataset_index_.size() * 2));
    write_file_atomic(stem + "dataset_sample_index.npy",
                      encode_npy("<i8", {n}, dataset_sample_index_.data(), dataset_sample_index_.size() * 8));
    write_file_atomic(stem + "description.txt", description);
  } catch (const std::exception& e) {
    log::warn("could not write the BlendedDataset index cache ", stem, "* (", e.what(), ")");
  }
}

void BlendedDataset::read_sample(int64_t index, std::span<int64_t> out) const {
  LOOM_CHECK(index >= 0 && index < size(), ValueError, "BlendedDataset sample ", index,
             " out of range [0, ", size(), ")");
  const auto d = static_cast<size_t>(dataset_index_[static_cast<size_t>(index)]);
  datasets_[d]->read_sample(dataset_sample_index_[static_cast<size_t>(index)], out);
}

}  // namespace loom::data
