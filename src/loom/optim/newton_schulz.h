// Muon's Newton–Schulz coefficient schedule (MindFormers' _normalize_ns_schedule): one (a, b, c)
// triplet per iteration, parsed from optimizer.ns_coefficients. The iteration itself is a kernel
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

// What is wrong with an `ns_coefficients` value (spec training_hyperparameters.md §1.2 "Two
// Formats of ns_coefficients"), or "" when it is a flat [a, b, c] or segments
// [[[a, b, c], count], ...] with every count >= 1.
std::string ns_coefficients_problem(const nlohmann::ordered_json& coefficients);

// `ns_coefficients` flat [a, b, c] (repeated ns_steps times, ns_steps >= 1) or segmented
// [[[a, b, c], count], ...] (steps = Σ count; ns_steps is then ignored). ConfigError naming
// `path` when ns_coefficients_problem finds one. A null value gives the default quintic
// (3.4445, -4.7750, 2.0315).
NsSchedule make_ns_schedule(const nlohmann::ordered_json& coefficients, int64_t ns_steps,
                            const std::string& path);

}  // namespace loom::optim
