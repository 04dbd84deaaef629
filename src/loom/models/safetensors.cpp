#include "loom/models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "loom/core/regular_file.h"
#include "loom/core/text.h"

namespace loom::models {

namespace {

// The reference implementation refuses headers over 100 MB; a larger length is a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {{DType::f32, "F32"}, {DType::bf16, "BF16"}, {DType::f16, "F16"},
                                 {DType::f64, "F64"}, {DType::i32, "I32"},   {DType::i64, "I64"},
                                 {DType::u8, "U8"},   {DType::boolean, "BOOL"}};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

DType safetensors_dtype(const std::string& name, const std::string& where) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  LOOM_THROW(CheckpointError, where, ": dtype \"", name,
             "\" is not supported; Loom reads F32, BF16, F16, F64, I32, I64, U8 and BOOL "
             "(convert FP8/other weights to BF16 or F32 first)");
}

const char* safetensors_dtype_name(DType dtype) {
  for (const auto& d : kDTypes)
    if (dtype == d.dtype) return d.name;
  LOOM_THROW(DTypeError, "safetensors: cannot store dtype ", dtype_name(dtype));
}

struct SafetensorsFile::Mapping {
  void* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base) munmap(base, size);
  }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  // Before open: opening a FIFO for reading blocks until a writer comes.
  require_regular_file(path, "safetensors file", "checkpoint and Hugging Face weight files must be regular files");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_CHECK(fd >= 0, IOError, "cannot open safetensors file ", path, ": ", errno_text());
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    LOOM_THROW(IOError, "cannot stat ", path, ": ", errno_text());
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    LOOM_THROW(CheckpointError, path, ": file is ", size,
               " bytes, shorter than the 8-byte header length at offset 0 (truncated or not a "
               "safetensors file)");
  }
  auto mapping = std::make_shared<Mapping>();
  // Private writable mapping: callers may modify tensors in place; the file never changes.
  mapping->base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  LOOM_CHECK(mapping->base != MAP_FAILED, IOError, "cannot map ", path, ": ", errno_text());
  mapping->size = size;
  file.mapping_ = mapping;
  const auto* bytes = static_cast<const unsigned char*>(mapping->base);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  LOOM_CHECK(header_len <= kMaxHeaderBytes, CheckpointError, path, ": header length ", header_len,
             " at offset 0 exceeds the 100 MB limit (corrupt file or not a safetensors file)");
  LOOM_CHECK(header_len <= size - 8, CheckpointError, path, ": header length ", header_len,
             " at offset 0 runs past the end of the ", size, "-byte file (truncated)");
  file.data_start_ = 8 + header_len;
  const uint64_t data_size = size - file.data_start_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const nlohmann::json::parse_error& e) {
    LOOM_THROW(CheckpointError, path, ": header JSON is invalid near offset ", 8 + e.byte, ": ",
               json_error_text(e.what()));
  } catch (const nlohmann::json::exception& e) {  // e.g. a number beyond double
    LOOM_THROW(CheckpointError, path, ": header JSON at offset 8 is invalid: ", json_error_text(e.what()));
  }
  LOOM_CHECK(header.is_object(), CheckpointError, path,
             ": header at offset 8 must be a JSON object of tensors");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    const std::string where = path + ": tensor \"" + name + "\"";
    if (name == "__metadata__") {
      LOOM_CHECK(v.is_object(), CheckpointError, path, ": __metadata__ must be a string map");
      for (auto m = v.begin(); m != v.end(); ++m) {
        LOOM_CHECK(m.value().is_string(), CheckpointError, path, ": __metadata__[\"", m.key(),
                   "\"] must be a string, got ", m.value().dump());
        file.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    LOOM_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") &&
                   v.contains("data_offsets"),
               CheckpointError, where, " needs dtype, shape and data_offsets, got ", v.dump());
    for (auto f = v.begin(); f != v.end(); ++f)
      LOOM_CHECK(f.key() == "dtype" || f.key() == "shape" || f.key() == "data_offsets",
                 CheckpointError, where, " has an unknown field \"", f.key(), "\"");
    LOOM_CHECK(v["dtype"].is_string(), CheckpointError, where, ": dtype must be a string");
    SafetensorsEntry e;
    e.name = name;
    e.dtype = safetensors_dtype(v["dtype"].get<std::string>(), where);
    const auto& shape = v["shape"];
    LOOM_CHECK(shape.is_array() && shape.size() <= static_cast<size_t>(Shape::kMaxDims),
               CheckpointError, where, ": shape must be a list of at most ", Shape::kMaxDims,
               " sizes, got ", shape.dump());
    uint64_t numel = 1;
    for (const auto& d : shape) {
      LOOM_CHECK(d.is_number_unsigned(), CheckpointError, where,
                 ": shape entries must be non-negative integers, got ", shape.dump());
      const uint64_t n = d.get<uint64_t>();
      LOOM_CHECK(n == 0 || numel <= std::numeric_limits<int64_t>::max() / n, CheckpointError,
                 where, ": shape ", shape.dump(), " overflows");
      numel *= n;
      e.shape.push_back(static_cast<int64_t>(n));
    }
    const auto& off = v["data_offsets"];
    LOOM_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                   off[1].is_number_unsigned(),
               CheckpointError, where, ": data_offsets must be [begin, end], got ", off.dump());
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    LOOM_CHECK(e.begin <= e.end, CheckpointError, where, ": data_offsets ", off.dump(),
               " end before they begin");
    const uint64_t want = numel * dtype_size(e.dtype);
    LOOM_CHECK(e.end - e.begin == want, CheckpointError, where, ": data_offsets ", off.dump(),
               " hold ", e.end - e.begin, " bytes but ", v["dtype"].get<std::string>(), " ",
               e.shape.str(), " needs ", want);
    file.entries_.push_back(std::move(e));
  }

  std::sort(file.entries_.begin(), file.entries_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t expected = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const auto& e : file.entries_) {
    if (e.begin < expected)
      LOOM_THROW(CheckpointError, path, ": tensor \"", e.name, "\" at data offset ", e.begin,
                 " (file offset ", file.data_start_ + e.begin, ") overlaps \"", previous->name,
                 "\" [", previous->begin, ", ", previous->end, ")");
    LOOM_CHECK(e.begin == expected, CheckpointError, path, ": tensor \"", e.name,
               "\" starts at data offset ", e.begin, " (file offset ", file.data_start_ + e.begin,
               ") but the previous tensor ends at ", expected,
               "; tensor data must be contiguous without gaps");
    if (e.end > data_size)
      LOOM_THROW(CheckpointError, path, ": tensor \"", e.name, "\" ends at data offset ", e.end,
                 " (file offset ", file.data_start_ + e.end, ") but the file holds only ",
                 data_size, " data bytes (", size, " in all): the file is truncated");
    expected = e.end;
    if (e.end > e.begin) previous = &e;
  }
  LOOM_CHECK(expected == data_size, CheckpointError, path, ": ", data_size - expected,
             " bytes after the last tensor (data offset ", expected, ", file offset ",
             file.data_start_ + expected, ") belong to no tensor; the header is incomplete");
  for (size_t i = 0; i < file.entries_.size(); ++i) file.index_[file.entries_[i].name] = i;
  return file;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  LOOM_CHECK(it != index_.end(), CheckpointError, path_, ": no tensor named \"", name, "\"");
  return entries_[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name, bool copy) const {
  const SafetensorsEntry& e = entry(name);
  auto* data = static_cast<unsigned char*>(mapping_->base) + data_start_ + e.begin;
  const bool aligned = reinterpret_cast<uintptr_t>(data) % dtype_size(e.dtype) == 0;
  if (copy || !aligned || e.end == e.begin) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.raw_data(), data, e.end - e.begin);
    return t;
  }
  std::shared_ptr<Mapping> keep = mapping_;
  return Tensor::from_blob(data, e.shape, e.dtype, [keep](void*) mutable { keep.reset(); });
}

