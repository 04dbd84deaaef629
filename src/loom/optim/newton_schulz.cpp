#include "loom/optim/newton_schulz.h"

#include "loom/core/error.h"

namespace loom::optim {

using json = nlohmann::ordered_json;

namespace {

NsCoefficients parse_triplet(const json& v, const std::string& path) {
  LOOM_CHECK(v.is_array() && v.size() == 3 && v[0].is_number() && v[1].is_number() &&
                 v[2].is_number(),
             ConfigError, path, " must hold triplets of 3 numbers [a, b, c], got ", v.dump(),
             "; e.g. ns_coefficients: [3.4445, -4.7750, 2.0315]");
  return {v[0].get<float>(), v[1].get<float>(), v[2].get<float>()};
}

}  // namespace

NsSchedule make_ns_schedule(const json& coefficients, int64_t ns_steps, const std::string& path) {
  if (coefficients.is_null()) {
    LOOM_CHECK(ns_steps > 0, ConfigError, "optimizer.ns_steps must be positive, got ", ns_steps);
    return NsSchedule(static_cast<size_t>(ns_steps), NsCoefficients{3.4445f, -4.7750f, 2.0315f});
  }
  LOOM_CHECK(coefficients.is_array() && !coefficients.empty(), ConfigError, path,
             " must be [a, b, c] or [[[a, b, c], count], ...], got ", coefficients.dump());
  const bool segmented = coefficients[0].is_array();
  NsSchedule out;
  if (!segmented) {
    LOOM_CHECK(ns_steps > 0, ConfigError, "optimizer.ns_steps must be positive, got ", ns_steps);
    const NsCoefficients t = parse_triplet(coefficients, path);
    out.assign(static_cast<size_t>(ns_steps), t);
    return out;
  }
  for (size_t i = 0; i < coefficients.size(); ++i) {
    const json& seg = coefficients[i];
    const std::string seg_path = path + "[" + std::to_string(i) + "]";
    LOOM_CHECK(seg.is_array() && seg.size() == 2 && seg[1].is_number_integer(), ConfigError,
               seg_path, " must be [[a, b, c], count], got ", seg.dump());
    const NsCoefficients t = parse_triplet(seg[0], seg_path + "[0]");
    const int64_t count = seg[1].get<int64_t>();
    LOOM_CHECK(count > 0, ConfigError, seg_path, "[1] (the repeat count) must be positive, got ",
               count);
    out.insert(out.end(), static_cast<size_t>(count), t);
  }
  return out;
}

}  // namespace loom::optim
