#include "loom/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "loom/core/error.h"

namespace loom::train {

namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

// Protobuf wire encoding helpers.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire_type) { put_varint(out, (static_cast<uint64_t>(field) << 3) | wire_type); }
void put_double(std::string& out, int field, double v) {
  put_key(out, field, 1);
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}
void put_float(std::string& out, int field, float v) {
  put_key(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}
void put_int64(std::string& out, int field, int64_t v) {
  put_key(out, field, 0);
  put_varint(out, static_cast<uint64_t>(v));
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  uint32_t crc = 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  LOOM_CHECK(!ec, IOError, "cannot create the TensorBoard directory '", dir, "': ", ec.message(),
             " (set monitor.tensorboard.output_dir to a writable path)");
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(seconds) + "." + host + ".loom")).string();
  out_.open(path_, std::ios::binary | std::ios::app);
  LOOM_CHECK(out_.good(), IOError, "cannot open TensorBoard event file '", path_, "' for writing");
  std::string event;
  put_double(event, 1, wall_time());
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (out_.is_open()) out_.flush();
}

void TensorBoardWriter::write_record(const std::string& payload) {
  char header[12];
  const uint64_t len = payload.size();
  std::memcpy(header, &len, 8);
  const uint32_t len_crc = masked_crc32c(header, 8);
  std::memcpy(header + 8, &len_crc, 4);
  const uint32_t data_crc = masked_crc32c(payload.data(), payload.size());
  out_.write(header, 12);
  out_.write(payload.data(), static_cast<std::streamsize>(payload.size()));
  out_.write(reinterpret_cast<const char*>(&data_crc), 4);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  std::string summary_value;
  put_bytes(summary_value, 1, tag);                       // Summary.Value.tag
  put_float(summary_value, 2, static_cast<float>(value));  // Summary.Value.simple_value
  std::string summary;
  put_bytes(summary, 1, summary_value);                   // Summary.value (repeated)
  std::string event;
  put_double(event, 1, wall_time());                      // Event.wall_time
  put_int64(event, 2, step);                              // Event.step
  put_bytes(event, 5, summary);                           // Event.summary
  write_record(event);
}

void TensorBoardWriter::add_text(const std::string& tag, const std::string& text, int64_t step) {
  // What tf.summary.text writes: a scalar DT_STRING tensor with the text plugin's metadata.
  std::string plugin;
  put_bytes(plugin, 1, "text");                          // PluginData.plugin_name
  std::string metadata;
  put_bytes(metadata, 1, plugin);                        // SummaryMetadata.plugin_data
  std::string tensor;
  put_int64(tensor, 1, 7);                               // TensorProto.dtype = DT_STRING
  put_bytes(tensor, 2, "");                              // TensorProto.tensor_shape: a scalar
  put_bytes(tensor, 8, text);                            // TensorProto.string_val
  std::string summary_value;
  put_bytes(summary_value, 1, tag);                      // Summary.Value.tag
  put_bytes(summary_value, 8, tensor);                   // Summary.Value.tensor
  put_bytes(summary_value, 9, metadata);                 // Summary.Value.metadata
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event;
  put_double(event, 1, wall_time());
  put_int64(event, 2, step);
  put_bytes(event, 5, summary);
  write_record(event);
}

void TensorBoardWriter::flush() {
  out_.flush();
  LOOM_CHECK(out_.good(), IOError, "writing TensorBoard events to '", path_, "' failed (disk full?)");
}

}  // namespace loom::train
