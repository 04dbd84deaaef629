// Megatron's BlendedMegatronDatasetBuilder for GPT data: from data_path/split (or
// per-split paths) and sizes, build the dataset of one split — a GptDataset for a single
// unweighted prefix, else a BlendedDataset over one GptDataset per prefix.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>

#include "loom/data/blend_split.h"
#include "loom/data/loader_options.h"
#include "loom/data/token_sample_dataset.h"

namespace loom::data {

std::shared_ptr<const TokenSampleDataset> build_megatron_dataset(
    const MegatronDataConfig& config, const std::array<std::optional<int64_t>, kNumSplits>& sizes,
    Split split = Split::train);

// "" when the options give `split` samples, else why not, naming the field: its share of
// config.split is zero, its *_data_path is empty, or sizes[split] is 0. What an evaluation of the
// split checks before anything is built.
std::string split_gap(const MegatronDataConfig& config, const std::array<std::optional<int64_t>, kNumSplits>& sizes,
                      Split split);

}  // namespace loom::data