std::map<std::string, Tensor> SafetensorsFile::tensors(bool copy) const {
  std::map<std::string, Tensor> out;
  for (const auto& e : entries_) out[e.name] = tensor(e.name, copy);
  return out;
}

std::map<std::string, Tensor> read_safetensors(const std::string& path,
                                               std::map<std::string, std::string>* metadata,
                                               bool copy) {
  SafetensorsFile file = SafetensorsFile::open(path);
  if (metadata) *metadata = file.metadata();
  return file.tensors(copy);
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::vector<Tensor> contiguous;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    LOOM_CHECK(!name.empty() && name != "__metadata__", ValueError, "write_safetensors ", path,
               ": invalid tensor name \"", name, "\"");
    LOOM_CHECK(!header.contains(name), ValueError, "write_safetensors ", path, ": tensor \"",
               name, "\" given twice");
    LOOM_CHECK(t.defined() && !t.is_meta(), ValueError, "write_safetensors ", path, ": tensor \"",
               name, "\" has no data (undefined or on the meta device)");
    Tensor c = t.contiguous();
    nlohmann::ordered_json entry;
    entry["dtype"] = safetensors_dtype_name(c.dtype());
    entry["shape"] = c.shape().to_vector();
    entry["data_offsets"] = {offset, offset + c.nbytes()};
    offset += c.nbytes();
    header[name] = entry;
    contiguous.push_back(c);
  }
  std::string json = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned (as the reference writer does).
  while ((8 + json.size()) % 8 != 0) json.push_back(' ');

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  LOOM_CHECK(f != nullptr, IOError, "cannot create ", tmp, ": ", errno_text());
  auto fail = [&](const char* what) {
    const std::string reason = errno_text();
    std::fclose(f);
    std::remove(tmp.c_str());
    LOOM_THROW(IOError, "cannot ", what, " ", tmp, " (for ", path, "): ", reason);
  };
  unsigned char len[8];
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  if (std::fwrite(len, 1, 8, f) != 8 || std::fwrite(json.data(), 1, json.size(), f) != json.size())
    fail("write");
  for (const Tensor& c : contiguous)
    if (c.nbytes() > 0 && std::fwrite(c.raw_data(), 1, c.nbytes(), f) != c.nbytes()) fail("write");
  if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) fail("flush");
  if (std::fclose(f) != 0) {
    const std::string reason = errno_text();
    std::remove(tmp.c_str());
    LOOM_THROW(IOError, "cannot close ", tmp, ": ", reason);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = errno_text();
    std::remove(tmp.c_str());
    LOOM_THROW(IOError, "cannot rename ", tmp, " to ", path, ": ", reason);
  }
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> ordered(tensors.begin(), tensors.end());
  write_safetensors(path, ordered, metadata);
}

}  // namespace loom::models
