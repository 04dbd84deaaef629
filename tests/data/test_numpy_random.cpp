// numpy.random.RandomState(seed).shuffle reproduced in C++ (the order Megatron's GPTDataset
// shuffles with), against golden checksums and live numpy.
#include <gtest/gtest.h>

#include <numeric>
#include <sstream>

#include "data_test_util.h"
#include "loom/data/md5.h"
#include "loom/data/numpy_random.h"

using namespace loom::data;
using namespace loom::data::testing_util;

// Checksums from numpy 1.24: RandomState(4321): 3 epochs x 1000 documents (int32), then
// arange(50000) on the same RNG.
TEST(NumpyRandom, GoldenChecksumsOfSection8) {
  NumpyRandomState rng(4321);
  std::vector<int32_t> docs;
  for (int e = 0; e < 3; ++e) {
    for (int32_t d = 0; d < 1000; ++d) docs.push_back(d);
  }
  rng.shuffle(std::span<int32_t>(docs));
  int64_t sum = 0;
  for (size_t i = 0; i < docs.size(); ++i) sum += static_cast<int64_t>(docs[i]) * static_cast<int64_t>(i);
  EXPECT_EQ(sum, 2257466018LL);
  std::vector<int64_t> shuffle(50000);
  std::iota(shuffle.begin(), shuffle.end(), 0);
  rng.shuffle(std::span<int64_t>(shuffle));
  int64_t sum2 = 0;
  for (size_t i = 0; i < shuffle.size(); ++i) sum2 += shuffle[i] * static_cast<int64_t>(i);
  EXPECT_EQ(sum2, 31268289708588LL);
}

// numpy 1.24: RandomState(1234).shuffle(arange(10)) == [7 2 9 1 0 8 4 5 6 3].
TEST(NumpyRandom, SmallSeed1234Case) {
  NumpyRandomState rng(1234);
  std::vector<int64_t> a(10);
  std::iota(a.begin(), a.end(), 0);
  rng.shuffle(std::span<int64_t>(a));
  EXPECT_EQ(a, (std::vector<int64_t>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3}));
}

// Live comparison with numpy for a few seeds and sizes (skipped without a python3 with numpy).
TEST(NumpyRandom, MatchesLiveNumpy) {
  if (!have_python()) GTEST_SKIP() << kNoPython;
  loom::testing::TempDir dir;
  for (auto [seed, n] : std::vector<std::pair<uint32_t, int>>{{0, 1}, {1, 2}, {42, 97}, {4294967295u, 1000}}) {
    std::string out;
    ASSERT_EQ(run_python("megatron_reference.py", "shuffle " + std::to_string(seed) + " " + std::to_string(n),
                         dir.path().string(), &out),
              0)
        << out;
    std::istringstream in(out);
    std::vector<int64_t> expected;
    for (int64_t v; in >> v;) expected.push_back(v);
    NumpyRandomState rng(seed);
    std::vector<int64_t> a(static_cast<size_t>(n));
    std::iota(a.begin(), a.end(), 0);
    rng.shuffle(std::span<int64_t>(a));
    EXPECT_EQ(a, expected) << "seed " << seed << " n " << n;
  }
}

TEST(NumpyRandom, RandomIntervalStaysInRange) {
  NumpyRandomState rng(7);
  EXPECT_EQ(rng.random_interval(0), 0u);
  for (uint64_t max : {1ULL, 5ULL, 0xffffffffULL, 0x100000000ULL, 0x3ffffffffffULL}) {
    for (int i = 0; i < 200; ++i) EXPECT_LE(rng.random_interval(max), max);
  }
}

// RFC 1321 test suite (the cache file names are MD5 digests, as Megatron's).
TEST(Md5, Rfc1321Vectors) {
  EXPECT_EQ(md5_hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5_hex("a"), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(md5_hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(md5_hex("message digest"), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(md5_hex("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "57edf4a22be3c955ac49da2e2107b67a");
  // Lengths at the padding boundaries (checked against Python's hashlib).
  EXPECT_EQ(md5_hex(std::string(55, 'x')), "04364420e25c512fd958a70738aa8f72");
  EXPECT_EQ(md5_hex(std::string(56, 'x')), "668a72d5ba17f08e62dabcafad6db14b");
  EXPECT_EQ(md5_hex(std::string(64, 'x')), "c1bb4f81d892b2d57947682aeb252456");
  EXPECT_EQ(md5_hex(std::string(119, 'x')), "ab347a5f68c8a443cfcddc633f12c24f");
}
