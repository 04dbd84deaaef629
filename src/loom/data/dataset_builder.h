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

}  // namespace loom::data
