#include "loom/optim/newton_schulz.h"

#include "loom/core/error.h"
#include "loom/optim/option_reader.h"

namespace loom::optim {

using json = nlohmann::ordered_json;

namespace {

bool is_triplet(const json& t) {
  if (!t.is_array() || t.size() != 3) return false;
  for (const auto& x : t)
    if (!x.is_number()) return false;  // nlohmann's booleans are not numbers
  return true;
}

bool is_segment(const json& s) {
  return s.is_array() && s.size() == 2 && is_triplet(s[0]) && s[1].is_number_integer() && s[1].get<int64_t>() >= 1;
}

NsCoefficients triplet(const json& t) { return {t[0].get<float>(), t[1].get<float>(), t[2].get<float>()}; }

}  // namespace

std::string ns_coefficients_problem(const json& coefficients) {
  if (is_triplet(coefficients)) return "";
  bool segmented = coefficients.is_array() && !coefficients.empty();
  if (segmented)
    for (const auto& segment : coefficients) segmented &= is_segment(segment);
  if (segmented) return "";
  return "must be a flat triplet [a, b, c] or segments [[[a, b, c], count], ...] with count >= 1, got " +
         describe_json(coefficients) + "; e.g. ns_coefficients: [3.4445, -4.7750, 2.0315]";
}

NsSchedule make_ns_schedule(const json& coefficients, int64_t ns_steps, const std::string& path) {
  const std::string problem = coefficients.is_null() ? "" : ns_coefficients_problem(coefficients);
  LOOM_CHECK(problem.empty(), ConfigError, path, ": ", problem);
  if (coefficients.is_null() || is_triplet(coefficients)) {
    LOOM_CHECK(ns_steps >= 1, ConfigError, "optimizer.ns_steps: must be >= 1, got ", ns_steps);
    const NsCoefficients quintic{3.4445f, -4.7750f, 2.0315f};
    const NsCoefficients t = coefficients.is_null() ? quintic : triplet(coefficients);
    return NsSchedule(static_cast<size_t>(ns_steps), t);
  }
  NsSchedule out;
  for (const json& segment : coefficients)
    out.insert(out.end(), static_cast<size_t>(segment[1].get<int64_t>()), triplet(segment[0]));
  return out;
}

}  // namespace loom::optim
