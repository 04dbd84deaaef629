// GPTDataset index construction and sample reading (Megatron's gpt_dataset.py), its on-disk index
// cache, and a comparison with a numpy implementation of Megatron
// (tests/data/megatron_reference.py).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "data_test_util.h"
#include "loom/data/atomic_file.h"
#include "loom/data/gpt_dataset.h"
#include "loom/data/npy.h"

using namespace loom::data;
using namespace loom::data::testing_util;
using loom::testing::TempDir;

namespace {

std::vector<int64_t> lcg_lengths(int n, int max_len, uint32_t seed) {
  std::vector<int64_t> out;
  uint32_t x = seed;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    out.push_back(1 + static_cast<int64_t>((x >> 8) % static_cast<uint32_t>(max_len)));
  }
  return out;
}

GptDatasetOptions options(int64_t S, const std::string& cache, bool extra = true) {
  GptDatasetOptions o;
  o.sequence_length = S;
  o.random_seed = 1234;
  o.add_extra_token_to_sequence = extra;
  o.path_to_cache = cache;
  o.use_cache = !cache.empty();
  o.split = "1,0,0";
  return o;
}

std::vector<int32_t> all_sequences(const IndexedDataset& ds) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < ds.num_sequences(); ++i) out.push_back(i);
  return out;
}

// The flattened token stream in document_index order: with x = 1 sample j is
// stream[j*S, j*S + S + 1), with x = 0 stream[j*S, (j+1)*S) -- an oracle independent of the
// sample index.
std::vector<int64_t> stream_of(const IndexedDataset& ds, const std::vector<int32_t>& document_index) {
  std::vector<int64_t> stream;
  for (int32_t d : document_index) {
    auto tokens = ds.get(d);
    stream.insert(stream.end(), tokens.begin(), tokens.end());
  }
  return stream;
}

}  // namespace

// build_sample_idx by hand: sizes [5,3,7], S=4, x=1, one epoch.
TEST(GptIndices, SampleIndexWorkedExample) {
  const std::vector<int32_t> sizes = {5, 3, 7};
  const std::vector<int32_t> doc_idx = {0, 1, 2};
  EXPECT_EQ(build_sample_index(sizes, doc_idx, 4, 1, 15, true, 1),
            (std::vector<int64_t>{0, 0, 0, 4, 2, 0, 2, 4}));
  // drop_last = false adds (2, 6): the last sample has 3 tokens and is padded.
  EXPECT_EQ(build_sample_index(sizes, doc_idx, 4, 1, 15, false, 1),
            (std::vector<int64_t>{0, 0, 0, 4, 2, 0, 2, 4, 2, 6}));
  // x = 0: samples do not overlap.
  EXPECT_EQ(build_sample_index(sizes, doc_idx, 4, 1, 15, true, 0),
            (std::vector<int64_t>{0, 0, 0, 4, 1, 3, 2, 4}));
}

// _build_document_sample_shuffle_indices: epochs and the separate final epoch.
TEST(GptIndices, EpochsAndSeparateFinalEpoch) {
  EXPECT_EQ(gpt_num_epochs(15, std::nullopt, 4, 1), 1);
  EXPECT_EQ(gpt_num_epochs(15, 3, 4, 1), 1);   // 13 tokens needed
  EXPECT_EQ(gpt_num_epochs(15, 4, 4, 1), 2);   // 17 > 15
  EXPECT_EQ(gpt_num_epochs(15, 11, 4, 1), 3);  // 45 = 3 * 15
  EXPECT_EQ(gpt_num_epochs(15, 11, 4, 0), 3);  // 44
  const std::vector<int32_t> sizes = {5, 3, 7};
  const std::vector<int32_t> docs = {0, 1, 2};
  // num_samples 4: sans_final = (15-1)//4 = 3, from_final = 1 < int(0.8*3) = 2 -> separate.
  GptIndices a = build_gpt_indices(sizes, docs, 4, 4, 1234, 1, true);
  EXPECT_EQ(a.num_epochs, 2);
  EXPECT_TRUE(a.separate_final_epoch);
  EXPECT_EQ(a.num_samples(), (2 * 15 - 1) / 4);
  // The first 3 shuffle entries permute [0,3), the rest [3,7).
  std::vector<int64_t> head(a.shuffle_index.begin(), a.shuffle_index.begin() + 3);
  std::sort(head.begin(), head.end());
  EXPECT_EQ(head, (std::vector<int64_t>{0, 1, 2}));
  // num_samples 5: from_final = 2, not < 2 -> one shuffle over everything.
  GptIndices b = build_gpt_indices(sizes, docs, 5, 4, 1234, 1, true);
  EXPECT_EQ(b.num_epochs, 2);
  EXPECT_FALSE(b.separate_final_epoch);
  EXPECT_EQ(b.document_index.size(), 6u);
}

