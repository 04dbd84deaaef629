#include "loom/config/resolved_config.h"

#include "loom/config/checks.h"
#include "loom/config/memory_estimate.h"
#include "loom/core/error.h"
#include "loom/models/accounting.h"

namespace loom::config {

namespace {

[[noreturn]] void throw_problems(const std::vector<std::string>& lines, const std::string& source) {
  LOOM_ASSERT(!lines.empty());
  std::string all;
  for (std::size_t i = 0; i < lines.size(); ++i) all += (i ? "\n" : "") + lines[i];
  if (lines.size() > 1) all += "\n(" + std::to_string(lines.size()) + " configuration errors in " + source + ")";
  throw ConfigError(all);
}

std::string gap_source(const std::vector<std::string>& gaps) {
  // Every gap starts with its position; the file is what precedes the first ':'.
  return gaps.empty() ? std::string("<config>") : gaps.front().substr(0, gaps.front().find(':'));
}

// The start-up memory estimate (memory_estimate.h): a product of sizes that overflows is an
// error naming the field; a run this host cannot hold is a gap, so check-config shows it and
// train stops before it allocates anything.
void add_memory_gap(const TrainConfig& c, const models::ModelArgs& model, std::int64_t seq_length,
                    ResolvedConfig& r, Diagnostics& diag) {
  if (seq_length <= 0) return;
  try {
    r.memory = estimate_memory(c, model, r.layout, r.recompute, seq_length, ranks_per_host(r.layout.world_size));
    const std::optional<HostMemory> host = host_memory();
    if (!host) return;
    const std::string problem = memory_fit_problem(*r.memory, *host, c, model, r.recompute);
    if (problem.empty()) return;
    const bool state_heavy = r.memory->activation_bytes <= r.memory->parameter_bytes + r.memory->gradient_bytes +
                                                                r.memory->optimizer_bytes;
    const std::string path = state_heavy ? "model" : "training.local_batch_size";
    r.gaps.push_back(diag.positioned(path, path + ": " + problem));
  } catch (const models::SizeOverflow& e) {
    const std::string path = e.field == "seq_length" ? "train_dataset.dataloader.config.seq_length"
                                                     : "model." + e.field;
    diag.error(path, std::string("the memory estimate: ") + e.what());
  }
}

}  // namespace

void ResolvedConfig::require_runnable() const {
  if (!gaps.empty()) throw_problems(gaps, gap_source(gaps));
}

const models::ModelArgs& ResolvedConfig::model_args() const {
  if (!model) require_runnable();
  return *model;
}

const data::LoaderOptions& ResolvedConfig::loader_options() const {
  if (!loader) require_runnable();
  return *loader;
}

namespace detail {

std::optional<ResolvedConfig> resolve(const TrainConfig& c, std::optional<int> world_size, Diagnostics& diag) {
  // The sections other layers consume, each read once; the rules below judge what they say.
  models::ModelReading model = read_model_section(c, diag);
  LoaderReading loader = read_loader_options(c, diag);
  check_sections(c, diag);
  check_evaluation(c, loader, diag);
  check_sampling(c, model.args, diag);
  const Device device = read_device(c, diag);
  const std::int64_t seq_length = resolve_seq_length(model.args, loader.options.config, diag);
  ParallelChecks parallel = check_parallelism(c, model.args, loader.options.config, seq_length, diag);
  check_optimizer(c, model.args, diag);
  MemoryOptions memory = check_memory(c, model.args, diag);
  if (!world_size || !parallel.degrees_valid) return std::nullopt;
  std::optional<ParallelLayout> layout = resolve_layout(c, *world_size, std::move(parallel.pipeline), diag);
  if (!layout || diag.has_errors()) return std::nullopt;

  ResolvedConfig r;
  r.device = device;
  r.layout = std::move(*layout);
  r.recompute = std::move(memory.recompute);
  r.swap = std::move(memory.swap);
  for (const auto& gap : model.gaps) r.gaps.push_back(diag.positioned(gap.path, gap.message));
  r.gaps.insert(r.gaps.end(), loader.gaps.begin(), loader.gaps.end());
  if (c.lora_config)
    r.gaps.push_back(diag.positioned("lora_config", "lora_config: LoRA fine-tuning is not supported by Loom yet; remove "
                                                    "the section to train all parameters"));
  r.seq_length = seq_length;
  if (model.gaps.empty()) add_memory_gap(c, model.args, seq_length, r, diag);
  if (model.gaps.empty()) r.model = std::move(model.args);
  if (loader.gaps.empty()) r.loader = std::move(loader.options);
  return r;
}

}  // namespace detail

std::optional<ResolvedConfig> resolve_config(const TrainConfig& config, int world_size, Diagnostics& diag) {
  return detail::resolve(config, world_size, diag);
}

ResolvedConfig resolve_config(const TrainConfig& config, int world_size) {
  const std::string source = config.source.empty() ? "<config>" : config.source;
  Diagnostics diag(source, config.marks);
  std::optional<ResolvedConfig> resolved = detail::resolve(config, world_size, diag);
  std::vector<std::string> problems = diag.errors();
  if (resolved) problems.insert(problems.end(), resolved->gaps.begin(), resolved->gaps.end());
  if (!problems.empty()) throw_problems(problems, source);
  LOOM_ASSERT(resolved.has_value());
  return std::move(*resolved);
}

}  // namespace loom::config
