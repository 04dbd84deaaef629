#include "loom/data/gpt_indices.h"

#include <cmath>

#include "loom/core/error.h"

namespace loom::data {

int64_t gpt_num_epochs(int64_t tokens_per_epoch, std::optional<int64_t> num_samples,
                       int64_t sequence_length, int add_extra_token) {
  if (!num_samples) return 1;
  LOOM_CHECK(tokens_per_epoch > 0, DataError, "the dataset split holds no tokens; give it more data "
             "or change split");
  const int64_t requested = *num_samples * sequence_length + add_extra_token;
  // while num_epochs * tokens_per_epoch < requested: num_epochs += 1
  const int64_t epochs = (requested + tokens_per_epoch - 1) / tokens_per_epoch;
  return std::max<int64_t>(epochs, 1);
}

std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs,
                                          NumpyRandomState& rng, bool separate_final_epoch) {
  if (!separate_final_epoch || num_epochs == 1) {
    std::vector<int32_t> index;
    index.reserve(documents.size() * static_cast<size_t>(num_epochs));
    for (int64_t e = 0; e < num_epochs; ++e) index.insert(index.end(), documents.begin(), documents.end());
    rng.shuffle(std::span<int32_t>(index));
    return index;
  }
  std::vector<int32_t> first = build_document_index(documents, num_epochs - 1, rng, false);
  std::vector<int32_t> last = build_document_index(documents, 1, rng, false);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

std::vector<int64_t> build_sample_index(std::span<const int32_t> sizes,
                                        std::span<const int32_t> doc_idx, int64_t seq_length,
                                        int64_t num_epochs, int64_t tokens_per_epoch,
                                        bool drop_last_partial_sequence, int add_extra_token) {
  LOOM_CHECK(seq_length > 1, ValueError, "seq_length must be greater than 1, got ", seq_length);
  const int64_t total = num_epochs * tokens_per_epoch - add_extra_token;
  int64_t num_samples;
  if (drop_last_partial_sequence) {
    num_samples = total / seq_length;
  } else {
    // helpers.cpp divides in single precision: ceil(float(total) / seq_length).
    num_samples = static_cast<int64_t>(std::ceil(static_cast<float>(total) / static_cast<int32_t>(seq_length)));
  }
  num_samples = std::max<int64_t>(num_samples, 0);
  std::vector<int64_t> sample_idx(static_cast<size_t>(2 * (num_samples + 1)));
  int64_t sample = 0;
  int64_t doc_pos = 0;
  int64_t doc_offset = 0;
  sample_idx[0] = 0;
  sample_idx[1] = 0;
  ++sample;
  const int64_t last_doc = static_cast<int64_t>(doc_idx.size()) - 1;
  while (sample <= num_samples) {
    int64_t remaining = seq_length + add_extra_token;
    while (remaining != 0) {
      const int64_t doc_length = sizes[static_cast<size_t>(doc_idx[static_cast<size_t>(doc_pos)])] - doc_offset;
      remaining -= doc_length;
      if (remaining <= 0) {
        doc_offset += remaining + doc_length - add_extra_token;
        remaining = 0;
      } else {
        if (doc_pos == last_doc) {
          LOOM_ASSERT(sample == num_samples, "sample index ran out of documents early");
          doc_offset = sizes[static_cast<size_t>(doc_idx[static_cast<size_t>(doc_pos)])] - add_extra_token;
          break;
        }
        ++doc_pos;
        doc_offset = 0;
      }
    }
    sample_idx[static_cast<size_t>(2 * sample)] = doc_pos;
    sample_idx[static_cast<size_t>(2 * sample + 1)] = doc_offset;
    ++sample;
  }
  return sample_idx;
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng) {
  std::vector<int64_t> index(static_cast<size_t>(total_size));
  for (int64_t i = 0; i < total_size; ++i) index[static_cast<size_t>(i)] = i;
  rng.shuffle(std::span<int64_t>(index.data(), static_cast<size_t>(num_samples)));
  if (num_samples != total_size) {
    rng.shuffle(std::span<int64_t>(index.data() + num_samples, static_cast<size_t>(total_size - num_samples)));
  }
  return index;
}

GptIndices build_gpt_indices(std::span<const int32_t> sequence_lengths,
                             std::span<const int32_t> split_sequences,
                             std::optional<int64_t> num_samples, int64_t sequence_length,
                             uint32_t seed, int add_extra_token, bool drop_last_partial_sequence) {
  int64_t tokens_per_epoch = 0;
  for (int32_t s : split_sequences) tokens_per_epoch += sequence_lengths[static_cast<size_t>(s)];
  LOOM_CHECK(tokens_per_epoch > 0, DataError,
             "the dataset split holds no tokens; give it more data or change split");
  GptIndices out;
  out.num_epochs = gpt_num_epochs(tokens_per_epoch, num_samples, sequence_length, add_extra_token);
  int64_t samples_sans_final = 0;
  if (out.num_epochs > 1) {
    samples_sans_final = ((out.num_epochs - 1) * tokens_per_epoch - add_extra_token) / sequence_length;
    const int64_t from_final = *num_samples - samples_sans_final;
    const int64_t per_epoch = (tokens_per_epoch - add_extra_token) / sequence_length;
    LOOM_ASSERT(from_final >= 0 && from_final <= per_epoch + 1, "final-epoch sample count ", from_final);
    // int(0.80 * n) in float64, as the reference computes the threshold.
    out.separate_final_epoch = from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }
  NumpyRandomState rng(seed);
  out.document_index = build_document_index(split_sequences, out.num_epochs, rng, out.separate_final_epoch);
  out.sample_index = build_sample_index(sequence_lengths, out.document_index, sequence_length,
                                        out.num_epochs, tokens_per_epoch, drop_last_partial_sequence,
                                        add_extra_token);
  const int64_t total = out.num_samples();
  out.shuffle_index = build_shuffle_index(out.separate_final_epoch ? samples_sans_final : total, total, rng);
  return out;
}

}  // namespace loom::data
