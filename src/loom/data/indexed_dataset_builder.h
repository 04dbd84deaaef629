// Writer for Megatron indexed datasets, byte-exact to Megatron's IndexedDatasetBuilder /
// _IndexWriter (megatron/core/datasets/indexed_dataset.py): tokens stream into `{prefix}.bin` as
// they are added, lengths and document boundaries stay in memory until finalize() writes
// `{prefix}.idx`.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "loom/data/token_dtype.h"

namespace loom::data {

class IndexedDatasetBuilder {
 public:
  // Creates (truncates) `bin_path`.
  IndexedDatasetBuilder(const std::string& bin_path, TokenDType dtype);
  ~IndexedDatasetBuilder();
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  TokenDType dtype() const { return dtype_; }
  // One sequence (Megatron add_item); end_document() closes the current document.
  void add_item(std::span<const int64_t> tokens);
  void end_document();
  // A whole document made of sequences of the given lengths (Megatron add_document); an empty
  // `lengths` adds an empty document.
  void add_document(std::span<const int64_t> tokens, std::span<const int32_t> lengths);
  // Appends every sequence and document of another dataset (same dtype), copying its .bin.
  void add_index(const std::string& path_prefix);
  // Flushes the .bin and writes the .idx.
  void finalize(const std::string& idx_path);

  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(document_indices_.size()) - 1; }

 private:
  void write_tokens(std::span<const int64_t> tokens);
  void write_bytes(const void* data, size_t bytes);

  std::string bin_path_;
  TokenDType dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_indices_{0};
  std::vector<unsigned char> scratch_;
};

// Writes an .idx for the given lengths and document boundaries (pointers are derived from the
// lengths exactly as Megatron does: ptr[0]=0, ptr[i+1]=ptr[i]+len[i]*itemsize).
void write_index_file(const std::string& idx_path, TokenDType dtype,
                      std::span<const int32_t> sequence_lengths,
                      std::span<const int64_t> document_indices);

}  // namespace loom::data
