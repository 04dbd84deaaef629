// Token element types of Megatron .bin files, by the one-byte code stored in the .idx header
// (Megatron's indexed_dataset.py DType). The codes are part of the file format, so they are spelled
// out here rather than reusing loom::DType (which has no int8/int16/uint16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::data {

enum class TokenDType : uint8_t {
  u8 = 1,
  i8 = 2,
  i16 = 3,
  i32 = 4,
  i64 = 5,
  f64 = 6,
  f32 = 7,
  u16 = 8,
};

size_t token_dtype_size(TokenDType dtype);
// numpy spelling ("uint16", "int32", ...), used in messages.
const char* token_dtype_name(TokenDType dtype);
bool is_valid_token_dtype_code(uint8_t code);
// Megatron's `optimal_dtype(vocab_size)`: uint16 below 65500 entries, else int32.
TokenDType optimal_token_dtype(int64_t vocab_size);
// Whether an integer token id can be stored exactly in `dtype`.
bool token_fits(TokenDType dtype, int64_t token);

// Reads one element at `p` (any alignment) and widens it to int64 (floats are truncated, as
// numpy's astype(int64) would).
int64_t load_token(TokenDType dtype, const unsigned char* p);
// Copies `count` elements starting at `src` into `dst`, widened to int64.
void load_tokens(TokenDType dtype, const unsigned char* src, int64_t count, int64_t* dst);
// Narrows `count` ids to the on-disk representation (caller checked token_fits).
void store_tokens(TokenDType dtype, const int64_t* src, int64_t count, unsigned char* dst);

}  // namespace loom::data
