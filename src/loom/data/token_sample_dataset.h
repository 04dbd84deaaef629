// What the loader samples from: a fixed-size list of token windows. GptDataset and
// BlendedDataset both implement it; tests and the benchmark can plug in their own.
#pragma once

#include <cstdint>
#include <span>

namespace loom::data {

class TokenSampleDataset {
 public:
  virtual ~TokenSampleDataset() = default;
  virtual int64_t size() const = 0;
  // Tokens per sample: seq_length + add_extra_token_to_sequence.
  virtual int64_t sample_length() const = 0;
  // Fills `out` (sample_length() tokens) with sample `index`, padded with the pad id when the
  // sample is short. Safe to call from several threads at once.
  virtual void read_sample(int64_t index, std::span<int64_t> out) const = 0;
};

}  // namespace loom::data
