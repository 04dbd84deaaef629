// Element types. Low-precision floats (bf16, f16) are storage formats on CPU: kernels load them
// into fp32, compute in fp32 and round back (round-to-nearest-even), as a GPU would store them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace loom {

enum class DType : uint8_t { f32, bf16, f16, f64, i32, i64, u8, boolean };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "float32", "bfloat16", ... (the config spellings)
bool is_floating(DType dtype);
// Parses "float32"/"fp32"/"bfloat16"/"bf16"/"float16"/"fp16"/"float64"/"int32"/"int64"/...;
// throws ValueError listing the accepted names.
DType dtype_from_name(const std::string& name);

// ---- bf16 / f16 scalar types -----------------------------------------------------------------
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return static_cast<uint16_t>((u + rounding) >> 16);
  }
  static float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

// Round a float through bf16/f16 (what storing and reloading would give).
inline float round_to_bf16(float x) { return bf16::to_float(bf16::from_float(x)); }
inline float round_to_f16(float x) { return f16::to_float(f16::from_float(x)); }

// C++ type <-> DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };

// The arithmetic type kernels use for a storage type: double for f64, float for the rest.
template <typename T> struct compute_type { using type = float; };
template <> struct compute_type<double> { using type = double; };
template <typename T> using compute_t = typename compute_type<T>::type;

}  // namespace loom

// Dispatch a floating dtype to a C++ storage type named `scalar_t` inside the body.
#define LOOM_DISPATCH_FLOATING(DTYPE, OPNAME, ...)                                          \
  [&] {                                                                                     \
    switch (DTYPE) {                                                                        \
      case ::loom::DType::f32: { using scalar_t = float; return __VA_ARGS__(); }           \
      case ::loom::DType::f64: { using scalar_t = double; return __VA_ARGS__(); }          \
      case ::loom::DType::bf16: { using scalar_t = ::loom::bf16; return __VA_ARGS__(); }   \
      case ::loom::DType::f16: { using scalar_t = ::loom::f16; return __VA_ARGS__(); }     \
      default:                                                                              \
        throw ::loom::DTypeError(std::string(OPNAME) + ": dtype " +                         \
                                 ::loom::dtype_name(DTYPE) +                                \
                                 " is not supported; use float32, float64, bfloat16 or float16"); \
    }                                                                                       \
  }()

// Dispatch any dtype (floating and integral).
#define LOOM_DISPATCH_ALL(DTYPE, OPNAME, ...)                                               \
  [&] {                                                                                     \
    switch (DTYPE) {                                                                        \
      case ::loom::DType::f32: { using scalar_t = float; return __VA_ARGS__(); }           \
      case ::loom::DType::f64: { using scalar_t = double; return __VA_ARGS__(); }          \
      case ::loom::DType::bf16: { using scalar_t = ::loom::bf16; return __VA_ARGS__(); }   \
      case ::loom::DType::f16: { using scalar_t = ::loom::f16; return __VA_ARGS__(); }     \
      case ::loom::DType::i32: { using scalar_t = int32_t; return __VA_ARGS__(); }         \
      case ::loom::DType::i64: { using scalar_t = int64_t; return __VA_ARGS__(); }         \
      case ::loom::DType::u8: { using scalar_t = uint8_t; return __VA_ARGS__(); }          \
      case ::loom::DType::boolean: { using scalar_t = bool; return __VA_ARGS__(); }        \
    }                                                                                       \
    throw ::loom::DTypeError(std::string(OPNAME) + ": unknown dtype");                      \
  }()
