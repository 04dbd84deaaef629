// Reader for Megatron indexed datasets: `{prefix}.idx` (header + per-sequence lengths/pointers +
// document boundaries) and `{prefix}.bin` (raw tokens), byte layout of Megatron's
// _IndexWriter/_IndexReader. Both files are memory-mapped; every structural problem is found at
// open time and reported as a DataError naming the file and the byte offset, so a corrupt file
// never turns into a crash mid-training.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "loom/data/mapped_file.h"
#include "loom/data/token_dtype.h"

namespace loom::data {

// "MMIDIDX\0\0", then uint64 version 1.
inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIndexVersion = 1;
inline constexpr int64_t kIndexHeaderBytes = 34;

std::string index_file_path(const std::string& prefix);  // prefix + ".idx"
std::string data_file_path(const std::string& prefix);   // prefix + ".bin"
// True when both files of the prefix exist.
bool indexed_dataset_exists(const std::string& prefix);

class IndexedDataset {
 public:
  // Opens and validates `{prefix}.idx` and `{prefix}.bin`.
  explicit IndexedDataset(const std::string& path_prefix);

  const std::string& path_prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  // Number of documents (the .idx stores one more boundary than this).
  int64_t num_documents() const { return num_document_indices_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  bool has_sequence_modes() const { return has_modes_; }

  int32_t sequence_length(int64_t i) const { return load<int32_t>(lengths_ + 4 * i); }
  int64_t sequence_pointer(int64_t i) const { return load<int64_t>(pointers_ + 8 * i); }
  // Boundary j of the document index: documents are sequences [document_index(j), document_index(j+1)).
  int64_t document_index(int64_t j) const { return load<int64_t>(documents_ + 8 * j); }
  int8_t sequence_mode(int64_t i) const { return static_cast<int8_t>(modes_[i]); }

  std::vector<int32_t> sequence_lengths() const;
  std::vector<int64_t> sequence_pointers() const;
  std::vector<int64_t> document_indices() const;

  // `length` tokens of sequence `index` from token `offset` (Megatron's get(idx, offset, length)),
  // widened to int64. Throws ValueError when the range leaves the sequence.
  void read(int64_t index, int64_t offset, int64_t length, int64_t* out) const;
  // length < 0 means "to the end of the sequence".
  std::vector<int64_t> get(int64_t index, int64_t offset = 0, int64_t length = -1) const;
  // Raw bytes of the .bin (for add_index copies).
  const MappedFile& bin() const { return bin_; }
  const MappedFile& idx() const { return idx_; }

 private:
  template <typename T>
  static T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));  // the arrays start at offset 34: not aligned for int32/int64
    return v;
  }
  void validate();

  std::string prefix_;
  MappedFile idx_;
  MappedFile bin_;
  TokenDType dtype_ = TokenDType::u16;
  int64_t num_sequences_ = 0;
  int64_t num_document_indices_ = 0;
  int64_t num_tokens_ = 0;
  bool has_modes_ = false;
  const unsigned char* lengths_ = nullptr;
  const unsigned char* pointers_ = nullptr;
  const unsigned char* documents_ = nullptr;
  const unsigned char* modes_ = nullptr;
};

}  // namespace loom::data
