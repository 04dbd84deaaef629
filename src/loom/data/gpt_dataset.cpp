#include "loom/data/gpt_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/data/atomic_file.h"
#include "loom/data/md5.h"
#include "loom/data/npy.h"

namespace loom::data {

namespace {

nlohmann::ordered_json file_fingerprint(const std::string& path) {
  struct stat st {};
  nlohmann::ordered_json j;
  if (::stat(path.c_str(), &st) == 0) {
    j["bytes"] = static_cast<int64_t>(st.st_size);
    j["mtime_ns"] = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }
  return j;
}

}  // namespace

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> dataset, std::vector<int32_t> split_sequences,
                       std::optional<int64_t> num_samples, Split split, GptDatasetOptions options)
    : dataset_(std::move(dataset)), split_sequences_(std::move(split_sequences)), split_(split),
      options_(std::move(options)) {
  LOOM_CHECK(options_.sequence_length > 1, ConfigError,
             "train_dataset.dataloader.config.seq_length must be greater than 1, got ",
             options_.sequence_length);
  for (int32_t s : split_sequences_) {
    LOOM_CHECK(s >= 0 && s < dataset_->num_sequences(), ValueError, dataset_->path_prefix(),
               ": split sequence id ", s, " out of range [0, ", dataset_->num_sequences(), ")");
  }
  description_ = describe(num_samples);
  hash_ = md5_hex(description_);
  std::string stem;
  if (options_.use_cache) {
    cache_dir_ = options_.path_to_cache.empty()
                     ? (std::filesystem::path(dataset_->path_prefix()) / "cache" / "GPTDataset_indices").string()
                     : options_.path_to_cache;
    stem = (std::filesystem::path(cache_dir_) / (hash_ + "-GPTDataset-" + split_name(split_) + "-")).string();
    if (load_cache(stem)) return;
  }
  const auto start = std::chrono::steady_clock::now();
  const bool drop_last = split_ == Split::valid ? options_.drop_last_partial_validation_sequence : true;
  const std::vector<int32_t> lengths = dataset_->sequence_lengths();
  indices_ = build_gpt_indices(lengths, split_sequences_, num_samples, options_.sequence_length,
                               options_.random_seed, options_.add_extra_token_to_sequence ? 1 : 0,
                               drop_last);
  built_anew_ = true;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::info("GPTDataset ", split_name(split_), " ", dataset_->path_prefix(), ": built ",
            indices_.num_samples(), " samples over ", indices_.num_epochs, " epoch(s) in ", seconds, " s");
  if (options_.use_cache) save_cache(stem);
}

std::string GptDataset::describe(std::optional<int64_t> num_samples) const {
  nlohmann::ordered_json d;
  d["class"] = "GPTDataset";
  d["dataset_path"] = dataset_->path_prefix();
  d["num_samples"] = num_samples ? nlohmann::ordered_json(*num_samples) : nlohmann::ordered_json(nullptr);
  d["index_split"] = split_name(split_);
  d["random_seed"] = options_.random_seed;
  d["sequence_length"] = options_.sequence_length;
  d["split"] = options_.split;
  d["split_matrix"] = options_.split_matrix;
  d["add_extra_token_to_sequence"] = options_.add_extra_token_to_sequence;
  d["drop_last_partial_sequence"] =
      split_ == Split::valid ? options_.drop_last_partial_validation_sequence : true;
  d["split_sequences"] = {
      {"count", split_sequences_.size()},
      {"md5", md5_hex(std::string_view(reinterpret_cast<const char*>(split_sequences_.data()),
                                       split_sequences_.size() * sizeof(int32_t)))}};
  // Megatron keys its cache on the path only; Loom also keys it on the files themselves so a
  // regenerated dataset never reuses stale indices.
  d["idx_file"] = file_fingerprint(index_file_path(dataset_->path_prefix()));
  d["bin_file"] = file_fingerprint(data_file_path(dataset_->path_prefix()));
  d["format"] = "loom-gpt-indices-1";
  return d.dump(4);
}

