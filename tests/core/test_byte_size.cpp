// One size parser for every size Loom reads (core/byte_size.h): bytes, binary K/M/G/T and
// KiB/MiB/GiB/TiB, decimal KB/MB/GB/TB, case-insensitive; anything else is refused.
#include "loom/core/byte_size.h"

#include <gtest/gtest.h>

using loom::parse_byte_size;

TEST(ByteSize, BinaryAndDecimalUnits) {
  EXPECT_EQ(parse_byte_size("4096"), 4096);
  EXPECT_EQ(parse_byte_size("4096B"), 4096);
  EXPECT_EQ(parse_byte_size("2K"), 2048);
  EXPECT_EQ(parse_byte_size("2KiB"), 2048);
  EXPECT_EQ(parse_byte_size("2KB"), 2000);
  EXPECT_EQ(parse_byte_size("80G"), int64_t{80} << 30);
  EXPECT_EQ(parse_byte_size("80GiB"), int64_t{80} << 30);
  EXPECT_EQ(parse_byte_size("80 gib"), int64_t{80} << 30);
  EXPECT_EQ(parse_byte_size("80GB"), int64_t{80'000'000'000});
  EXPECT_EQ(parse_byte_size("1.5T"), int64_t{3} << 39);
  EXPECT_EQ(parse_byte_size("1TiB"), int64_t{1} << 40);
  EXPECT_EQ(parse_byte_size("1TB"), int64_t{1'000'000'000'000});
  EXPECT_EQ(parse_byte_size("500MB"), 500'000'000);
  EXPECT_EQ(parse_byte_size("3MiB"), 3 << 20);
}

TEST(ByteSize, RefusesWhatIsNotAPositiveSize) {
  for (const char* bad : {"", "G", "lots", "-1G", "0", "0.0G", "80GiBs", "80 G B", "1e3", "80Gb/s", "9999999T"})
    EXPECT_FALSE(parse_byte_size(bad).has_value()) << bad;
}