// Samples follow the flattened document stream, for x = 1 and x = 0.
TEST(GptDataset, SamplesFollowTheDocumentStream) {
  TempDir dir;
  const std::string prefix = dir.file("d");
  write_dataset(prefix, TokenDType::u16, numbered_documents(lcg_lengths(20, 12, 5)));
  auto ds = std::make_shared<const IndexedDataset>(prefix);
  for (bool extra : {true, false}) {
    GptDataset gpt(ds, all_sequences(*ds), 40, Split::train, options(8, "", extra));
    const auto& idx = gpt.indices();
    const auto stream = stream_of(*ds, idx.document_index);
    const int64_t x = extra ? 1 : 0;
    ASSERT_GE(gpt.size(), 40);
    EXPECT_EQ(gpt.sample_length(), 8 + x);
    std::vector<int64_t> text(static_cast<size_t>(8 + x));
    for (int64_t i = 0; i < gpt.size(); ++i) {
      gpt.read_sample(i, text);
      const int64_t j = idx.shuffle_index[static_cast<size_t>(i)];
      const std::vector<int64_t> expected(stream.begin() + j * 8, stream.begin() + j * 8 + 8 + x);
      ASSERT_EQ(text, expected) << "sample " << i << " extra " << extra;
    }
  }
}

// The last partial validation sample (drop_last_partial_validation_sequence: False) is padded.
TEST(GptDataset, PartialValidationSampleIsPadded) {
  TempDir dir;
  write_dataset(dir.file("d"), TokenDType::u16, {{{1, 2, 3, 4, 5}}, {{6, 7, 8}}, {{9, 10, 11, 12, 13, 14, 15}}});
  auto ds = std::make_shared<const IndexedDataset>(dir.file("d"));
  GptDatasetOptions o = options(4, "");
  o.drop_last_partial_validation_sequence = false;
  o.pad = -1;
  GptDataset gpt(ds, all_sequences(*ds), std::nullopt, Split::valid, o);
  ASSERT_EQ(gpt.size(), 4);
  int64_t padded = 0;
  std::vector<int64_t> text(5);
  for (int64_t i = 0; i < 4; ++i) {
    gpt.read_sample(i, text);
    if (text.back() == -1) {
      ++padded;
      EXPECT_EQ(std::count(text.begin(), text.end(), -1), 2);  // 3 real tokens of 5
    }
  }
  EXPECT_EQ(padded, 1);
}

