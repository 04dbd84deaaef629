#include "loom/core/rng.h"

#include <cmath>

#include "loom/core/scalar_cast.h"
#include "loom/core/parallel.h"

namespace loom {

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

uint64_t stream_id(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

RngState Generator::reserve(int64_t count) {
  RngState s = state_;
  state_.offset += static_cast<uint64_t>((count + 3) / 4);
  return s;
}

Generator& default_generator() {
  static Generator gen(42, stream_id("default"));
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().set_state({seed, stream_id("default"), 0}); }

namespace {

// uint32 -> (0, 1]: never 0, so log() in Box-Muller stays finite.
inline double to_unit(uint32_t x) { return (static_cast<double>(x) + 1.0) * (1.0 / 4294967296.0); }

// Stream values for block `b`: four uniforms, or four normals (Box-Muller on lanes 0/1 and 2/3).
inline std::array<double, 4> block_uniform(const RngState& s, uint64_t b) {
  auto r = philox4x32(s.seed, s.stream, s.offset + b);
  return {to_unit(r[0]), to_unit(r[1]), to_unit(r[2]), to_unit(r[3])};
}

inline std::array<double, 4> block_normal(const RngState& s, uint64_t b) {
  auto u = block_uniform(s, b);
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  double r0 = std::sqrt(-2.0 * std::log(u[0])), r1 = std::sqrt(-2.0 * std::log(u[2]));
  return {r0 * std::cos(kTwoPi * u[1]), r0 * std::sin(kTwoPi * u[1]),
          r1 * std::cos(kTwoPi * u[3]), r1 * std::sin(kTwoPi * u[3])};
}

template <typename Gen>
void fill_stream(Tensor& t, const RngState& state, int64_t first, double scale, double shift, Gen gen) {
  LOOM_CHECK(is_floating(t.dtype()), DTypeError, "random fill: tensor must be floating point, got ",
             dtype_name(t.dtype()));
  LOOM_CHECK(first >= 0, ValueError, "random fill: first_index must be >= 0");
  Tensor dst = t.is_contiguous() ? t : Tensor::empty(t.shape(), t.dtype());
  const int64_t n = dst.numel();
  LOOM_DISPATCH_FLOATING(dst.dtype(), "random fill", [&] {
    scalar_t* p = dst.data<scalar_t>();
    parallel_for(0, n, 4096, [&](int64_t b, int64_t e) {
      int64_t i = b;
      while (i < e) {
        const int64_t g = first + i;
        const uint64_t block = static_cast<uint64_t>(g / 4);
        auto v = gen(state, block);
        for (int lane = static_cast<int>(g % 4); lane < 4 && i < e; ++lane, ++i)
          p[i] = cast_scalar<scalar_t>(v[lane] * scale + shift);
      }
    });
  });
  if (!t.is_contiguous()) t.copy_(dst);
}

}  // namespace

void fill_normal(Tensor& t, double mean, double stddev, const RngState& state, int64_t first_index) {
  fill_stream(t, state, first_index, stddev, mean, block_normal);
}

void fill_uniform(Tensor& t, double low, double high, const RngState& state, int64_t first_index) {
  fill_stream(t, state, first_index, high - low, low, block_uniform);
}

void normal_(Tensor& t, double mean, double stddev, Generator& gen) {
  fill_normal(t, mean, stddev, gen.reserve(t.numel()));
}

void uniform_(Tensor& t, double low, double high, Generator& gen) {
  fill_uniform(t, low, high, gen.reserve(t.numel()));
}

double stream_uniform(const RngState& state, int64_t index) {
  return block_uniform(state, static_cast<uint64_t>(index / 4))[index % 4];
}

double stream_normal(const RngState& state, int64_t index) {
  return block_normal(state, static_cast<uint64_t>(index / 4))[index % 4];
}

}  // namespace loom
