// Blend lists, split strings and per-dataset sizes, as Megatron/MindFormers parse them (Megatron's
// get_blend_from_list and split parsing). Errors name the configuration field they came from.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace loom::data {

enum class Split { train = 0, valid = 1, test = 2 };
inline constexpr int kNumSplits = 3;
const char* split_name(Split split);  // "train", "valid", "test"

struct Blend {
  std::vector<std::string> prefixes;
  std::optional<std::vector<double>> weights;  // absent: blend by dataset length
};

// get_blend_from_list: an even-length list whose every other entry parses as a number is
// [w0, p0, w1, p1, ...]; anything else is a list of prefixes. Prefixes are stripped.
Blend blend_from_list(const std::vector<std::string>& entries,
                      const std::string& field = "train_dataset.dataloader.config.data_path");
// w / sum(w) in float64.
std::vector<double> normalize_weights(const std::vector<double>& weights);

// "949,50,1" -> [0.949, 0.05, 0.001]: every [.0-9]+ run is a number, padded with zeros to three,
// normalised. ConfigError naming `field` for more than three numbers, or all zeros.
std::array<double, kNumSplits> parse_split(const std::string& split,
                                           const std::string& field = "train_dataset.dataloader.config.split");
// Cumulative book-ends; a split with an empty range is absent.
using SplitMatrix = std::array<std::optional<std::pair<double, double>>, kNumSplits>;
SplitMatrix split_matrix(const std::array<double, kNumSplits>& split);
// The sequence ids [begin, end) of one split of a dataset with `num_elements` sequences:
// int(round(bookend * num_elements)) with Python's round-half-to-even.
std::pair<int64_t, int64_t> split_range(const std::pair<double, double>& bookend, int64_t num_elements);
// "[(0.0, 0.949), (0.949, 0.999), (0.999, 1.0)]" style text (for cache descriptions).
std::string split_matrix_str(const SplitMatrix& matrix);

// Samples to request from each dataset of a weighted blend for each split:
// ceil(target * weight * 1.005) (MindFormers' 0.5 % surplus); absent targets stay absent.
std::vector<std::array<std::optional<int64_t>, kNumSplits>> sizes_per_dataset(
    const std::vector<double>& normalized_weights,
    const std::array<std::optional<int64_t>, kNumSplits>& target_sizes);

}  // namespace loom::data
