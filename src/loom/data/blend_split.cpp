#include "loom/data/blend_split.h"

#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "loom/core/error.h"

namespace loom::data {

const char* split_name(Split split) {
  switch (split) {
    case Split::train: return "train";
    case Split::valid: return "valid";
    case Split::test: return "test";
  }
  return "unknown";
}

namespace {

std::string strip(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

// Python float(): optional sign, digits, '.', exponent, inf/nan; surrounding whitespace allowed.
std::optional<double> parse_python_float(const std::string& text) {
  const std::string s = strip(text);
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  if (s.find_first_of("xX") != std::string::npos) return std::nullopt;  // strtod reads hex, Python does not
  return v;
}

}  // namespace

Blend blend_from_list(const std::vector<std::string>& entries, const std::string& field) {
  LOOM_CHECK(!entries.empty(), ConfigError, field,
             " is empty: give dataset prefixes, e.g. [\"/data/corpus_text_document\"] or "
             "[\"0.3\", \"/data/a_text_document\", \"0.7\", \"/data/b_text_document\"]");
  Blend blend;
  if (entries.size() % 2 == 1) {
    for (const auto& e : entries) blend.prefixes.push_back(strip(e));
    return blend;
  }
  std::vector<double> weights;
  std::vector<std::string> prefixes;
  bool all_numbers = true;
  for (size_t i = 0; i < entries.size(); i += 2) {
    const auto w = parse_python_float(entries[i]);
    if (!w) {
      all_numbers = false;
      break;
    }
    weights.push_back(*w);
    prefixes.push_back(strip(entries[i + 1]));
  }
  if (!all_numbers) {
    for (const auto& e : entries) blend.prefixes.push_back(strip(e));
    return blend;
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    LOOM_CHECK(std::isfinite(weights[i]) && weights[i] > 0, ConfigError, field, "[", 2 * i,
               "]: blend weight ", weights[i], " must be positive (weights come before each prefix)");
  }
  blend.prefixes = std::move(prefixes);
  blend.weights = std::move(weights);
  return blend;
}

std::vector<double> normalize_weights(const std::vector<double>& weights) {
  double sum = 0.0;
  for (double w : weights) sum += w;
  std::vector<double> out;
  out.reserve(weights.size());
  for (double w : weights) out.push_back(w / sum);
  return out;
}

std::array<double, kNumSplits> parse_split(const std::string& split, const std::string& field) {
  std::vector<double> values;
  // re.findall(r"[.0-9]+", split)
  for (size_t i = 0; i < split.size();) {
    auto in_class = [](char c) { return c == '.' || (c >= '0' && c <= '9'); };
    if (!in_class(split[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < split.size() && in_class(split[j])) ++j;
    const std::string run = split.substr(i, j - i);
    const auto v = parse_python_float(run);
    LOOM_CHECK(v.has_value(), ConfigError, field, ": '", run, "' in \"", split,
               "\" is not a number (write ratios like \"949,50,1\")");
    values.push_back(*v);
    i = j;
  }
  LOOM_CHECK(values.size() <= kNumSplits, ConfigError, field, ": \"", split, "\" gives ", values.size(),
             " ratios; at most 3 (train, valid, test) are allowed");
  values.resize(kNumSplits, 0.0);
  double sum = 0.0;
  for (double v : values) sum += v;
  LOOM_CHECK(sum > 0, ConfigError, field, ": \"", split,
             "\" gives no positive ratio; use e.g. \"1,0,0\" to train on everything");
  std::array<double, kNumSplits> out{};
  const auto normalized = normalize_weights(values);
  for (int i = 0; i < kNumSplits; ++i) out[i] = normalized[i];
  return out;
}

SplitMatrix split_matrix(const std::array<double, kNumSplits>& split) {
  SplitMatrix matrix;
  double begin = 0.0;
  for (int i = 0; i < kNumSplits; ++i) {
    const double end = begin + split[i];  // same left-to-right float sum as the reference
    if (end <= begin) {
      matrix[i] = std::nullopt;
    } else {
      matrix[i] = std::make_pair(begin, end);
    }
    begin = end;
  }
  return matrix;
}

std::pair<int64_t, int64_t> split_range(const std::pair<double, double>& bookend, int64_t num_elements) {
  // Python's round() rounds half to even, which is nearbyint in the default rounding mode.
  const int saved = std::fegetround();
  std::fesetround(FE_TONEAREST);
  const auto begin = static_cast<int64_t>(std::nearbyint(bookend.first * static_cast<double>(num_elements)));
  const auto end = static_cast<int64_t>(std::nearbyint(bookend.second * static_cast<double>(num_elements)));
  std::fesetround(saved);
  return {begin, end};
}

std::string split_matrix_str(const SplitMatrix& matrix) {
  std::ostringstream os;
  os.precision(17);
  os << "[";
  for (int i = 0; i < kNumSplits; ++i) {
    if (i > 0) os << ", ";
    if (matrix[i]) {
      os << "(" << matrix[i]->first << ", " << matrix[i]->second << ")";
    } else {
      os << "None";
    }
  }
  os << "]";
  return os.str();
}

std::vector<std::array<std::optional<int64_t>, kNumSplits>> sizes_per_dataset(
    const std::vector<double>& normalized_weights,
    const std::array<std::optional<int64_t>, kNumSplits>& target_sizes) {
  std::vector<std::array<std::optional<int64_t>, kNumSplits>> out;
  for (double w : normalized_weights) {
    std::array<std::optional<int64_t>, kNumSplits> row;
    for (int s = 0; s < kNumSplits; ++s) {
      if (target_sizes[s]) {
        row[s] = static_cast<int64_t>(std::ceil(static_cast<double>(*target_sizes[s]) * w * 1.005));
      }
    }
    out.push_back(row);
  }
  return out;
}

}  // namespace loom::data
