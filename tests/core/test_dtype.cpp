// bf16/f16 conversions: round-to-nearest-even, NaN/Inf, subnormals; f16 checked against F16C.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "loom/core/dtype.h"
#include "loom/core/tensor.h"

using namespace loom;

namespace {
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16::from_float(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even → 1.0
  EXPECT_EQ(bf16::from_float(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3·2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even) → rounds up
  EXPECT_EQ(bf16::from_float(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(bf16::to_float(0x3f82), 1.015625f);
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(static_cast<float>(bf16(std::numeric_limits<float>::infinity()))));
  EXPECT_EQ(bf16::from_float(-0.0f), 0x8000);
  // the largest finite float rounds to +inf in bf16
  EXPECT_TRUE(std::isinf(round_to_bf16(std::numeric_limits<float>::max())));
}

// The processor's own conversions (F16C, IEEE 754 binary16 round-to-nearest-even), compiled for
// F16C whatever -march is (LOOM_PORTABLE builds for plain x86-64) and called only where the CPU
// has it: the test asks the CPU at run time and skips honestly instead of being compiled out.
namespace {
__attribute__((target("f16c"))) uint16_t hardware_to_f16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
__attribute__((target("f16c"))) float hardware_from_f16(uint16_t h) { return _cvtsh_ss(h); }
}  // namespace

TEST(DType, F16MatchesHardwareConversionOnManyValues) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this CPU has no F16C to compare with";
  // Every 2^12-th float bit pattern plus special regions (subnormals, overflow edge).
  std::vector<uint32_t> patterns;
  for (uint64_t u = 0; u < (1ull << 32); u += 4093) patterns.push_back(static_cast<uint32_t>(u));
  for (uint32_t u = 0x33000000u; u < 0x38800000u; u += 997) patterns.push_back(u);  // half subnormals
  for (uint32_t u = 0x477fe000u; u < 0x47801000u; u += 1) patterns.push_back(u);    // 65504..65536
  for (uint32_t bits : patterns) {
    float f = from_bits(bits);
    uint16_t hw = hardware_to_f16(f);
    uint16_t sw = f16::from_float(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16::to_float(sw)));
      continue;
    }
    ASSERT_EQ(sw, hw) << "float bits 0x" << std::hex << bits;
    ASSERT_EQ(f16::to_float(hw), hardware_from_f16(hw));
  }
}

TEST(DType, NamesRoundTripAndUnknownNameListsChoices) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8, DType::boolean})
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
  EXPECT_EQ(dtype_from_name("bf16"), DType::bf16);
  try {
    dtype_from_name("float8");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype 'float8'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bfloat16"), std::string::npos);
  }
}

TEST(DType, TensorCastAndCopyBroadcast) {
  Tensor t = Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f}, {3});
  EXPECT_EQ(t.to(DType::i64).to_int_vector(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(t.to(DType::bf16).to_float_vector(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  Tensor m = Tensor::zeros({2, 3}, DType::f64);
  m.copy_(t);  // broadcast a row into every row, cast f32 → f64
  EXPECT_EQ(m.to_double_vector(), (std::vector<double>{1.5, -2, 3.25, 1.5, -2, 3.25}));
  EXPECT_THROW(m.copy_(Tensor::zeros({4})), ShapeError);
}
