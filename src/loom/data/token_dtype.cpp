#include "loom/data/token_dtype.h"

#include <cstring>
#include <limits>

#include "loom/core/error.h"

namespace loom::data {

size_t token_dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::u8:
    case TokenDType::i8: return 1;
    case TokenDType::i16:
    case TokenDType::u16: return 2;
    case TokenDType::i32:
    case TokenDType::f32: return 4;
    case TokenDType::i64:
    case TokenDType::f64: return 8;
  }
  LOOM_THROW(DataError, "unknown token dtype code ", static_cast<int>(dtype));
}

const char* token_dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::u8: return "uint8";
    case TokenDType::i8: return "int8";
    case TokenDType::i16: return "int16";
    case TokenDType::i32: return "int32";
    case TokenDType::i64: return "int64";
    case TokenDType::f64: return "float64";
    case TokenDType::f32: return "float32";
    case TokenDType::u16: return "uint16";
  }
  return "unknown";
}

bool is_valid_token_dtype_code(uint8_t code) { return code >= 1 && code <= 8; }

TokenDType optimal_token_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::u16 : TokenDType::i32;
}

bool token_fits(TokenDType dtype, int64_t token) {
  switch (dtype) {
    case TokenDType::u8: return token >= 0 && token <= 255;
    case TokenDType::i8: return token >= -128 && token <= 127;
    case TokenDType::i16: return token >= -32768 && token <= 32767;
    case TokenDType::u16: return token >= 0 && token <= 65535;
    case TokenDType::i32:
      return token >= std::numeric_limits<int32_t>::min() && token <= std::numeric_limits<int32_t>::max();
    case TokenDType::i64: return true;
    case TokenDType::f32: return token >= -(int64_t{1} << 24) && token <= (int64_t{1} << 24);
    case TokenDType::f64: return token >= -(int64_t{1} << 53) && token <= (int64_t{1} << 53);
  }
  return false;
}

namespace {
template <typename T>
void widen(const unsigned char* src, int64_t count, int64_t* dst) {
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    dst[i] = static_cast<int64_t>(v);
  }
}
template <typename T>
void narrow(const int64_t* src, int64_t count, unsigned char* dst) {
  for (int64_t i = 0; i < count; ++i) {
    T v = static_cast<T>(src[i]);
    std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
  }
}
}  // namespace

void load_tokens(TokenDType dtype, const unsigned char* src, int64_t count, int64_t* dst) {
  switch (dtype) {
    case TokenDType::u8: return widen<uint8_t>(src, count, dst);
    case TokenDType::i8: return widen<int8_t>(src, count, dst);
    case TokenDType::i16: return widen<int16_t>(src, count, dst);
    case TokenDType::u16: return widen<uint16_t>(src, count, dst);
    case TokenDType::i32: return widen<int32_t>(src, count, dst);
    case TokenDType::i64: return widen<int64_t>(src, count, dst);
    case TokenDType::f32: return widen<float>(src, count, dst);
    case TokenDType::f64: return widen<double>(src, count, dst);
  }
}

int64_t load_token(TokenDType dtype, const unsigned char* p) {
  int64_t v = 0;
  load_tokens(dtype, p, 1, &v);
  return v;
}

void store_tokens(TokenDType dtype, const int64_t* src, int64_t count, unsigned char* dst) {
  switch (dtype) {
    case TokenDType::u8: return narrow<uint8_t>(src, count, dst);
    case TokenDType::i8: return narrow<int8_t>(src, count, dst);
    case TokenDType::i16: return narrow<int16_t>(src, count, dst);
    case TokenDType::u16: return narrow<uint16_t>(src, count, dst);
    case TokenDType::i32: return narrow<int32_t>(src, count, dst);
    case TokenDType::i64: return narrow<int64_t>(src, count, dst);
    case TokenDType::f32: return narrow<float>(src, count, dst);
    case TokenDType::f64: return narrow<double>(src, count, dst);
  }
}

}  // namespace loom::data
