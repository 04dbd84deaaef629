// The configuration resolved for a run: what the layers below config take, computed once from
// the typed sections. `loom check-config` and `loom train` both get it from load_config (which
// runs resolve_config) and the trainer uses it as it is; no layer resolves a section again.
//
// What is resolved, and where each rule is checked (once):
//   device          device_target.cpp (context.device_target, --device)
//   layout          parallel_checks.cpp (degrees, CP/SP/EP rules, pipeline stages) and
//                   parallel_layout.cpp (world-size fit, batch sizes, accumulation)
//   model           model_section.cpp, through models::read_model_args: ModelArgs is the model
//                   section's one reader; config adds positions and did-you-mean hints
//   recompute/swap  memory_checks.cpp (layer specs, prefetch range, recompute/swap combinations)
//   loader          dataset_section.cpp (train_dataset's data-loader keys)
//   memory          memory_estimate.cpp (bytes per rank and host; a run the host cannot hold is a gap)
//   -               section_checks.cpp (training, checkpoint, monitor, profiler, ...: read by the
//                   trainer as sections); optimizer_checks.cpp checks optimizer and lr_scheduler
//                   through optim, which the trainer builds them with (from the sections as written)
// Below config, dist::ParallelDims, memory::plan_memory and data::build_data_loader assert on
// these values. plan_memory still matches the patterns against the built module tree and refuses
// a module both recomputed and swapped, which only the tree shows.
//
// A file can be valid without describing something Loom can run: the model section may name an
// architecture Loom does not build or leave out a size, the dataset may give no data path. These
// are gaps, not errors: check-config accepts the file and prints them as notes; a run needs the
// model and the loader, and model_args() / loader_options() refuse with every gap, each at its line.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/config/diagnostics.h"
#include "loom/core/device.h"
#include "loom/config/memory_estimate.h"
#include "loom/config/parallel_layout.h"
#include "loom/config/sections.h"
#include "loom/data/loader_options.h"
#include "loom/memory/policy.h"
#include "loom/models/model_args.h"

namespace loom::config {

struct ResolvedConfig {
  Device device;  // context.device_target (device_target.cpp): what runtime::make_backend builds
  ParallelLayout layout;
  memory::RecomputeOptions recompute;
  memory::SwapOptions swap;
  // Absent when the section does not describe a model / a dataset Loom can build (see gaps).
  std::optional<models::ModelArgs> model;
  std::optional<data::LoaderOptions> loader;
  // The sequence length a run trains on: the dataset's (even when the dataset has gaps), else
  // the model's; 0 when neither gives one. Every rule on the length reads this one value; both
  // given and different is an error (resolve_seq_length).
  std::int64_t seq_length = 0;
  // The start-up memory estimate (memory_estimate.h), when the model and the sequence length are known.
  std::optional<MemoryEstimate> memory;
  // What keeps this configuration from training, one "<file>:<line>:<col>: <problem>" each.
  std::vector<std::string> gaps;

  // ConfigError listing every gap, if there is one: what a run checks before it starts.
  void require_runnable() const;
  // The model arguments; ConfigError listing every gap when there is no model to build.
  const models::ModelArgs& model_args() const;
  // The data-loader options; ConfigError listing every gap when there is no dataset to read.
  const data::LoaderOptions& loader_options() const;
};

// Resolves `config` (as load_config typed it) for `world_size` ranks: every rule after typing
// runs, each problem goes to `diag` at its position; returns the resolution unless an error was
// found. Gaps are not errors here (check-config reports them as notes).
std::optional<ResolvedConfig> resolve_config(const TrainConfig& config, int world_size, Diagnostics& diag);
// The same for a run: one ConfigError listing every error and every gap, with file:line:col.
// Warnings are dropped (load_config reported them when it loaded the file).
ResolvedConfig resolve_config(const TrainConfig& config, int world_size);

namespace detail {
// Every rule after typing, with or without a world size (without one there is no layout, and
// nothing is returned). What load_config and resolve_config run.
std::optional<ResolvedConfig> resolve(const TrainConfig& config, std::optional<int> world_size, Diagnostics& diag);
}  // namespace detail

}  // namespace loom::config
