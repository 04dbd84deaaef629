// The .npy format (version 1.0 written, 1.0-3.0 read) for the index caches, so a cache can be
// inspected with numpy.load exactly like Megatron's. Only little-endian, C-order integer arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::data {

struct NpyArray {
  std::string descr;            // "<i2", "<i4", "<i8", "<u4", ...
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
  int64_t numel() const;
};

// Serialises an array (header + raw bytes) into a string ready to be written.
std::string encode_npy(const std::string& descr, const std::vector<int64_t>& shape,
                       const void* data, size_t bytes);
// Parses a .npy file; throws DataError naming the path for anything unexpected.
NpyArray read_npy(const std::string& path);
// Elements of an integer array widened to int64 (descr must be a little-endian integer type).
std::vector<int64_t> npy_to_int64(const NpyArray& array, const std::string& path);

}  // namespace loom::data
