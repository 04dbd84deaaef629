#include "loom/data/dataset_builder.h"

#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/data/blended_dataset.h"
#include "loom/data/gpt_dataset.h"

namespace loom::data {

namespace {

constexpr const char* kField = "train_dataset.dataloader.config";

struct Context {
  const MegatronDataConfig& config;
  Split split;
  GptDatasetOptions gpt;
  std::optional<std::pair<double, double>> bookend;  // the split's share of every dataset
};

std::shared_ptr<GptDataset> build_gpt(const Context& ctx, const std::string& prefix,
                                      std::optional<int64_t> num_samples) {
  auto indexed = std::make_shared<const IndexedDataset>(prefix);
  const auto [begin, end] = split_range(*ctx.bookend, indexed->num_sequences());
  std::vector<int32_t> sequences;
  sequences.reserve(static_cast<size_t>(std::max<int64_t>(end - begin, 0)));
  for (int64_t i = begin; i < end; ++i) sequences.push_back(static_cast<int32_t>(i));
  LOOM_CHECK(!sequences.empty(), DataError, "dataset ", prefix, " has ", indexed->num_sequences(),
             " sequences; the ", split_name(ctx.split), " share of ", kField,
             ".split gives it none (add data or change split)");
  return std::make_shared<GptDataset>(std::move(indexed), std::move(sequences), num_samples, ctx.split, ctx.gpt);
}

// Builds one GptDataset per prefix, num_threads at a time, keeping the prefix order.
std::vector<std::shared_ptr<GptDataset>> build_many(const Context& ctx, const std::vector<std::string>& prefixes,
                                                    const std::vector<std::optional<int64_t>>& num_samples) {
  std::vector<std::shared_ptr<GptDataset>> out(prefixes.size());
  const size_t threads = std::min<size_t>(static_cast<size_t>(ctx.config.num_dataset_builder_threads), prefixes.size());
  if (threads <= 1) {
    for (size_t i = 0; i < prefixes.size(); ++i) out[i] = build_gpt(ctx, prefixes[i], num_samples[i]);
    return out;
  }
  std::mutex mutex;
  size_t next = 0;
  std::exception_ptr error;
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (true) {
        size_t i;
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (next >= prefixes.size() || error) return;
          i = next++;
        }
        try {
          auto d = build_gpt(ctx, prefixes[i], num_samples[i]);
          std::lock_guard<std::mutex> lock(mutex);
          out[i] = std::move(d);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex);
          if (!error) error = std::current_exception();
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return out;
}

std::shared_ptr<const TokenSampleDataset> build_blend(const Context& ctx, const Blend& blend,
                                                      std::optional<int64_t> target) {
  const int s = static_cast<int>(ctx.split);
  if (blend.prefixes.size() == 1 && !blend.weights) return build_gpt(ctx, blend.prefixes[0], target);
  std::vector<std::optional<int64_t>> per_dataset(blend.prefixes.size());
  std::optional<std::vector<double>> weights;
  std::optional<int64_t> size;
  if (blend.weights) {
    LOOM_CHECK(target.has_value(), ConfigError, "train_dataset.dataloader.sizes[", s,
               "] is required for a weighted blend (size_is_none => weights_are_none fails for the ",
               split_name(ctx.split), " split)");
    weights = normalize_weights(*blend.weights);
    std::array<std::optional<int64_t>, kNumSplits> targets;
    targets[static_cast<size_t>(s)] = target;
    const auto rows = sizes_per_dataset(*weights, targets);
    int64_t total = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      per_dataset[i] = rows[i][static_cast<size_t>(s)];
      total += *per_dataset[i];
    }
    size = total;  // MindFormers blends the surplus-padded per-dataset sizes
  } else {
    size = target;  // capped at the datasets' total inside BlendedDataset
  }
  const auto datasets = build_many(ctx, blend.prefixes, per_dataset);
  std::vector<std::shared_ptr<const TokenSampleDataset>> parts(datasets.begin(), datasets.end());
  std::vector<std::string> descriptions;
  for (const auto& d : datasets) descriptions.push_back(d->unique_description());
  return std::make_shared<BlendedDataset>(std::move(parts), weights, size, std::move(descriptions),
                                          split_name(ctx.split), ctx.config.path_to_cache);
}

}  // namespace

