#include "loom/data/numpy_random.h"

namespace loom::data {

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  if (max <= 0xffffffffULL) {
    while ((value = (static_cast<uint64_t>(engine_()) & mask)) > max) {
    }
  } else {
    while (true) {
      const uint64_t high = static_cast<uint64_t>(engine_());
      const uint64_t low = static_cast<uint64_t>(engine_());
      value = ((high << 32) | low) & mask;
      if (value <= max) break;
    }
  }
  return value;
}

}  // namespace loom::data