// Loom's indices and samples equal those of a numpy implementation of Megatron (one epoch,
// several epochs with and without a separate final epoch, x = 0, a sub-range split).
TEST(GptDataset, MatchesNumpyMegatronReference) {
  if (!have_python()) GTEST_SKIP() << kNoPython;
  TempDir dir;
  const std::string prefix = dir.file("corpus");
  write_dataset(prefix, TokenDType::u16, numbered_documents(lcg_lengths(50, 40, 11)));
  auto ds = std::make_shared<const IndexedDataset>(prefix);
  struct Case {
    std::optional<int64_t> num_samples;
    bool extra;
    int32_t begin, end;
    uint32_t seed;
    const char* expect;  // fragment of the script's summary line
  };
  const std::vector<Case> cases = {
      {std::nullopt, true, 0, 50, 1234, "epochs=1"},
      {79, true, 0, 50, 1234, "epochs=2 separate_final_epoch=True"},
      {130, true, 0, 50, 99, "epochs=2 separate_final_epoch=False"},
      {180, true, 0, 50, 5, "epochs=3 separate_final_epoch=True"},
      {60, false, 0, 50, 7, "epochs="},
      {25, true, 10, 40, 4321, "epochs="},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    const std::string cache = dir.file("cache" + std::to_string(c));
    GptDatasetOptions o = options(16, cache, k.extra);
    o.random_seed = k.seed;
    std::vector<int32_t> seqs;
    for (int32_t i = k.begin; i < k.end; ++i) seqs.push_back(i);
    GptDataset gpt(ds, seqs, k.num_samples, Split::train, o);
    ASSERT_TRUE(gpt.built_anew());
    const int64_t L = gpt.sample_length();
    std::vector<int64_t> all(static_cast<size_t>(gpt.size() * L));
    for (int64_t i = 0; i < gpt.size(); ++i) gpt.read_sample(i, std::span<int64_t>(all.data() + i * L, static_cast<size_t>(L)));
    const std::string samples = dir.file("samples" + std::to_string(c) + ".npy");
    write_file_atomic(samples, encode_npy("<i8", {gpt.size(), L}, all.data(), all.size() * 8));
    const std::string stem = cache + "/" + gpt.unique_description_hash() + "-GPTDataset-train-";
    std::string out;
    const std::string args = "gpt " + prefix + " " + stem + " " + samples + " 16 " + std::to_string(k.seed) + " " +
                             (k.extra ? "1" : "0") + " " + std::to_string(k.begin) + " " + std::to_string(k.end) +
                             " " + std::to_string(k.num_samples.value_or(-1));
    EXPECT_EQ(run_python("megatron_reference.py", args, dir.path().string(), &out), 0) << "case " << c << ": " << out;
    EXPECT_EQ(out.rfind("ok", 0), 0u) << out;
    EXPECT_NE(out.find(k.expect), std::string::npos) << out;
  }
}

// Cache: MD5-named files, reused when nothing changed, rebuilt when the data or options change.
TEST(GptDataset, IndexCacheIsReusedAndInvalidated) {
  TempDir dir;
  const std::string prefix = dir.file("d");
  write_dataset(prefix, TokenDType::u16, numbered_documents(lcg_lengths(30, 20, 3)));
  auto ds = std::make_shared<const IndexedDataset>(prefix);
  const std::string cache = dir.file("cache");
  GptDataset first(ds, all_sequences(*ds), 50, Split::train, options(8, cache));
  EXPECT_TRUE(first.built_anew());
  const std::string stem = cache + "/" + first.unique_description_hash() + "-GPTDataset-train-";
  for (const char* suffix : {"description.txt", "document_index.npy", "sample_index.npy", "shuffle_index.npy"}) {
    EXPECT_TRUE(std::filesystem::exists(stem + suffix)) << suffix;
  }
  EXPECT_EQ(first.unique_description_hash().size(), 32u);
  EXPECT_EQ(read_npy(stem + "shuffle_index.npy").descr, "<u4");  // Megatron's dtype below 2^32

  GptDataset second(ds, all_sequences(*ds), 50, Split::train, options(8, cache));
  EXPECT_FALSE(second.built_anew());
  EXPECT_EQ(second.indices().document_index, first.indices().document_index);
  EXPECT_EQ(second.indices().sample_index, first.indices().sample_index);
  EXPECT_EQ(second.indices().shuffle_index, first.indices().shuffle_index);

  GptDataset other_seed(ds, all_sequences(*ds), 50, Split::train, [&] {
    auto o = options(8, cache);
    o.random_seed = 5;
    return o;
  }());
  EXPECT_TRUE(other_seed.built_anew());
  EXPECT_NE(other_seed.unique_description_hash(), first.unique_description_hash());

  // A corrupt cache file is ignored and rebuilt.
  loom::testing::write_file(stem + "sample_index.npy", "garbage");
  GptDataset repaired(ds, all_sequences(*ds), 50, Split::train, options(8, cache));
  EXPECT_TRUE(repaired.built_anew());
  EXPECT_EQ(repaired.indices().sample_index, first.indices().sample_index);

  // Regenerating the dataset changes its fingerprint, so the cache is not reused.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write_dataset(prefix, TokenDType::u16, numbered_documents(lcg_lengths(31, 20, 4)));
  auto ds2 = std::make_shared<const IndexedDataset>(prefix);
  GptDataset regenerated(ds2, all_sequences(*ds2), 50, Split::train, options(8, cache));
  EXPECT_TRUE(regenerated.built_anew());
  EXPECT_NE(regenerated.unique_description_hash(), first.unique_description_hash());

  // No temporary files remain.
  for (const auto& entry : std::filesystem::directory_iterator(cache)) {
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
  }
}

