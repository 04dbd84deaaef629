#include "loom/config/layer_spec.h"

#include <algorithm>
#include <charconv>
#include <regex>

#include "loom/models/model_args.h"

namespace loom::config {

namespace {

bool to_int64(const std::string& digits, std::int64_t& out) {
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  return ec == std::errc() && ptr == digits.data() + digits.size();
}

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

}  // namespace

std::vector<LayerRange> parse_layer_specs(const LayerSpecs& specs, std::optional<std::int64_t> num_layers,
                                          const std::string& field_path, Diagnostics& diag) {
  static const std::regex spec_re("^(\\d+)(?:-(\\d+))?$");
  std::vector<LayerRange> out;
  std::int64_t prev_last = -1;
  for (std::size_t i = 0; i < specs.specs.size(); ++i) {
    const std::string& text = specs.specs[i];
    const std::string path = index_path(field_path, i);
    std::smatch m;
    if (!std::regex_match(text, m, spec_re)) {
      diag.error(path, "invalid layer spec '" + text +
                           "'; expected one non-negative integer or 'start-end' (e.g. '5', '0-19')");
      continue;
    }
    LayerRange r;
    const bool ok = to_int64(m[1].str(), r.first) && (!m[2].matched || to_int64(m[2].str(), r.last));
    if (!ok) {
      diag.error(path, "layer id in '" + text + "' is too large");
      continue;
    }
    if (!m[2].matched) r.last = r.first;
    if (r.first > r.last) {
      diag.error(path, "range start must be <= end, got '" + text + "'");
      continue;
    }
    // Without the model's depth the bound is the deepest model Loom builds: the ids are expanded
    // into sets, so a range to 2^62 must not get there.
    if (!num_layers && r.last >= models::kMaxLayers) {
      diag.error(path, "layer id " + std::to_string(r.last) + " is beyond any model's depth (Loom builds at most " +
                           std::to_string(models::kMaxLayers) + " layers), got '" + text + "'");
      continue;
    }
    if (num_layers && r.last >= *num_layers) {
      diag.error(path, "layer id " + std::to_string(r.last) + " out of range [0, " + std::to_string(*num_layers - 1) +
                           "], got '" + text + "'");
      continue;
    }
    if (r.first <= prev_last) {
      diag.error(field_path, "layer specs must be in strictly ascending order; spec[" + std::to_string(i) + "] '" +
                                 text + "' starts at " + std::to_string(r.first) + " but previous spec ends at " +
                                 std::to_string(prev_last));
      continue;
    }
    prev_last = r.last;
    out.push_back(r);
  }
  return out;
}

std::vector<LayerRange> parse_layer_specs(const LayerSpecs& specs, std::optional<std::int64_t> num_layers,
                                          const std::string& field_path) {
  Diagnostics diag("layer specs");
  auto ranges = parse_layer_specs(specs, num_layers, field_path, diag);
  if (diag.has_errors()) {
    std::string all;
    for (std::size_t i = 0; i < diag.errors().size(); ++i) {
      // Drop the "layer specs: " source prefix: there is no file here.
      std::string e = diag.errors()[i].substr(std::string("layer specs: ").size());
      all += (i ? "\n" : "") + e;
    }
    throw ConfigError(all);
  }
  return ranges;
}

std::vector<std::int64_t> layer_ids(const std::vector<LayerRange>& ranges) {
  std::vector<std::int64_t> ids;
  for (const auto& r : ranges)
    for (std::int64_t i = r.first; i <= r.last; ++i) ids.push_back(i);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string format_layer_range(const LayerRange& range) {
  if (range.first == range.last) return std::to_string(range.first);
  return std::to_string(range.first) + "-" + std::to_string(range.last);
}

std::vector<int> PipelinePlan::local_stage_indices(int pp_rank) const {
  std::vector<int> out;
  for (int c = 0; c < interleave_num; ++c) out.push_back(c * pipeline_parallel + pp_rank);
  return out;
}

std::optional<PipelinePlan> plan_pipeline(const ParallelismConfig& par, std::optional<std::int64_t> num_layers,
                                          const TrainConfig& config, Diagnostics& diag) {
  const std::string field = "parallelism.pipeline_parallel_layers_per_stage";
  PipelinePlan plan;
  plan.pipeline_parallel = par.pipeline_parallel;
  plan.interleave_num = par.pipeline_parallel_interleave_num;
  if (plan.pipeline_parallel < 1 || plan.interleave_num < 1) return std::nullopt;  // reported elsewhere
  const int pp = plan.pipeline_parallel;
  const int chunks = plan.interleave_num;

  // Schedule (reference pipeline_parallel.py: _infer_schedule_type, _create_schedule).
  std::string schedule = par.pipeline_parallel_schedule;
  std::transform(schedule.begin(), schedule.end(), schedule.begin(), [](unsigned char c) { return std::tolower(c); });
  if (schedule.empty() || schedule == "auto") schedule = "1f1b";
  bool ok = true;
  if (pp > 1) {
    if (schedule != "1f1b" && schedule != "interleaved_1f1b" && schedule != "gpipe") {
      diag.error("parallelism.pipeline_parallel_schedule",
                 "Unsupported pipeline_parallel_schedule '" + par.pipeline_parallel_schedule +
                     "'. Supported values: 1f1b, gpipe, interleaved_1f1b");
      ok = false;
    } else if (schedule == "1f1b" && chunks > 1) {
      schedule = "interleaved_1f1b";
      if (config.is_explicit("parallelism.pipeline_parallel_schedule"))
        diag.warn("parallelism.pipeline_parallel_schedule",
                  "'1f1b' does not run interleaved stages; using 'interleaved_1f1b' because "
                  "pipeline_parallel_interleave_num is " + std::to_string(chunks));
    } else if (schedule == "gpipe" && chunks > 1) {
      diag.error("parallelism.pipeline_parallel_schedule",
                 "'gpipe' runs one chunk per rank, but pipeline_parallel_interleave_num is " + std::to_string(chunks) +
                     "; set pipeline_parallel_interleave_num: 1, or pipeline_parallel_schedule: interleaved_1f1b");
      ok = false;
    } else if (schedule == "interleaved_1f1b" && chunks <= 1) {
      diag.error("parallelism.pipeline_parallel_schedule",
                 "pipeline_parallel_schedule='interleaved_1f1b' requires pipeline_parallel_interleave_num > 1, "
                 "but got " + std::to_string(chunks) + ". Use '1f1b' schedule instead, or set interleave_num > 1.");
      ok = false;
    }
  } else if (chunks > 1) {
    diag.warn("parallelism.pipeline_parallel_interleave_num",
              "is " + std::to_string(chunks) + " but pipeline_parallel is 1; interleaving has no effect");
  }
  plan.schedule = schedule;

  if (pp == 1) {
    if (config.is_explicit(field) && par.pipeline_parallel_layers_per_stage &&
        !par.pipeline_parallel_layers_per_stage->is_auto)
      diag.warn(field, "is ignored because pipeline_parallel is 1");
    plan.is_auto = true;
    plan.interleave_num = 1;
    if (num_layers && *num_layers > 0) plan.stages.push_back(VirtualStage{0, 0, 0, LayerRange{0, *num_layers - 1}});
    return ok ? std::optional<PipelinePlan>(plan) : std::nullopt;
  }

  const int total = pp * chunks;
  if (!par.pipeline_parallel_layers_per_stage) {
    diag.error(field, "is required when pipeline_parallel > 1: set 'auto' (when the number of layers is divisible "
                      "by pipeline_parallel * pipeline_parallel_interleave_num = " + std::to_string(total) +
                      ") or one string of layer ranges per PP rank, e.g. ['0-1, 4-8', '2-3, 9']");
    return std::nullopt;
  }
  const PipelineLayersPerStage& spec = *par.pipeline_parallel_layers_per_stage;
  if (!spec.nested_ints.empty()) {
    diag.error(field, "the List[List[int]] form is not supported; write one string per PP rank with "
                      "pipeline_parallel_interleave_num comma-separated ranges, e.g. ['0-1, 4-8', '2-3, 9']");
    return std::nullopt;
  }
  plan.is_auto = spec.is_auto;
  if (spec.is_auto) {
    if (!num_layers) {
      diag.note("pipeline layer placement 'auto' not checked: the model section gives no num_hidden_layers/num_layers");
      return ok ? std::optional<PipelinePlan>(plan) : std::nullopt;
    }
    if (*num_layers % total != 0) {
      diag.error(field, "Number of layers (" + std::to_string(*num_layers) + ") is not divisible by total stages (" +
                            std::to_string(total) + "). Please configure the model distribution via "
                            "'pipeline_parallel_layers_per_stage'.");
      return std::nullopt;
    }
    const std::int64_t avg = *num_layers / total;
    for (int v = 0; v < total; ++v)
      plan.stages.push_back(VirtualStage{v, v % pp, v / pp, LayerRange{v * avg, (v + 1) * avg - 1}});
    return ok ? std::optional<PipelinePlan>(plan) : std::nullopt;
  }

  if (static_cast<int>(spec.stages.size()) != pp) {
    diag.error(field, "The length of 'pipeline_parallel_layers_per_stage' (" + std::to_string(spec.stages.size()) +
                          ") must equal 'pipeline_parallel' (" + std::to_string(pp) + "), but got " +
                          std::to_string(spec.stages.size()) + " entries for " + std::to_string(pp) + " PP ranks.");
    return std::nullopt;
  }
  std::vector<std::optional<LayerRange>> by_stage(total);
  for (int rank = 0; rank < pp; ++rank) {
    const std::string& stage_str = spec.stages[rank];
    const std::string path = index_path(field, rank);
    std::vector<std::string> ranges;
    std::size_t start = 0;
    while (true) {
      const auto comma = stage_str.find(',', start);
      ranges.push_back(stage_str.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (static_cast<int>(ranges.size()) != chunks) {
      diag.error(path, "PP rank " + std::to_string(rank) + " has " + std::to_string(ranges.size()) +
                           " chunk(s) in 'pipeline_parallel_layers_per_stage' (got '" + stage_str +
                           "'), but 'pipeline_parallel_interleave_num' is " + std::to_string(chunks) +
                           ". Each PP rank must have exactly " + std::to_string(chunks) + " comma-separated chunk(s).");
      ok = false;
      continue;
    }
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const std::string r = trim(ranges[chunk]);
      std::vector<std::string> ids;
      std::size_t s = 0;
      while (true) {
        const auto dash = r.find('-', s);
        ids.push_back(trim(r.substr(s, dash == std::string::npos ? std::string::npos : dash - s)));
        if (dash == std::string::npos) break;
        s = dash + 1;
      }
      if (ids.size() > 2) {
        diag.error(path, "Invalid layer range format: " + r + ". Expected format is 'start-end' or 'single_layer'.");
        ok = false;
        continue;
      }
      LayerRange lr;
      if (!to_int64(ids.front(), lr.first) || !to_int64(ids.back(), lr.last) || lr.first < 0) {
        diag.error(path, "Invalid layer range format: " + r + ". Layer IDs must be integers, got '" + ids.front() +
                             "' and '" + ids.back() + "'");
        ok = false;
        continue;
      }
      if (lr.first > lr.last) {
        diag.error(path, "Invalid layer range format: " + r + ". layer_start must be less than or equal to layer_end.");
        ok = false;
        continue;
      }
      by_stage[chunk * pp + rank] = lr;
    }
  }
  if (!ok) return std::nullopt;
  // Loom also checks what the spec asks for in words: the virtual stages, in order, cover every
  // layer exactly once (the reference would build a model with missing or repeated layers).
  std::int64_t next = 0;
  for (int v = 0; v < total; ++v) {
    const LayerRange lr = *by_stage[v];
    const int rank = v % pp, chunk = v / pp;
    if (lr.first != next) {
      diag.error(index_path(field, rank),
                 "virtual stage " + std::to_string(v) + " (PP rank " + std::to_string(rank) + ", chunk " +
                     std::to_string(chunk) + ") starts at layer " + std::to_string(lr.first) + " but " +
                     (v == 0 ? std::string("the first stage must start at layer 0")
                             : "the previous virtual stage ends at layer " + std::to_string(next - 1)) +
                     "; virtual stages 0, 1, 2, ... (chunk * pipeline_parallel + rank) must cover the layers in order");
      return std::nullopt;
    }
    next = lr.last + 1;
    plan.stages.push_back(VirtualStage{v, rank, chunk, lr});
  }
  if (num_layers && next != *num_layers) {
    diag.error(field, "the virtual stages cover layers 0-" + std::to_string(next - 1) + " but the model has " +
                          std::to_string(*num_layers) + " layers (0-" + std::to_string(*num_layers - 1) + ")");
    return std::nullopt;
  }
  if (!num_layers)
    diag.note("pipeline layer ranges not compared with the model depth: the model section gives no "
              "num_hidden_layers/num_layers");
  return plan;
}

}  // namespace loom::config