bool GptDataset::load_cache(const std::string& stem) {
  const std::string description = stem + "description.txt";
  const std::string doc = stem + "document_index.npy";
  const std::string sample = stem + "sample_index.npy";
  const std::string shuffle = stem + "shuffle_index.npy";
  std::error_code ec;
  for (const auto* p : {&description, &doc, &sample, &shuffle}) {
    if (!std::filesystem::is_regular_file(*p, ec)) return false;
  }
  try {
    LOOM_CHECK(read_whole_file(description) == description_, DataError, description,
               ": description does not match (hash collision or edited file)");
    GptIndices loaded;
    const NpyArray d = read_npy(doc);
    LOOM_CHECK(d.shape.size() == 1 && d.descr == "<i4", DataError, doc, ": expected a 1-D int32 array");
    loaded.document_index.resize(static_cast<size_t>(d.numel()));
    std::memcpy(loaded.document_index.data(), d.bytes.data(), d.bytes.size());
    const NpyArray s = read_npy(sample);
    LOOM_CHECK(s.shape.size() == 2 && s.shape[1] == 2 && s.shape[0] >= 1, DataError, sample,
               ": expected an [N+1, 2] array");
    loaded.sample_index = npy_to_int64(s, sample);
    const NpyArray sh = read_npy(shuffle);
    LOOM_CHECK(sh.shape.size() == 1 && sh.shape[0] == s.shape[0] - 1, DataError, shuffle,
               ": expected ", s.shape[0] - 1, " entries, found shape of rank ", sh.shape.size());
    loaded.shuffle_index = npy_to_int64(sh, shuffle);
    const int64_t n = static_cast<int64_t>(loaded.document_index.size());
    for (size_t i = 0; i < loaded.sample_index.size(); i += 2) {
      LOOM_CHECK(loaded.sample_index[i] >= 0 && loaded.sample_index[i] < std::max<int64_t>(n, 1),
                 DataError, sample, ": row ", i / 2, " points outside the document index");
    }
    indices_ = std::move(loaded);
  } catch (const Error& e) {
    log::warn("ignoring the GPTDataset index cache (", e.what(), "); rebuilding it");
    return false;
  }
  log::info("GPTDataset ", split_name(split_), " ", dataset_->path_prefix(), ": loaded ",
            indices_.num_samples(), " samples from the index cache ", stem, "*");
  return true;
}

void GptDataset::save_cache(const std::string& stem) const {
  try {
    std::filesystem::create_directories(cache_dir_);
    const auto& di = indices_.document_index;
    write_file_atomic(stem + "document_index.npy",
                      encode_npy("<i4", {static_cast<int64_t>(di.size())}, di.data(), di.size() * 4));
    const auto& si = indices_.sample_index;
    write_file_atomic(stem + "sample_index.npy",
                      encode_npy("<i8", {static_cast<int64_t>(si.size() / 2), 2}, si.data(), si.size() * 8));
    const auto& sh = indices_.shuffle_index;
    const int64_t total = static_cast<int64_t>(sh.size());
    if (total < static_cast<int64_t>(UINT32_MAX) - 1) {  // Megatron: uint32 unless it would overflow
      std::vector<uint32_t> narrow(sh.begin(), sh.end());
      write_file_atomic(stem + "shuffle_index.npy", encode_npy("<u4", {total}, narrow.data(), narrow.size() * 4));
    } else {
      write_file_atomic(stem + "shuffle_index.npy", encode_npy("<i8", {total}, sh.data(), sh.size() * 8));
    }
    write_file_atomic(stem + "description.txt", description_);
  } catch (const std::exception& e) {
    log::warn("could not write the GPTDataset index cache under ", cache_dir_, " (", e.what(),
              "); continuing without it (set train_dataset.dataloader.config.path_to_cache to a "
              "writable directory)");
  }
}

void GptDataset::read_sample(int64_t index, std::span<int64_t> out) const {
  LOOM_CHECK(index >= 0 && index < size(), ValueError, "GPTDataset sample ", index,
             " out of range [0, ", size(), ")");
  const int64_t want = sample_length();
  LOOM_CHECK(static_cast<int64_t>(out.size()) == want, ValueError, "read_sample: buffer holds ",
             out.size(), " tokens, the sample has ", want);
  const int64_t extra = options_.add_extra_token_to_sequence ? 1 : 0;
  const int64_t j = indices_.shuffle_index[static_cast<size_t>(index)];
  const int64_t d0 = indices_.sample_index[static_cast<size_t>(2 * j)];
  const int64_t o0 = indices_.sample_index[static_cast<size_t>(2 * j + 1)];
  const int64_t d1 = indices_.sample_index[static_cast<size_t>(2 * j + 2)];
  const int64_t o1 = indices_.sample_index[static_cast<size_t>(2 * j + 3)];
  const auto& docs = indices_.document_index;
  int64_t filled = 0;
  auto take = [&](int64_t doc_pos, int64_t offset, int64_t length) {
    const int64_t sequence = docs[static_cast<size_t>(doc_pos)];
    length = std::min(length, want - filled);
    if (length <= 0) return;
    dataset_->read(sequence, offset, length, out.data() + filled);
    // The format stores any integer; a negative id is no token of any vocabulary. Name where it is.
    for (int64_t t = 0; t < length; ++t)
      LOOM_CHECK(out[static_cast<size_t>(filled + t)] >= 0, DataError, data_file_path(dataset_->path_prefix()),
                 ": token ", offset + t, " of sequence ", sequence, " (sample ", index, ") is ",
                 out[static_cast<size_t>(filled + t)], "; token ids must be non-negative: the file is damaged or was "
                 "not written by `loom preprocess` (re-run it on the source text)");
    filled += length;
  };
  if (d0 == d1) {
    take(d0, o0, o1 - o0 + extra);
  } else {
    for (int64_t i = d0; i <= d1; ++i) {
      const int64_t sequence = docs[static_cast<size_t>(i)];
      const int64_t offset = i > d0 ? 0 : o0;
      const int64_t length = i < d1 ? dataset_->sequence_length(sequence) - offset : o1 + extra;
      take(i, offset, length);
    }
  }
  std::fill(out.begin() + filled, out.end(), options_.pad);
}

}  // namespace loom::data
