#include "loom/data/indexed_dataset_builder.h"

#include <cerrno>
#include <cstring>

#include "loom/core/error.h"
#include "loom/data/indexed_dataset.h"

namespace loom::data {

namespace {

void append_le(std::vector<unsigned char>& out, const void* value, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(value);
  out.insert(out.end(), p, p + bytes);  // x86-64 is little-endian, as the format requires
}

}  // namespace

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& bin_path, TokenDType dtype)
    : bin_path_(bin_path), dtype_(dtype) {
  bin_ = std::fopen(bin_path.c_str(), "wb");
  LOOM_CHECK(bin_ != nullptr, IOError, "cannot create ", bin_path, ": ", std::strerror(errno));
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (bin_ != nullptr) std::fclose(bin_);
}

void IndexedDatasetBuilder::write_bytes(const void* data, size_t bytes) {
  LOOM_CHECK(bin_ != nullptr, ValueError, bin_path_, ": the builder was already finalized");
  if (bytes == 0) return;
  LOOM_CHECK(std::fwrite(data, 1, bytes, bin_) == bytes, IOError, "cannot write ", bin_path_, ": ",
             std::strerror(errno), " (disk full?)");
}

void IndexedDatasetBuilder::write_tokens(std::span<const int64_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    LOOM_CHECK(token_fits(dtype_, tokens[i]), DataError, bin_path_, ": token id ", tokens[i],
               " does not fit the dataset dtype ", token_dtype_name(dtype_),
               " (use a wider dtype, e.g. int32 for vocabularies of 65500 or more)");
  }
  const size_t item = token_dtype_size(dtype_);
  scratch_.resize(tokens.size() * item);
  store_tokens(dtype_, tokens.data(), static_cast<int64_t>(tokens.size()), scratch_.data());
  write_bytes(scratch_.data(), scratch_.size());
}

void IndexedDatasetBuilder::add_item(std::span<const int64_t> tokens) {
  LOOM_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX), DataError, bin_path_, ": a sequence of ",
             tokens.size(), " tokens exceeds the int32 length field of the .idx format");
  write_tokens(tokens);
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
}

void IndexedDatasetBuilder::end_document() {
  document_indices_.push_back(static_cast<int64_t>(lengths_.size()));
}

void IndexedDatasetBuilder::add_document(std::span<const int64_t> tokens,
                                         std::span<const int32_t> lengths) {
  int64_t total = 0;
  for (int32_t len : lengths) {
    LOOM_CHECK(len >= 0, ValueError, bin_path_, ": negative sequence length ", len);
    total += len;
  }
  LOOM_CHECK(total == static_cast<int64_t>(tokens.size()), ValueError, bin_path_,
             ": add_document got ", tokens.size(), " tokens but the sequence lengths sum to ", total);
  write_tokens(tokens);
  lengths_.insert(lengths_.end(), lengths.begin(), lengths.end());
  end_document();
}

void IndexedDatasetBuilder::add_index(const std::string& path_prefix) {
  IndexedDataset other(path_prefix);
  LOOM_CHECK(other.dtype() == dtype_, DataError, "add_index: ", index_file_path(path_prefix),
             " stores ", token_dtype_name(other.dtype()), " tokens but this dataset stores ",
             token_dtype_name(dtype_), " (merge datasets made with the same tokenizer dtype)");
  const int64_t offset = static_cast<int64_t>(lengths_.size());
  const std::vector<int32_t> lengths = other.sequence_lengths();
  lengths_.insert(lengths_.end(), lengths.begin(), lengths.end());
  const std::vector<int64_t> docs = other.document_indices();
  for (size_t j = 1; j < docs.size(); ++j) document_indices_.push_back(offset + docs[j]);
  write_bytes(other.bin().data(), other.bin().size());
}

void IndexedDatasetBuilder::finalize(const std::string& idx_path) {
  LOOM_CHECK(bin_ != nullptr, ValueError, bin_path_, ": finalize called twice");
  const bool ok = std::fclose(bin_) == 0;
  bin_ = nullptr;
  LOOM_CHECK(ok, IOError, "cannot finish writing ", bin_path_, ": ", std::strerror(errno));
  write_index_file(idx_path, dtype_, lengths_, document_indices_);
}

void write_index_file(const std::string& idx_path, TokenDType dtype,
                      std::span<const int32_t> sequence_lengths,
                      std::span<const int64_t> document_indices) {
  std::vector<unsigned char> out;
  const uint64_t n = sequence_lengths.size();
  const uint64_t d = document_indices.size();
  out.reserve(kIndexHeaderBytes + 12 * n + 8 * d);
  out.insert(out.end(), kIndexMagic, kIndexMagic + sizeof(kIndexMagic));
  append_le(out, &kIndexVersion, 8);
  const uint8_t code = static_cast<uint8_t>(dtype);
  append_le(out, &code, 1);
  append_le(out, &n, 8);
  append_le(out, &d, 8);
  append_le(out, sequence_lengths.data(), 4 * n);
  const int64_t item = static_cast<int64_t>(token_dtype_size(dtype));
  int64_t pointer = 0;
  for (int32_t len : sequence_lengths) {
    append_le(out, &pointer, 8);
    pointer += static_cast<int64_t>(len) * item;
  }
  append_le(out, document_indices.data(), 8 * d);
  std::FILE* f = std::fopen(idx_path.c_str(), "wb");
  LOOM_CHECK(f != nullptr, IOError, "cannot create ", idx_path, ": ", std::strerror(errno));
  const bool wrote = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  const bool closed = std::fclose(f) == 0;
  LOOM_CHECK(wrote && closed, IOError, "cannot write ", idx_path, ": ", std::strerror(errno));
}

}  // namespace loom::data
