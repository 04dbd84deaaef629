// Internal to the config layer: the rules that run after typing, per area, and the readers of the
// sections lower layers consume. Each adds every problem it finds to Diagnostics (errors stop the
// run, warnings are printed, notes say what could not be checked) and returns what it resolved,
// so that nothing is read or computed twice (resolved_config.cpp puts the pieces together).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/config/diagnostics.h"
#include "loom/core/device.h"
#include "loom/config/layer_spec.h"
#include "loom/config/parallel_layout.h"
#include "loom/config/sections.h"
#include "loom/data/loader_options.h"
#include "loom/memory/policy.h"
#include "loom/models/model_args.h"
#include "loom/optim/option_reader.h"

namespace loom::config::detail {

// Module paths inside one Loom decoder layer (docs/models.md naming), which `select_module`
// and `op_name` regexes must match in full (memory_checks.cpp; the memory estimate places a
// layer's saved tensors on them).
std::vector<std::string> layer_module_paths(const models::ModelArgs& model);
// The paths of `modules` that `pattern` (ECMAScript) matches in full; none when it is not a valid
// regex (check_regex reports that).
std::vector<std::string> matching_modules(const std::string& pattern, const std::vector<std::string>& modules);

// A size a partial models::ModelArgs was not given reads 0: unknown to the rules.
inline std::optional<std::int64_t> known_size(std::int64_t value) {
  return value > 0 ? std::optional<std::int64_t>(value) : std::nullopt;
}

// The model section, read once through models::read_model_args (model_section.cpp): its errors
// and warnings at their keys, unknown keys as a warning (a likely misspelling, with the key it
// resembles) or a note. The reading's gaps are left to the caller.
models::ModelReading read_model_section(const TrainConfig& config, Diagnostics& diag);

// train_dataset as the data loader takes it (dataset_section.cpp). `options` holds what the
// section gives even when it is not complete; `gaps` (formatted with their positions) say what a
// loader still needs (a dataset path, the sequence length, a supported loader type).
struct LoaderReading {
  data::LoaderOptions options;
  std::vector<std::string> gaps;
};
LoaderReading read_loader_options(const TrainConfig& config, Diagnostics& diag);
// training.eval_interval needs a validation split the loader options give samples
// (dataset_section.cpp); nothing to check while the dataset has gaps.
void check_evaluation(const TrainConfig& config, const LoaderReading& loader, Diagnostics& diag);

// The sequence length the run trains on (ResolvedConfig::seq_length), resolved once for every
// check: train_dataset.dataloader.config.seq_length, the length of the samples the model is fed,
// else model.seq_length; 0 when neither gives one. Both given and different is an error naming
// both (dataset_section.cpp).
std::int64_t resolve_seq_length(const models::ModelArgs& model, const data::MegatronDataConfig& data,
                                Diagnostics& diag);

// context.device_target (or --device): the device the run computes on (device_target.cpp).
Device read_device(const TrainConfig& config, Diagnostics& diag);

// training.sample_*: the prompts a run continues while it trains, tokenized with its
// sample_tokenizer (loaded here, so check-config refuses what train would) within the model's
// positions (section_checks.cpp).
void check_sampling(const TrainConfig& config, const models::ModelArgs& model, Diagnostics& diag);

// training, checkpoint, train_dataset's typed fields, monitor, profiler, callbacks, lora_config
// and the top-level keys (section_checks.cpp).
void check_sections(const TrainConfig& config, Diagnostics& diag);
// One warning per field the file writes to ask for something Loom does not do (inert_fields.cpp).
void warn_inert_fields(const TrainConfig& config, Diagnostics& diag);

// parallelism rules that do not depend on the world size, and the pipeline layer placement
// (parallel_checks.cpp), on `seq_length` from resolve_seq_length; `data` says whether the batches
// carry compressed masks.
struct ParallelChecks {
  bool degrees_valid = false;  // every degree >= 1: the layout can be inferred for a world size
  std::optional<PipelinePlan> pipeline;
};
ParallelChecks check_parallelism(const TrainConfig& config, const models::ModelArgs& model,
                                 const data::MegatronDataConfig& data, std::int64_t seq_length, Diagnostics& diag);
// The layout on `world_size` ranks from degrees check_parallelism accepted (parallel_layout.cpp).
std::optional<ParallelLayout> resolve_layout(const TrainConfig& config, int world_size,
                                             std::optional<PipelinePlan> pipeline, Diagnostics& diag);

// optimizer and lr_scheduler, read and checked through optim; their typed fields take what optim
// read (scheduler aliases become class names) (optimizer_checks.cpp).
void read_option_sections(TrainConfig& config, Diagnostics& diag);
// What Muon needs of the model and of the memory sections (optimizer_checks.cpp).
void check_optimizer(const TrainConfig& config, const models::ModelArgs& model, Diagnostics& diag);

// recompute, recompute_comm, swap and their combinations, and the options the memory layer takes
// (memory_checks.cpp). Layer ids count the MTP layers after the decoder layers.
struct MemoryOptions {
  memory::RecomputeOptions recompute;
  memory::SwapOptions swap;
};
MemoryOptions check_memory(const TrainConfig& config, const models::ModelArgs& model, Diagnostics& diag);

// ---- typed access to pass-through (JSON) keys; a wrong type is reported, then nullopt ------
std::optional<double> extra_float(const Json& obj, const char* key, const std::string& prefix, Diagnostics& diag);
std::optional<std::int64_t> extra_int(const Json& obj, const char* key, const std::string& prefix, Diagnostics& diag);
std::optional<bool> extra_bool(const Json& obj, const char* key, const std::string& prefix, Diagnostics& diag);
std::optional<std::string> extra_string(const Json& obj, const char* key, const std::string& prefix,
                                        Diagnostics& diag);
// A JSON value in messages: 'abc', 3, 0.5, true, [..] (optim writes its own values the same way).
using optim::describe_json;

// Warns about pass-through keys that look like misspellings of `known` names.
void warn_unknown_extras(const Json& extras, const std::vector<std::string>& known, const std::string& prefix,
                         const std::string& consumer, Diagnostics& diag);

inline constexpr std::size_t kMaxRegexLength = 1000;
inline constexpr int kMaxRegexGroupDepth = 32;
// Compiles `pattern` as a std::regex (ECMAScript); reports a clear error if it is invalid, too
// long or too deeply nested for std::regex's recursive engine.
bool check_regex(const std::string& pattern, const std::string& path, Diagnostics& diag);

}  // namespace loom::config::detail
