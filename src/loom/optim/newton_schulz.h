// Muon's Newton–Schulz coefficient schedule (semantics §2.2): one (a, b, c) triplet per
// iteration, parsed from optimizer.ns_coefficients. The iteration itself is a kernel
// (kernels/cpu/newton_schulz.h, reached through the kernel table's muon_orthogonalize).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/kernels/kernel_types.h"

namespace loom::optim {

using kernels::NsCoefficients;

// One triplet per iteration.
using NsSchedule = std::vector<NsCoefficients>;

// `ns_coefficients` flat [a, b, c] (repeated ns_steps times) or segmented
// [[[a, b, c], count], ...] (steps = Σ count; ns_steps is then ignored). ConfigError naming
// `path` on malformed input. A null value gives the default quintic (3.4445, -4.7750, 2.0315).
NsSchedule make_ns_schedule(const nlohmann::ordered_json& coefficients, int64_t ns_steps,
                            const std::string& path);

}  // namespace loom::optim
