// Tiling rules of the kernel contract that every backend follows, because what they decide
// (how many rows of logits exist at once) is memory the configuration estimate and `loom plan`
// predict without running a kernel.
#pragma once

#include <cstdint>

namespace loom::kernels {

// The token chunk linear_cross_entropy runs n tokens of a vocabulary of v rows in: `requested`
// when positive (at most n), else about 8M logits (32 MB in fp32), at least 16 tokens.
int64_t linear_cross_entropy_chunk(int64_t n, int64_t v, int64_t requested);

}  // namespace loom::kernels
