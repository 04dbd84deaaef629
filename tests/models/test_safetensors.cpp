// Safetensors reader/writer: round trip of every dtype and the metadata map, views of the
// mapping, and the validation errors (truncation, overlap, gaps, bad dtype, bad header length),
// each naming the file and the offset. Format: Hugging Face's safetensors.
#include <gtest/gtest.h>

#include <cstring>

#include "loom/models/safetensors.h"
#include "testing/temp_dir.h"

using namespace loom;
using namespace loom::models;
using loom::testing::TempDir;

namespace {

// A hand-made file: header JSON text + raw data bytes.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "no CheckpointError";
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDTypeAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("a.safetensors");
  std::vector<std::pair<std::string, Tensor>> ts;
  ts.emplace_back("w.f32", Tensor::from_vector(std::vector<float>{1.5f, -2.f, 3.f, 4.25f}, {2, 2}));
  ts.emplace_back("w.bf16", Tensor::from_vector(std::vector<float>{1.f, 2.f, 3.f}, {3}, DType::bf16));
  ts.emplace_back("w.f16", Tensor::from_vector(std::vector<float>{0.5f}, {1}, DType::f16));
  ts.emplace_back("w.f64", Tensor::from_vector(std::vector<double>{3.25, 1e-300}, {2}));
  ts.emplace_back("i.i32", Tensor::from_vector(std::vector<int32_t>{7, -8}, {1, 2}));
  ts.emplace_back("i.i64", Tensor::from_vector(std::vector<int64_t>{1ll << 40}, {1}));
  ts.emplace_back("u.u8", Tensor::full({3}, 200, DType::u8));
  ts.emplace_back("b.bool", Tensor::full({2}, 1, DType::boolean));
  ts.emplace_back("scalar", Tensor::scalar(9.0));
  ts.emplace_back("empty", Tensor::empty({0, 4}));
  // A transposed (non-contiguous) view is stored in its logical order.
  ts.emplace_back("t", Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1));
  write_safetensors(path, ts, {{"format", "pt"}, {"step", "12"}});

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("step"), "12");
  ASSERT_EQ(f.entries().size(), ts.size());
  for (const auto& [name, t] : ts) {
    Tensor r = f.tensor(name);
    EXPECT_EQ(r.dtype(), t.dtype()) << name;
    EXPECT_EQ(r.shape(), t.shape()) << name;
    EXPECT_EQ(r.to_double_vector(), t.to_double_vector()) << name;
  }
  EXPECT_EQ(f.entry("t").shape, Shape({3, 2}));
  EXPECT_EQ(f.tensor("t").to_float_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  // The data section starts 8-byte aligned: the f64 tensor is a view of the mapping.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.tensor("w.f64").raw_data()) % 8, 0u);
}

TEST(Safetensors, ViewsOutliveTheFileObjectAndWritesStayPrivate) {
  TempDir dir;
  const std::string path = dir.file("v.safetensors");
  write_safetensors(path, std::map<std::string, Tensor>{{"x", Tensor::full({4}, 2.0)}});
  Tensor view;
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    view = f.tensor("x");
  }
  view.fill_(5.0);  // private mapping: the file keeps its 2s
  EXPECT_EQ(view.to_float_vector(), (std::vector<float>{5, 5, 5, 5}));
  EXPECT_EQ(read_safetensors(path).at("x").to_float_vector(), (std::vector<float>{2, 2, 2, 2}));
}

TEST(Safetensors, ReadsAFileWrittenByAnotherWriter) {
  // Unpadded header (the data starts unaligned): tensors are copied, values still right.
  TempDir dir;
  float v[2] = {1.25f, -3.5f};
  std::string data(reinterpret_cast<char*>(v), 8);
  loom::testing::write_file(dir.file("h.safetensors"),
                            raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data));
  auto t = read_safetensors(dir.file("h.safetensors"));
  EXPECT_EQ(t.at("a").to_float_vector(), (std::vector<float>{1.25f, -3.5f}));
}

TEST(Safetensors, TruncationNamesTheFileAndOffset) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  loom::testing::write_file(path, raw_file(header, std::string(10, '\0')));
  std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data offset 16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("file offset " + std::to_string(8 + header.size() + 16)), std::string::npos) << msg;

  loom::testing::write_file(path, std::string(5, '\0'));
  msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find("shorter than the 8-byte header length"), std::string::npos) << msg;

  loom::testing::write_file(path, raw_file(header, "").substr(0, 20));
  msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find("runs past the end"), std::string::npos) << msg;
}

TEST(Safetensors, OverlapGapAndSizeMismatchAreRejected) {
  TempDir dir;
  const std::string path = dir.file("o.safetensors");
  loom::testing::write_file(path, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                           std::string(12, '\0')));
  std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find("overlaps \"a\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("data offset 4"), std::string::npos) << msg;

  loom::testing::write_file(path, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                           std::string(8, '\0')));
  msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find("without gaps"), std::string::npos) << msg;

  loom::testing::write_file(path, raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                                           std::string(8, '\0')));
  msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find("needs 12"), std::string::npos) << msg;

  loom::testing::write_file(path, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                           std::string(8, '\0')));
  msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find("belong to no tensor"), std::string::npos) << msg;
}

TEST(Safetensors, HeaderProblemsAreRejected) {
  TempDir dir;
  const std::string path = dir.file("h.safetensors");
  loom::testing::write_file(path, raw_file(R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})",
                                           std::string(1, '\0')));
  std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find("dtype \"F8_E4M3\" is not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor \"a\""), std::string::npos) << msg;

  loom::testing::write_file(path, raw_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                                           std::string(4, '\0')));
  msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find("non-negative integers"), std::string::npos) << msg;

  loom::testing::write_file(path, raw_file(R"({"a": [1, 2)", ""));
  msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find("header JSON is invalid"), std::string::npos) << msg;

  loom::testing::write_file(path, raw_file(R"({"__metadata__":{"k":3}})", ""));
  msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find("__metadata__[\"k\"] must be a string"), std::string::npos) << msg;

  std::string huge(8, '\xff');
  loom::testing::write_file(path, huge + "{}");
  msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find("exceeds the 100 MB limit"), std::string::npos) << msg;
}

TEST(Safetensors, WriteIsAtomicAndLeavesNoTempFile) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  write_safetensors(path, std::map<std::string, Tensor>{{"x", Tensor::full({2}, 1.0)}});
  write_safetensors(path, std::map<std::string, Tensor>{{"y", Tensor::full({3}, 2.0)}});
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  auto t = read_safetensors(path);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.at("y").numel(), 3);
  EXPECT_THROW(write_safetensors(dir.file("no/such/dir/x.safetensors"),
                                 std::map<std::string, Tensor>{{"x", Tensor::full({1}, 1.0)}}),
               IOError);
}
