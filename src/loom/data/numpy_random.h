// numpy.random.RandomState(seed).shuffle reproduced bit for bit (numpy 1.24, legacy MT19937),
// because Megatron's GPTDataset orders documents and samples with it and users expect the same
// sample order as the reference: std::mt19937 seeded as numpy's init_genrand, and numpy's
// masked rejection sampling for each bounded draw.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace loom::data {

class NumpyRandomState {
 public:
  // RandomState(seed) for an integer seed in [0, 2^32): MT19937 init_genrand, as std::mt19937.
  explicit NumpyRandomState(uint32_t seed) : engine_(seed) {}

  // numpy's random_interval(max): uniform in [0, max] by masked rejection sampling; 64-bit
  // draws (two outputs, high word first) only when max needs more than 32 bits.
  uint64_t random_interval(uint64_t max);

  // RandomState.shuffle on a 1-D array: Fisher-Yates from the end.
  template <typename T>
  void shuffle(std::span<T> values) {
    if (values.size() < 2) return;
    for (size_t i = values.size() - 1; i >= 1; --i) {
      const size_t j = static_cast<size_t>(random_interval(i));
      std::swap(values[i], values[j]);
    }
  }

 private:
  std::mt19937 engine_;
};

}  // namespace loom::data