std::string split_gap(const MegatronDataConfig& config, const std::array<std::optional<int64_t>, kNumSplits>& sizes,
                      Split split) {
  const size_t s = static_cast<size_t>(split);
  const std::string name = split_name(split);
  if (sizes[s] && *sizes[s] == 0)
    return "train_dataset.dataloader.sizes[" + std::to_string(s) + "] asks for 0 " + name + " samples";
  if (!config.data_path.empty()) {
    if (!config.split) return std::string(kField) + ".split is missing";
    if (!split_matrix(parse_split(*config.split, std::string(kField) + ".split"))[s])
      return std::string(kField) + ".split \"" + *config.split + "\" gives the " + name + " split no share";
    return "";
  }
  const std::vector<std::string>* paths[] = {&config.train_data_path, &config.valid_data_path,
                                             &config.test_data_path};
  if (paths[s]->empty()) return std::string(kField) + "." + name + "_data_path is empty";
  return "";
}

std::shared_ptr<const TokenSampleDataset> build_megatron_dataset(
    const MegatronDataConfig& config, const std::array<std::optional<int64_t>, kNumSplits>& sizes,
    Split split) {
  const int s = static_cast<int>(split);
  Context ctx{config, split, {}, std::nullopt};
  ctx.gpt.sequence_length = config.seq_length;
  ctx.gpt.random_seed = static_cast<uint32_t>(config.seed);
  ctx.gpt.add_extra_token_to_sequence = config.add_extra_token_to_sequence;
  ctx.gpt.drop_last_partial_validation_sequence = config.drop_last_partial_validation_sequence;
  ctx.gpt.pad = config.pad;
  ctx.gpt.path_to_cache = config.path_to_cache;
  if (!config.data_path.empty()) {
    LOOM_CHECK(config.split.has_value(), ConfigError, kField, ".split must be provided when data_path is given");
    const SplitMatrix matrix = split_matrix(parse_split(*config.split, std::string(kField) + ".split"));
    LOOM_CHECK(matrix[static_cast<size_t>(s)].has_value(), ConfigError, kField, ".split \"", *config.split,
               "\" gives the ", split_name(split), " split no data (e.g. \"1,0,0\" trains on everything)");
    ctx.bookend = matrix[static_cast<size_t>(s)];
    ctx.gpt.split = *config.split;
    ctx.gpt.split_matrix = split_matrix_str(matrix);
    const Blend blend = blend_from_list(config.data_path, std::string(kField) + ".data_path");
    return build_blend(ctx, blend, sizes[static_cast<size_t>(s)]);
  }
  const std::vector<std::string>* paths[] = {&config.train_data_path, &config.valid_data_path,
                                             &config.test_data_path};
  const std::string field = std::string(kField) + "." + split_name(split) + "_data_path";
  LOOM_CHECK(!paths[s]->empty(), ConfigError, field, " is empty: give the ", split_name(split),
             " split its dataset prefixes");
  ctx.bookend = std::make_pair(0.0, 1.0);  // each split's datasets are used whole
  SplitMatrix spoof;
  spoof[static_cast<size_t>(s)] = ctx.bookend;
  ctx.gpt.split_matrix = split_matrix_str(spoof);
  Blend blend = blend_from_list(*paths[s], field);
  if (blend.prefixes.size() == 1) blend.weights.reset();  // a single prefix ignores its weight
  return build_blend(ctx, blend, sizes[static_cast<size_t>(s)]);
}

}  // namespace loom::data
