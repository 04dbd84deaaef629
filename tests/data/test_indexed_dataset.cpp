// Megatron indexed datasets: byte layout, every dtype, add_index, the numpy-written files, and
// the errors for broken files (Megatron's indexed_dataset.py).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "data_test_util.h"
#include "loom/core/error.h"
#include "loom/data/indexed_dataset.h"
#include "loom/data/indexed_dataset_builder.h"

using namespace loom::data;
using namespace loom::data::testing_util;
using loom::testing::TempDir;
using loom::testing::read_file;
using loom::testing::write_file;

namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
std::string le16(uint16_t v) { return std::string{static_cast<char>(v & 0xff), static_cast<char>(v >> 8)}; }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const loom::DataError& e) {
    return e.what();
  }
  return "<no DataError>";
}

}  // namespace

// indexed_dataset.py: header, int32 lengths, int64 pointers, int64 document indices, no padding.
TEST(IndexedDataset, HandBuiltIdxIsByteExact) {
  TempDir dir;
  const std::string prefix = dir.file("hand");
  IndexedDatasetBuilder b(data_file_path(prefix), TokenDType::u16);
  b.add_item(std::vector<int64_t>{1, 2, 3});
  b.add_item(std::vector<int64_t>{4, 5});
  b.end_document();
  b.add_document(std::vector<int64_t>{6}, std::vector<int32_t>{1});
  b.add_document(std::vector<int64_t>{}, std::vector<int32_t>{});  // empty document
  b.finalize(index_file_path(prefix));

  std::string expected("MMIDIDX\0\0", 9);
  expected += le64(1);
  expected += std::string(1, '\x08');  // uint16
  expected += le64(3);                 // sequences
  expected += le64(4);                 // document boundaries [0, 2, 3, 3]
  expected += le32(3) + le32(2) + le32(1);
  expected += le64(0) + le64(6) + le64(10);
  expected += le64(0) + le64(2) + le64(3) + le64(3);
  EXPECT_EQ(read_file(index_file_path(prefix)), expected);
  EXPECT_EQ(read_file(index_file_path(prefix)).size(), 34u + 12 * 3 + 8 * 4);
  std::string bin;
  for (int v = 1; v <= 6; ++v) bin += le16(static_cast<uint16_t>(v));
  EXPECT_EQ(read_file(data_file_path(prefix)), bin);

  IndexedDataset ds(prefix);
  EXPECT_EQ(ds.num_sequences(), 3);
  EXPECT_EQ(ds.num_documents(), 3);
  EXPECT_EQ(ds.num_tokens(), 6);
  EXPECT_EQ(ds.document_indices(), (std::vector<int64_t>{0, 2, 3, 3}));
  EXPECT_EQ(ds.sequence_pointers(), (std::vector<int64_t>{0, 6, 10}));
  EXPECT_EQ(ds.get(0), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ds.get(0, 1, 2), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ds.get(1, 1), (std::vector<int64_t>{5}));
  EXPECT_FALSE(ds.has_sequence_modes());
}

// indexed_dataset.py dtype codes 1..8 with each type's extreme values.
TEST(IndexedDataset, EveryDtypeRoundTrips) {
  TempDir dir;
  const std::vector<std::pair<TokenDType, std::vector<int64_t>>> cases = {
      {TokenDType::u8, {0, 1, 255}},
      {TokenDType::i8, {-128, 0, 127}},
      {TokenDType::i16, {-32768, 7, 32767}},
      {TokenDType::i32, {-2147483648LL, 5, 2147483647LL}},
      {TokenDType::i64, {-(int64_t{1} << 62), 3, int64_t{1} << 62}},
      {TokenDType::f64, {-(int64_t{1} << 52), 9, int64_t{1} << 52}},
      {TokenDType::f32, {-(1 << 23), 11, 1 << 23}},
      {TokenDType::u16, {0, 65535, 12}},
  };
  for (const auto& [dtype, tokens] : cases) {
    const std::string prefix = dir.file(std::string("t_") + token_dtype_name(dtype));
    write_dataset(prefix, dtype, {{tokens}, {{tokens[1]}}});
    IndexedDataset ds(prefix);
    EXPECT_EQ(ds.dtype(), dtype);
    EXPECT_EQ(static_cast<int>(read_file(index_file_path(prefix))[17]), static_cast<int>(dtype));
    EXPECT_EQ(ds.get(0), tokens) << token_dtype_name(dtype);
    EXPECT_EQ(ds.get(1), std::vector<int64_t>{tokens[1]});
    EXPECT_EQ(read_file(data_file_path(prefix)).size(), 4 * token_dtype_size(dtype));
  }
}

