// Counter-based random numbers (Philox4x32-10). A value depends only on (seed, stream, index):
// element i of a fill uses counter block (stream, offset + i/4), lane i%4. So results do not
// depend on the thread count, and a shard of a tensor can be initialised alone and still get
// exactly the numbers the whole tensor would have had at those positions.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "loom/core/tensor.h"

namespace loom {

// One Philox4x32-10 block: 4 random 32-bit words for (key, counter).
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

// Stable 64-bit stream id from a name (FNV-1a), e.g. a parameter's dotted path.
uint64_t stream_id(const std::string& name);

// A position in a random stream. `offset` counts 4-value blocks already consumed.
struct RngState {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t offset = 0;
};

class Generator {
 public:
  Generator() = default;
  explicit Generator(uint64_t seed, uint64_t stream = 0) : state_{seed, stream, 0} {}

  const RngState& state() const { return state_; }
  void set_state(const RngState& s) { state_ = s; }
  // Reserves `count` values and returns the state to draw them from (offset advanced by blocks).
  RngState reserve(int64_t count);

 private:
  RngState state_;
};

// The process-wide generator for runtime randomness (dropout, sampling). checkpoint() saves and
// restores its state so a recomputed forward sees the same numbers.
Generator& default_generator();
void manual_seed(uint64_t seed);

// Fills `t` (any floating dtype, any layout) with values of the stream starting at `state`, where
// element (logical, row-major) i of t takes stream value `first_index + i`.
void fill_normal(Tensor& t, double mean, double stddev, const RngState& state, int64_t first_index = 0);
void fill_uniform(Tensor& t, double low, double high, const RngState& state, int64_t first_index = 0);

// Convenience: draws from `gen` (advancing it).
void normal_(Tensor& t, double mean, double stddev, Generator& gen);
void uniform_(Tensor& t, double low, double high, Generator& gen);

// Single stream values (for tests and small uses).
double stream_uniform(const RngState& state, int64_t index);  // in (0, 1]
double stream_normal(const RngState& state, int64_t index);

}  // namespace loom
