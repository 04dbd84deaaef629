#include "loom/core/dtype.h"

#include "loom/core/error.h"

namespace loom {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::boolean: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
    case DType::boolean: return "bool";
  }
  return "?";
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f64;
}

DType dtype_from_name(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "float") return DType::f32;
  if (name == "bfloat16" || name == "bf16") return DType::bf16;
  if (name == "float16" || name == "fp16" || name == "half") return DType::f16;
  if (name == "float64" || name == "fp64" || name == "double") return DType::f64;
  if (name == "int32") return DType::i32;
  if (name == "int64") return DType::i64;
  if (name == "uint8") return DType::u8;
  if (name == "bool") return DType::boolean;
  LOOM_THROW(ValueError, "unknown dtype '", name,
             "': use one of float32, bfloat16, float16, float64, int32, int64, uint8, bool");
}

// IEEE binary16 conversions (round to nearest even), portable; F16C would give the same bits.
uint16_t f16::from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) {                                           // overflow (incl. inf)
    // 65520 and above round to inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (abs < 0x38800000u) {  // subnormal half or zero: |f| < 2^-14
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    uint32_t mant = (abs & 0x007fffffu) | 0x00800000u;
    int exp = static_cast<int>(abs >> 23);  // biased
    int shift = 126 - exp;                  // 14 - (exp - 127) + 13 - 1 ... => total shift
    // value = mant * 2^(exp-150); half subnormal unit = 2^-24 => h = mant * 2^(exp-126)
    uint32_t h = mant >> (shift);
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float f16::to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      out = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

}  // namespace loom
