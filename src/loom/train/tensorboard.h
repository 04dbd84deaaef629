// TensorBoard event files written by hand: TFRecord framing (u64 length, masked CRC32C of the
// length, payload, masked CRC32C of the payload) around protobuf-encoded Event messages with
// scalar Summary values. No protobuf library needed; TensorBoard and tf.data read the files.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace loom::train {

// CRC32C (Castagnoli) and the TFRecord mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates `dir` and the file events.out.tfevents.<unix time>.<host>.loom; writes the version
  // record ("brain.Event:2").
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  // A text summary (TensorBoard's Text tab), as tf.summary.text writes it.
  void add_text(const std::string& tag, const std::string& text, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  std::string path_;
  std::ofstream out_;
};

}  // namespace loom::train
