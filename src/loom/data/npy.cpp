#include "loom/data/npy.h"

#include <cstring>

#include "loom/core/error.h"
#include "loom/data/atomic_file.h"

namespace loom::data {

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string encode_npy(const std::string& descr, const std::vector<int64_t>& shape,
                       const void* data, size_t bytes) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += ",";
    if (i + 1 < shape.size()) dict += " ";
  }
  dict += "), }";
  // numpy pads the header with spaces so the data starts on a 64-byte boundary.
  const size_t preamble = 10;
  size_t total = preamble + dict.size() + 1;
  const size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict.push_back('\n');
  std::string out;
  out.reserve(padded + bytes);
  out.append("\x93NUMPY", 6);
  out.push_back('\x01');
  out.push_back('\x00');
  const uint16_t header_len = static_cast<uint16_t>(dict.size());
  out.push_back(static_cast<char>(header_len & 0xff));
  out.push_back(static_cast<char>(header_len >> 8));
  out += dict;
  out.append(static_cast<const char*>(data), bytes);
  return out;
}

NpyArray read_npy(const std::string& path) {
  const std::string raw = read_whole_file(path);
  LOOM_CHECK(raw.size() >= 10 && std::memcmp(raw.data(), "\x93NUMPY", 6) == 0, DataError, path,
             ": not a .npy file (bad magic at byte offset 0)");
  const int major = static_cast<unsigned char>(raw[6]);
  size_t header_len = 0;
  size_t header_at = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(raw[8]) | static_cast<unsigned char>(raw[9]) << 8;
    header_at = 10;
  } else {
    LOOM_CHECK(raw.size() >= 12, DataError, path, ": truncated .npy header at byte offset ", raw.size());
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(raw[8 + i])) << (8 * i);
    header_at = 12;
  }
  LOOM_CHECK(raw.size() >= header_at + header_len, DataError, path,
             ": truncated .npy header at byte offset ", raw.size());
  const std::string header = raw.substr(header_at, header_len);
  // The header is a Python dict literal; the three keys numpy writes are all we need.
  auto value_after = [&](const std::string& key) -> std::string {
    const auto at = header.find("'" + key + "'");
    LOOM_CHECK(at != std::string::npos, DataError, path, ": .npy header has no ", key);
    const auto colon = header.find(':', at);
    LOOM_CHECK(colon != std::string::npos, DataError, path, ": malformed .npy header");
    const auto begin = header.find_first_not_of(" ", colon + 1);
    LOOM_CHECK(begin != std::string::npos, DataError, path, ": malformed .npy header");
    const char open = header[begin];
    const char close = open == '\'' ? '\'' : open == '(' ? ')' : ',';
    const auto end = header.find(close, begin + 1);
    LOOM_CHECK(end != std::string::npos, DataError, path, ": malformed .npy header");
    return open == '\'' || open == '(' ? header.substr(begin + 1, end - begin - 1) : header.substr(begin, end - begin);
  };
  NpyArray array;
  array.descr = value_after("descr");
  LOOM_CHECK(value_after("fortran_order").find("False") != std::string::npos, DataError, path,
             ": only C-order .npy arrays are supported");
  const std::string dims = value_after("shape");
  for (size_t i = 0; i < dims.size();) {
    if (dims[i] < '0' || dims[i] > '9') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < dims.size() && dims[j] >= '0' && dims[j] <= '9') ++j;
    array.shape.push_back(std::stoll(dims.substr(i, j - i)));
    i = j;
  }
  const size_t data_at = header_at + header_len;
  const std::string& d = array.descr;
  LOOM_CHECK(d.size() >= 3 && (d[0] == '<' || d[0] == '|'), DataError, path, ": unsupported descr '",
             d, "' (little-endian arrays only)");
  const size_t item = static_cast<size_t>(std::stoi(d.substr(2)));
  const size_t expected = static_cast<size_t>(array.numel()) * item;
  LOOM_CHECK(raw.size() - data_at == expected, DataError, path, ": holds ", raw.size() - data_at,
             " data bytes after byte offset ", data_at, " but its shape needs ", expected,
             " (truncated cache file; delete it to rebuild)");
  array.bytes.assign(raw.begin() + static_cast<std::ptrdiff_t>(data_at), raw.end());
  return array;
}

std::vector<int64_t> npy_to_int64(const NpyArray& array, const std::string& path) {
  const std::string kind = array.descr.substr(1);
  const int64_t n = array.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  auto convert = [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, array.bytes.data() + i * sizeof(T), sizeof(T));
      out[static_cast<size_t>(i)] = static_cast<int64_t>(v);
    }
  };
  if (kind == "i2") convert(int16_t{});
  else if (kind == "i4") convert(int32_t{});
  else if (kind == "i8") convert(int64_t{});
  else if (kind == "u2") convert(uint16_t{});
  else if (kind == "u4") convert(uint32_t{});
  else if (kind == "u8") convert(uint64_t{});
  else LOOM_THROW(DataError, path, ": expected an integer array, found descr '", array.descr, "'");
  return out;
}

}  // namespace loom::data
