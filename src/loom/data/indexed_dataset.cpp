#include "loom/data/indexed_dataset.h"

#include <algorithm>
#include <filesystem>

#include "loom/core/error.h"
#include "loom/core/regular_file.h"

namespace loom::data {

std::string index_file_path(const std::string& prefix) { return prefix + ".idx"; }
std::string data_file_path(const std::string& prefix) { return prefix + ".bin"; }

bool indexed_dataset_exists(const std::string& prefix) {
  std::error_code ec;
  return std::filesystem::is_regular_file(index_file_path(prefix), ec) &&
         std::filesystem::is_regular_file(data_file_path(prefix), ec);
}

IndexedDataset::IndexedDataset(const std::string& path_prefix) : prefix_(path_prefix) {
  const std::string idx_path = index_file_path(prefix_);
  const std::string bin_path = data_file_path(prefix_);
  // A pipe or device in place of the files would block or stream forever: say what it is.
  const std::string idx_kind = non_regular_kind(idx_path), bin_kind = non_regular_kind(bin_path);
  LOOM_CHECK(idx_kind != "missing", DataError, "indexed dataset '", prefix_, "': ", idx_path,
             " does not exist (data_path entries are prefixes without .bin/.idx; make the files with `loom preprocess`)");
  LOOM_CHECK(idx_kind.empty(), DataError, "indexed dataset '", prefix_, "': ", idx_path, " is ", idx_kind,
             ", not a regular file; data_path must name the .idx/.bin files `loom preprocess` wrote");
  LOOM_CHECK(bin_kind != "missing", DataError, "indexed dataset '", prefix_, "': ", bin_path,
             " does not exist (the .bin must sit next to the .idx)");
  LOOM_CHECK(bin_kind.empty(), DataError, "indexed dataset '", prefix_, "': ", bin_path, " is ", bin_kind,
             ", not a regular file; data_path must name the .idx/.bin files `loom preprocess` wrote");
  idx_ = MappedFile(idx_path);
  bin_ = MappedFile(bin_path);
  validate();
}

void IndexedDataset::validate() {
  const std::string& path = idx_.path();
  const unsigned char* p = idx_.data();
  const int64_t size = static_cast<int64_t>(idx_.size());
  LOOM_CHECK(size >= kIndexHeaderBytes, DataError, path, ": truncated header at byte offset ", size,
             ": a Megatron .idx needs at least ", kIndexHeaderBytes,
             " header bytes (re-create the file with `loom preprocess`)");
  LOOM_CHECK(std::memcmp(p, kIndexMagic, sizeof(kIndexMagic)) == 0, DataError, path,
             ": bad magic at byte offset 0: expected \"MMIDIDX\\x00\\x00\"; this is not a Megatron "
             "indexed-dataset .idx file");
  const uint64_t version = load<uint64_t>(p + 9);
  LOOM_CHECK(version == kIndexVersion, DataError, path, ": unsupported version ", version,
             " at byte offset 9 (only version 1 exists)");
  const uint8_t code = p[17];
  LOOM_CHECK(is_valid_token_dtype_code(code), DataError, path, ": invalid dtype code ",
             static_cast<int>(code), " at byte offset 17 (valid codes are 1..8: uint8, int8, int16, "
             "int32, int64, float64, float32, uint16)");
  dtype_ = static_cast<TokenDType>(code);
  const uint64_t n = load<uint64_t>(p + 18);
  const uint64_t d = load<uint64_t>(p + 26);
  // Guard the size arithmetic below against absurd counts from a corrupt header.
  LOOM_CHECK(n <= static_cast<uint64_t>(size) && d <= static_cast<uint64_t>(size), DataError, path,
             ": sequence count ", n, " (byte offset 18) or document count ", d,
             " (byte offset 26) is larger than the file (", size, " bytes): the file is corrupt");
  num_sequences_ = static_cast<int64_t>(n);
  num_document_indices_ = static_cast<int64_t>(d);
  LOOM_CHECK(num_document_indices_ >= 1, DataError, path,
             ": document count 0 at byte offset 26; the document index always holds at least the "
             "leading 0");
  const int64_t lengths_at = kIndexHeaderBytes;
  const int64_t pointers_at = lengths_at + 4 * num_sequences_;
  const int64_t documents_at = pointers_at + 8 * num_sequences_;
  const int64_t end = documents_at + 8 * num_document_indices_;
  LOOM_CHECK(size >= end, DataError, path, ": truncated at byte offset ", size, ": ", num_sequences_,
             " sequences and ", num_document_indices_, " document boundaries need ", end,
             " bytes (the file was cut short; re-create it)");
  LOOM_CHECK(size == end || size == end + num_sequences_, DataError, path, ": ", size - end,
             " unexpected trailing bytes after byte offset ", end, " (expected none, or ",
             num_sequences_, " sequence-mode bytes)");
  lengths_ = p + lengths_at;
  pointers_ = p + pointers_at;
  documents_ = p + documents_at;
  has_modes_ = size == end + num_sequences_ && num_sequences_ > 0;
  modes_ = has_modes_ ? p + end : nullptr;

  const int64_t item = static_cast<int64_t>(token_dtype_size(dtype_));
  const int64_t bin_size = static_cast<int64_t>(bin_.size());
  int64_t tokens = 0;
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int64_t len = sequence_length(i);
    const int64_t ptr = sequence_pointer(i);
    LOOM_CHECK(len >= 0, DataError, path, ": negative sequence length ", len, " at byte offset ",
               lengths_at + 4 * i, " (sequence ", i, ")");
    LOOM_CHECK(ptr >= 0 && ptr + len * item <= bin_size, DataError, path, ": sequence ", i,
               " pointer ", ptr, " (byte offset ", pointers_at + 8 * i, ") with length ", len,
               " points past the end of ", bin_.path(), " (", bin_size,
               " bytes): the .bin and .idx do not belong together or the .bin is truncated");
    tokens += len;
  }
  num_tokens_ = tokens;
  int64_t previous = 0;
  for (int64_t j = 0; j < num_document_indices_; ++j) {
    const int64_t v = document_index(j);
    const int64_t at = documents_at + 8 * j;
    if (j == 0) {
      LOOM_CHECK(v == 0, DataError, path, ": document index starts with ", v, " at byte offset ", at,
                 " (must be 0)");
    }
    LOOM_CHECK(v >= previous && v <= num_sequences_, DataError, path, ": document boundary ", v,
               " at byte offset ", at, " is out of order or beyond the ", num_sequences_,
               " sequences");
    previous = v;
  }
  LOOM_CHECK(previous == num_sequences_, DataError, path, ": last document boundary is ", previous,
             " at byte offset ", end - 8, " but there are ", num_sequences_,
             " sequences (the document index must end with the sequence count)");
}