// Megatron's default cache location is `{prefix}/cache/GPTDataset_indices`.
TEST(GptDataset, DefaultCacheSitsNextToTheData) {
  TempDir dir;
  const std::string prefix = dir.file("corpus_text_document");
  write_dataset(prefix, TokenDType::u16, numbered_documents({9, 9, 9}));
  auto ds = std::make_shared<const IndexedDataset>(prefix);
  GptDatasetOptions o = options(4, "");
  o.use_cache = true;
  GptDataset gpt(ds, all_sequences(*ds), std::nullopt, Split::train, o);
  EXPECT_EQ(gpt.cache_dir(), prefix + "/cache/GPTDataset_indices");
  EXPECT_TRUE(std::filesystem::exists(gpt.cache_dir() + "/" + gpt.unique_description_hash() +
                                      "-GPTDataset-train-description.txt"));
}

// Several builders at once (threads standing in for processes) all end with identical indices.
TEST(GptDataset, ConcurrentBuildersAgree) {
  TempDir dir;
  const std::string prefix = dir.file("d");
  write_dataset(prefix, TokenDType::i32, numbered_documents(lcg_lengths(200, 60, 9)));
  auto ds = std::make_shared<const IndexedDataset>(prefix);
  const std::string cache = dir.file("cache");
  std::vector<std::vector<int64_t>> shuffles(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < shuffles.size(); ++t) {
    threads.emplace_back([&, t] {
      GptDataset gpt(ds, all_sequences(*ds), 900, Split::train, options(16, cache));
      shuffles[t] = gpt.indices().shuffle_index;
    });
  }
  for (auto& t : threads) t.join();
  for (size_t t = 1; t < shuffles.size(); ++t) EXPECT_EQ(shuffles[t], shuffles[0]);
  GptDataset after(ds, all_sequences(*ds), 900, Split::train, options(16, cache));
  EXPECT_FALSE(after.built_anew());
  EXPECT_EQ(after.indices().shuffle_index, shuffles[0]);
}

// A reader racing a writer sees either the old or the new file, never a mix.
TEST(AtomicFile, ReadersNeverSeeAPartialFile) {
  TempDir dir;
  const std::string path = dir.file("f.bin");
  const std::string a(1 << 20, 'a');
  const std::string b(1 << 20, 'b');
  write_file_atomic(path, a);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 40; ++i) write_file_atomic(path, i % 2 ? a : b);
    done = true;
  });
  int reads = 0;
  while (!done) {
    const std::string got = read_whole_file(path);
    ASSERT_TRUE(got == a || got == b) << "partial read of " << got.size() << " bytes";
    ++reads;
  }
  writer.join();
  EXPECT_GT(reads, 0);
}
