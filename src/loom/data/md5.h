// MD5 of a byte string as 32 lowercase hex digits. Megatron names its index caches by the MD5 of
// the dataset description; Loom keeps the same scheme (no security use).
#pragma once

#include <string>
#include <string_view>

namespace loom::data {

std::string md5_hex(std::string_view bytes);

}  // namespace loom::data
