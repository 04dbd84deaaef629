// Safetensors files (Hugging Face's format, of HF weights and of Loom checkpoints):
// u64-LE header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [b, e]},
// "__metadata__": {str: str}}, then the raw little-endian tensor bytes.
//
// Reading maps the file (MAP_PRIVATE: tensors may be written to without touching the file) and
// validates the whole header before any tensor is handed out: dtype names, shapes, byte lengths,
// offsets contiguous from 0, in bounds and non-overlapping, header length sane. Problems raise
// CheckpointError naming the file and the byte offset. Writing goes to a temporary file in the
// same directory that is renamed over the target, so readers never see half a file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/tensor.h"

namespace loom::models {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets within the data section (after the header)
  uint64_t end = 0;
};

// "F32" ↔ DType::f32 etc. (F32 BF16 F16 F64 I32 I64 U8 BOOL); CheckpointError otherwise.
DType safetensors_dtype(const std::string& name, const std::string& where);
const char* safetensors_dtype_name(DType dtype);

class SafetensorsFile {
 public:
  // Maps and validates `path`. Throws IOError (cannot open) or CheckpointError (bad content).
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  // In data-offset order.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;

  // The tensor `name`. copy=false: a view of the mapping (the mapping lives as long as any such
  // tensor); unaligned data is always copied. copy=true: a fresh owned tensor.
  Tensor tensor(const std::string& name, bool copy = false) const;
  std::map<std::string, Tensor> tensors(bool copy = false) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a file (views of the mapping unless copy) and, optionally, its metadata.
std::map<std::string, Tensor> read_safetensors(const std::string& path,
                                               std::map<std::string, std::string>* metadata = nullptr,
                                               bool copy = false);

// Writes the tensors in the given order (any dtype of the list above, any layout; stored
// contiguous little-endian) atomically: temp file + fsync + rename. IOError on failure.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace loom::models