std::vector<int32_t> IndexedDataset::sequence_lengths() const {
  std::vector<int32_t> out(static_cast<size_t>(num_sequences_));
  if (!out.empty()) std::memcpy(out.data(), lengths_, out.size() * 4);
  return out;
}

std::vector<int64_t> IndexedDataset::sequence_pointers() const {
  std::vector<int64_t> out(static_cast<size_t>(num_sequences_));
  if (!out.empty()) std::memcpy(out.data(), pointers_, out.size() * 8);
  return out;
}

std::vector<int64_t> IndexedDataset::document_indices() const {
  std::vector<int64_t> out(static_cast<size_t>(num_document_indices_));
  std::memcpy(out.data(), documents_, out.size() * 8);
  return out;
}

void IndexedDataset::read(int64_t index, int64_t offset, int64_t length, int64_t* out) const {
  LOOM_CHECK(index >= 0 && index < num_sequences_, ValueError, prefix_, ": sequence ", index,
             " out of range [0, ", num_sequences_, ")");
  const int64_t len = sequence_length(index);
  LOOM_CHECK(offset >= 0 && length >= 0 && offset + length <= len, ValueError, prefix_,
             ": tokens [", offset, ", ", offset + length, ") leave sequence ", index, " of length ",
             len);
  const int64_t item = static_cast<int64_t>(token_dtype_size(dtype_));
  if (length > 0) load_tokens(dtype_, bin_.data() + sequence_pointer(index) + offset * item, length, out);
}

std::vector<int64_t> IndexedDataset::get(int64_t index, int64_t offset, int64_t length) const {
  LOOM_CHECK(index >= 0 && index < num_sequences_, ValueError, prefix_, ": sequence ", index,
             " out of range [0, ", num_sequences_, ")");
  if (length < 0) length = sequence_length(index) - offset;
  std::vector<int64_t> out(static_cast<size_t>(std::max<int64_t>(length, 0)));
  read(index, offset, length, out.data());
  return out;
}

}  // namespace loom::data
