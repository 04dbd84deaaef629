// GPT-2's byte-level alphabet (HF tokenizers' ByteLevel): every byte is shown as a printable
// character, so byte-level BPE vocabularies are strings. Printable Latin-1 bytes stand for
// themselves; the others (controls, space, ...) take the code points from U+0100 on, in order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "loom/data/tokenizer/unicode.h"

namespace loom::data {

struct ByteLevelAlphabet {
  std::array<std::string, 256> byte_to_char;         // UTF-8 of the character for each byte
  std::unordered_map<uint32_t, uint8_t> char_to_byte;  // code point -> byte

  ByteLevelAlphabet() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? b : next++;
      append_utf8(byte_to_char[b], cp);
      char_to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};

inline const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

}  // namespace loom::data
