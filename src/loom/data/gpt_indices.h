// The three index arrays behind Megatron's GPTDataset (_build_document_sample_shuffle_indices and
// helpers.cpp's build_sample_idx), as pure functions so the golden vectors can be tested directly:
//   document_index  sequence ids in visiting order, num_epochs copies, shuffled
//   sample_index    [num_samples + 1, 2] (position in document_index, token offset) where
//                   each sample starts
//   shuffle_index   permutation of the samples
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "loom/data/numpy_random.h"

namespace loom::data {

// Smallest epoch count whose tokens cover num_samples * S + add_extra_token (1 when absent).
int64_t gpt_num_epochs(int64_t tokens_per_epoch, std::optional<int64_t> num_samples,
                       int64_t sequence_length, int add_extra_token);

// _build_document_index: tile `documents` num_epochs times and shuffle; with
// separate_final_epoch the first num_epochs-1 copies and the last copy are shuffled separately.
std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs,
                                          NumpyRandomState& rng, bool separate_final_epoch);

// helpers.cpp build_sample_idx, flattened row-major [num_samples + 1, 2].
std::vector<int64_t> build_sample_index(std::span<const int32_t> sequence_lengths,
                                        std::span<const int32_t> document_index,
                                        int64_t sequence_length, int64_t num_epochs,
                                        int64_t tokens_per_epoch, bool drop_last_partial_sequence,
                                        int add_extra_token);

// _build_shuffle_index: shuffle [0, num_samples) then, separately, [num_samples, total_size).
std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size,
                                         NumpyRandomState& rng);

struct GptIndices {
  std::vector<int32_t> document_index;
  std::vector<int64_t> sample_index;   // [num_samples + 1, 2] row-major
  std::vector<int64_t> shuffle_index;
  int64_t num_epochs = 1;
  bool separate_final_epoch = false;
  int64_t num_samples() const { return static_cast<int64_t>(sample_index.size() / 2) - 1; }
};

// _build_document_sample_shuffle_indices without the cache: `split_sequences` are the split's
// sequence ids, `sequence_lengths` the whole dataset's lengths.
GptIndices build_gpt_indices(std::span<const int32_t> sequence_lengths,
                             std::span<const int32_t> split_sequences,
                             std::optional<int64_t> num_samples, int64_t sequence_length,
                             uint32_t seed, int add_extra_token, bool drop_last_partial_sequence);

}  // namespace loom::data
