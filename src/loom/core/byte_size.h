// Sizes in bytes as Loom reads them, one rule for every size (`loom plan --device-memory`,
// LOOM_MEMORY_LIMIT, `loom convert --max-shard-size`): a positive number, possibly fractional,
// then an optional unit, case-insensitive, with or without a space before it:
//
//   (none), B          bytes
//   K, M, G, T         binary (2^10, 2^20, 2^30, 2^40), as `free -h` and device vendors write them
//   KiB, MiB, GiB, TiB binary, as Loom prints sizes
//   KB, MB, GB, TB     decimal (10^3, 10^6, 10^9, 10^12), as disks and Hugging Face shards are sized
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace loom {

// The units above, for help texts and error messages.
inline constexpr const char* kByteSizeUnits =
    "bytes, or a number with K/M/G/T or KiB/MiB/GiB/TiB (binary) or KB/MB/GB/TB (decimal), e.g. 80G, 141GiB, 5GB";

// nullopt when `text` is not a positive size in those units (or exceeds int64).
std::optional<int64_t> parse_byte_size(std::string_view text);

}  // namespace loom
