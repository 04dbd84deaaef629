#include "loom/data/tokenizer/unicode.h"

#include <cstring>

#include <unicode/bytestream.h>
#include <unicode/edits.h>
#include <unicode/normalizer2.h>

#include "loom/core/error.h"

namespace loom::data {

namespace {

// Length of the well-formed sequence at text[i], or of the maximal ill-formed subpart (as a
// negative number) per Unicode's Table 3-7 of well-formed byte sequences.
int utf8_sequence(std::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = b(i);
  if (lead < 0x80) return 1;
  int need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= text.size()) return -k;
    const unsigned char c = b(i + k);
    const unsigned char min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
    if (c < min || c > max) return -k;
  }
  return need + 1;
}

const icu::Normalizer2& normalizer(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::nfc: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::nfd: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::nfkc: n = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::nfkd: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  LOOM_CHECK(U_SUCCESS(status) && n != nullptr, DataError, "ICU cannot load its Unicode normalization data (",
             u_errorName(status), "); reinstall libicu (scripts/install-deps.sh)");
  return *n;
}

}  // namespace

size_t invalid_utf8_offset(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII runs are most text: skip eight bytes at a time.
    while (i + 8 <= text.size()) {
      uint64_t word;
      std::memcpy(&word, text.data() + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= text.size()) break;
    const int n = utf8_sequence(text, i);
    if (n < 0) return i;
    i += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const int n = utf8_sequence(bytes, i);
    if (n > 0) {
      out.append(bytes.data() + i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += static_cast<size_t>(-n);
    }
  }
  return out;
}

NormalizedText unicode_normalize(std::string_view text, NormalForm form) {
  const icu::Normalizer2& n = normalizer(form);
  UErrorCode status = U_ZERO_ERROR;
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  NormalizedText out;
  if (n.isNormalizedUTF8(piece, status) && U_SUCCESS(status)) {
    out.text = std::string(text);
    return out;
  }
  status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out.text);
  icu::Edits edits;
  n.normalizeUTF8(0, piece, sink, &edits, status);
  LOOM_CHECK(U_SUCCESS(status), DataError, "Unicode normalization failed (ICU: ", u_errorName(status), ")");
  out.from_begin.resize(out.text.size());
  out.from_end.resize(out.text.size());
  // Unchanged spans map byte to byte; a changed span (a composition, a decomposition) maps each
  // of its output bytes to the whole input span, as HF tokenizers' alignments do.
  auto it = edits.getFineIterator();
  while (it.next(status)) {
    const auto src = static_cast<uint32_t>(it.sourceIndex());
    const auto dst = static_cast<uint32_t>(it.destinationIndex());
    for (int32_t k = 0; k < it.newLength(); ++k) {
      if (it.hasChange()) {
        out.from_begin[dst + k] = src;
        out.from_end[dst + k] = src + static_cast<uint32_t>(it.oldLength());
      } else {
        out.from_begin[dst + k] = src + static_cast<uint32_t>(k);
        out.from_end[dst + k] = src + static_cast<uint32_t>(k) + 1;
      }
    }
  }
  return out;
}

NormalizedText compose_alignment(const NormalizedText& inner, NormalizedText outer) {
  if (inner.identity()) return outer;
  if (outer.identity()) {
    outer.from_begin = inner.from_begin;
    outer.from_end = inner.from_end;
    return outer;
  }
  for (size_t i = 0; i < outer.text.size(); ++i) {
    const uint32_t b = outer.from_begin[i], e = outer.from_end[i];
    outer.from_begin[i] = b < inner.from_begin.size() ? inner.from_begin[b] : inner.from_end.back();
    outer.from_end[i] = e > b ? inner.from_end[e - 1] : outer.from_begin[i];
  }
  return outer;
}

}  // namespace loom::data
