// UTF-8 helpers for the tokenizers and Unicode normalization (ICU) that remembers where every
// output byte came from, so token offsets point into the caller's text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

// Byte offset of the first ill-formed UTF-8 sequence, or npos when `text` is valid.
size_t invalid_utf8_offset(std::string_view text);

// Length in bytes of the UTF-8 character starting with `lead` (1 for a stray byte).
inline size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

void append_utf8(std::string& out, uint32_t code_point);

// Decodes bytes that may be cut mid-character (the tail of a token sequence): every maximal
// ill-formed subpart becomes U+FFFD, the W3C/Unicode practice that Rust's from_utf8_lossy and
// JavaScript's TextDecoder follow.
std::string utf8_lossy(std::string_view bytes);

// Text after a normalizer, with the input bytes each of its bytes came from. Empty `from` means
// unchanged (byte i came from input byte i).
struct NormalizedText {
  std::string text;
  std::vector<uint32_t> from_begin, from_end;  // per byte of text: [begin, end) in the input
  bool identity() const { return from_begin.empty(); }
};

enum class NormalForm { nfc, nfd, nfkc, nfkd };

// Normalizes valid UTF-8 `text`; text already in the form comes back unchanged (the common case,
// checked without copying).
NormalizedText unicode_normalize(std::string_view text, NormalForm form);

// Composes two alignments: `outer` was computed on `inner.text`; the result maps outer's bytes to
// the original input of `inner`.
NormalizedText compose_alignment(const NormalizedText& inner, NormalizedText outer);

}  // namespace loom::data