TEST(IndexedDataset, TokenThatDoesNotFitTheDtypeIsRejected) {
  TempDir dir;
  IndexedDatasetBuilder b(dir.file("x.bin"), TokenDType::u16);
  try {
    b.add_item(std::vector<int64_t>{70000});
    FAIL() << "expected DataError";
  } catch (const loom::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 70000 does not fit the dataset dtype uint16"), std::string::npos)
        << e.what();
  }
}

TEST(IndexedDataset, OptimalDtypeFollowsMegatron) {
  EXPECT_EQ(optimal_token_dtype(8000), TokenDType::u16);
  EXPECT_EQ(optimal_token_dtype(65499), TokenDType::u16);
  EXPECT_EQ(optimal_token_dtype(65500), TokenDType::i32);
  EXPECT_EQ(optimal_token_dtype(129280), TokenDType::i32);
}

// IndexedDatasetBuilder.add_index: offset + other.document_indices[1:], raw .bin copy.
TEST(IndexedDataset, AddIndexMergesDocumentsAndTokens) {
  TempDir dir;
  write_dataset(dir.file("a"), TokenDType::i32, {{{1, 2}, {3}}, {{4}}});
  write_dataset(dir.file("b"), TokenDType::i32, {{{5, 6, 7}}, {}, {{8}, {9}}});
  IndexedDatasetBuilder merged(dir.file("m.bin"), TokenDType::i32);
  merged.add_index(dir.file("a"));
  merged.add_index(dir.file("b"));
  merged.finalize(dir.file("m.idx"));
  IndexedDataset ds(dir.file("m"));
  EXPECT_EQ(ds.num_sequences(), 6);
  EXPECT_EQ(ds.document_indices(), (std::vector<int64_t>{0, 2, 3, 4, 4, 6}));
  EXPECT_EQ(ds.sequence_pointers(), (std::vector<int64_t>{0, 8, 12, 16, 28, 32}));
  EXPECT_EQ(ds.get(3), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(ds.get(5), (std::vector<int64_t>{9}));

  IndexedDatasetBuilder wrong(dir.file("w.bin"), TokenDType::u16);
  EXPECT_NE(error_of([&] { wrong.add_index(dir.file("a")); }).find("stores int32 tokens but this dataset stores uint16"),
            std::string::npos);
}

// Files written by numpy/struct (tests/data/indexed_writer.py) read back equal, and files
// written by Loom pass the script's numpy reader.
TEST(IndexedDataset, AgreesWithIndependentNumpyWriterAndReader) {
  if (!have_python()) GTEST_SKIP() << kNoPython;
  TempDir dir;
  for (int code : {1, 3, 4, 5, 8}) {
    const std::string spec = "{\"dtype_code\": " + std::to_string(code) +
                             ", \"documents\": [[[1, 2, 3], [4, 5]], [], [[6]], [[7, 8, 9, 10]]]}";
    write_file(dir.file("spec.json"), spec);
    std::string out;
    ASSERT_EQ(run_python("indexed_writer.py", "write " + dir.file("spec.json") + " " + dir.file("py"), dir.path().string(), &out), 0)
        << out;
    IndexedDataset ds(dir.file("py"));
    EXPECT_EQ(static_cast<int>(ds.dtype()), code);
    EXPECT_EQ(ds.document_indices(), (std::vector<int64_t>{0, 2, 2, 3, 4}));
    EXPECT_EQ(ds.sequence_lengths(), (std::vector<int32_t>{3, 2, 1, 4}));
    EXPECT_EQ(ds.get(3), (std::vector<int64_t>{7, 8, 9, 10}));
    EXPECT_EQ(ds.get(1), (std::vector<int64_t>{4, 5}));

    // The same content written by Loom is byte-identical and passes the numpy reader.
    write_dataset(dir.file("loom"), static_cast<TokenDType>(code), {{{1, 2, 3}, {4, 5}}, {}, {{6}}, {{7, 8, 9, 10}}});
    EXPECT_EQ(read_file(dir.file("loom.idx")), read_file(dir.file("py.idx")));
    EXPECT_EQ(read_file(dir.file("loom.bin")), read_file(dir.file("py.bin")));
    ASSERT_EQ(run_python("indexed_writer.py", "verify " + dir.file("spec.json") + " " + dir.file("loom"), dir.path().string(), &out), 0)
        << out;
    EXPECT_NE(out.find("ok"), std::string::npos);
  }
}

// Broken files: DataError naming the file and the byte offset.
TEST(IndexedDataset, BadFilesNameTheFileAndOffset) {
  TempDir dir;
  const std::string prefix = dir.file("good");
  write_dataset(prefix, TokenDType::u16, {{{1, 2, 3}}, {{4, 5}}});
  const std::string idx = read_file(index_file_path(prefix));
  const std::string bin = read_file(data_file_path(prefix));
  auto open_with = [&](const std::string& idx_bytes, const std::string& bin_bytes) {
    write_file(dir.file("bad.idx"), idx_bytes);
    write_file(dir.file("bad.bin"), bin_bytes);
    return error_of([&] { IndexedDataset ds(dir.file("bad")); });
  };
  const std::string path = dir.file("bad.idx");

  std::string e = open_with("X" + idx.substr(1), bin);
  EXPECT_NE(e.find(path + ": bad magic at byte offset 0"), std::string::npos) << e;

  std::string v2 = idx;
  v2[9] = 2;
  e = open_with(v2, bin);
  EXPECT_NE(e.find(path + ": unsupported version 2 at byte offset 9"), std::string::npos) << e;

  std::string code = idx;
  code[17] = 9;
  e = open_with(code, bin);
  EXPECT_NE(e.find(path + ": invalid dtype code 9 at byte offset 17"), std::string::npos) << e;

  e = open_with(idx.substr(0, 20), bin);
  EXPECT_NE(e.find(path + ": truncated header at byte offset 20"), std::string::npos) << e;

  e = open_with(idx.substr(0, idx.size() - 4), bin);
  EXPECT_NE(e.find(path + ": truncated at byte offset " + std::to_string(idx.size() - 4)), std::string::npos) << e;

  e = open_with(idx + "xyz", bin);
  EXPECT_NE(e.find("3 unexpected trailing bytes after byte offset " + std::to_string(idx.size())), std::string::npos) << e;

  // Sequence 1 (2 tokens at byte 6) needs 10 bytes of .bin.
  e = open_with(idx, bin.substr(0, 8));
  EXPECT_NE(e.find(path + ": sequence 1 pointer 6 (byte offset " + std::to_string(34 + 4 * 2 + 8) +
                   ") with length 2 points past the end of " + dir.file("bad.bin") + " (8 bytes)"),
            std::string::npos)
      << e;

  std::string docs = idx;  // last document boundary 2 -> 1
  docs[34 + 12 * 2 + 16] = 1;
  e = open_with(docs, bin);
  EXPECT_NE(e.find("last document boundary is 1 at byte offset " + std::to_string(34 + 12 * 2 + 16)), std::string::npos) << e;

  e = error_of([&] { IndexedDataset ds(dir.file("missing")); });
  EXPECT_NE(e.find(dir.file("missing") + ".idx does not exist"), std::string::npos) << e;
}

TEST(IndexedDataset, ReadOutsideASequenceIsAValueError) {
  TempDir dir;
  write_dataset(dir.file("d"), TokenDType::u16, {{{1, 2, 3}}});
  IndexedDataset ds(dir.file("d"));
  EXPECT_THROW(ds.get(0, 2, 2), loom::ValueError);
  EXPECT_THROW(ds.get(1), loom::ValueError);
}
