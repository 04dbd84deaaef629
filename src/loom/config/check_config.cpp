#include "loom/config/check_config.h"

#include <charconv>
#include <sstream>

namespace loom::config {

std::string check_config_usage() {
  return "usage: loom check-config FILE [--world-size N] [--set key=value ...] [--device D] [--quiet]\n"
         "\n"
         "Validates a training configuration and prints the effective configuration (every default\n"
         "filled in) and the parallel layout it gets on N ranks.\n"
         "\n"
         "  --world-size N     number of ranks (processes/devices) to check for (default 1)\n"
         "  --set key=value    override a value before validation, e.g. --set training.steps=20\n"
         "                     --set optimizer.betas=[0.9,0.99]; may be repeated\n"
         "  --device D         the device to compute on, as `loom train --device` (context.device_target)\n"
         "  --quiet            only report problems\n"
         "\n"
         "exit status: 0 valid, 1 invalid, 2 unreadable file or bad arguments\n";
}

namespace {

std::string range_text(const LayerRange& r) { return format_layer_range(r); }

void print_lines(std::ostream& err, const std::string& prefix, const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.front() == '(') err << line << "\n";
    else err << prefix << line << "\n";
  }
}

}  // namespace

std::string layout_yaml(const ParallelLayout& layout, const TrainConfig& config) {
  const auto& d = layout.dims;
  std::ostringstream o;
  o << "parallel_layout:\n";
  o << "  world_size: " << layout.world_size << "\n";
  o << "  dp_replicate: " << d.dp_replicate() << "\n";
  o << "  dp_shard: " << d.dp_shard() << "\n";
  o << "  cp: " << d.cp() << "\n";
  o << "  tp: " << d.tp() << "\n";
  o << "  pp: " << d.pp() << "\n";
  o << "  ep: " << d.ep() << "\n";
  o << "  efsdp: " << d.efsdp() << "\n";
  o << "  fsdp: " << d.fsdp() << "\n";
  o << "  data_parallel: " << d.data_parallel() << "\n";
  o << "  sequence_parallel: " << (d.tp() > 1 ? "true" : "false") << "\n";
  o << "  local_batch_size: " << config.training.local_batch_size << "\n";
  o << "  global_batch_size: " << config.training.global_batch_size << "\n";
  o << "  num_accumulation_steps: " << layout.num_accumulation_steps << "\n";
  o << "  samples_per_step: " << layout.samples_per_step << "\n";
  if (layout.rampup) {
    const BatchRampup& r = *layout.rampup;
    o << "  rampup: {start_global_batch_size: " << r.start << ", batch_size_increment: " << r.increment
      << ", rampup_samples: " << r.ramp_samples << ", micro_batches: [";
    const std::vector<std::int64_t> counts = layout.micro_batch_counts();
    for (std::size_t i = 0; i < counts.size(); ++i) o << (i ? ", " : "") << counts[i];
    o << "]}\n";
  }
  o << "  dense_mesh: {";
  const auto dense = d.dense_mesh();
  for (std::size_t i = 0; i < dense.size(); ++i) o << (i ? ", " : "") << dense[i].name << ": " << dense[i].size;
  o << "}\n  sparse_mesh: {";
  const auto sparse = d.sparse_mesh();
  for (std::size_t i = 0; i < sparse.size(); ++i) o << (i ? ", " : "") << sparse[i].name << ": " << sparse[i].size;
  o << "}\n";
  if (layout.pipeline) {
    const PipelinePlan& p = *layout.pipeline;
    o << "  pipeline:\n";
    o << "    schedule: " << p.schedule << "\n";
    o << "    interleave_num: " << p.interleave_num << "\n";
    o << "    num_virtual_stages: " << p.num_virtual_stages() << "\n";
    o << "    placement: " << (p.is_auto ? "auto" : "explicit") << "\n";
    if (p.stages.empty()) {
      o << "    virtual_stages: []  # the model gives no num_hidden_layers/num_layers\n";
    } else {
      o << "    virtual_stages:\n";
      for (const auto& s : p.stages)
        o << "      - {stage: " << s.index << ", pp_rank: " << s.pp_rank << ", chunk: " << s.chunk << ", layers: \""
          << range_text(s.layers) << "\", num_layers: " << (s.layers.last - s.layers.first + 1) << "}\n";
    }
  }
  return o.str();
}

int run_check_config(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                     const RunChecks& run_checks) {
  std::string file;
  LoadOptions options;
  int world_size = 1;
  bool quiet = false;
  auto usage_error = [&](const std::string& why) {
    err << "error: " << why << "\n\n" << check_config_usage();
    return kCheckConfigUnreadable;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value_of = [&](const std::string& flag, std::string& value) {
      if (a == flag) {
        if (i + 1 >= args.size()) return false;
        value = args[++i];
        return true;
      }
      value = a.substr(flag.size() + 1);
      return true;
    };
    if (a == "--help" || a == "-h") {
      out << check_config_usage();
      return kCheckConfigValid;
    } else if (a == "--quiet" || a == "-q") {
      quiet = true;
    } else if (a == "--world-size" || a.rfind("--world-size=", 0) == 0) {
      std::string v;
      if (!value_of("--world-size", v)) return usage_error("--world-size needs a number");
      int n = 0;
      auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || ptr != v.data() + v.size() || n < 1)
        return usage_error("--world-size must be a positive integer, got '" + v + "'");
      world_size = n;
    } else if (a == "--set" || a.rfind("--set=", 0) == 0) {
      std::string v;
      if (!value_of("--set", v)) return usage_error("--set needs key=value");
      options.overrides.push_back(v);
    } else if (a == "--device" || a.rfind("--device=", 0) == 0) {
      std::string v;
      if (!value_of("--device", v)) return usage_error("--device needs a device name, e.g. cpu");
      options.overrides.push_back("context.device_target=" + v);
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      return usage_error("unknown option '" + a + "'");
    } else if (file.empty()) {
      file = a;
    } else {
      return usage_error("only one configuration file can be checked at a time (got '" + file + "' and '" + a + "')");
    }
  }
  if (file.empty()) return usage_error("missing the configuration file");
  options.world_size = world_size;

  LoadedConfig loaded;
  try {
    loaded = load_config_checked(file, options);
    if (run_checks) run_checks(loaded);
  } catch (const ConfigReadError& e) {
    print_lines(err, "error: ", e.what());
    return kCheckConfigUnreadable;
  } catch (const ConfigError& e) {
    print_lines(err, "error: ", e.what());
    err << file << ": invalid for world size " << world_size << "\n";
    return kCheckConfigInvalid;
  }
  for (const auto& w : loaded.warnings) err << "warning: " << w << "\n";
  for (const auto& n : loaded.notes) err << "note: " << n << "\n";
  // Valid, but `loom train` needs a model and a dataset it can build: say what is missing.
  for (const auto& gap : loaded.resolved->gaps) err << "note: loom train cannot run this file: " << gap << "\n";
  if (!quiet) {
    out << effective_config_yaml(loaded.config);
    out << "---\n# Parallel layout on " << world_size << " rank(s)\n" << layout_yaml(loaded.resolved->layout, loaded.config);
  }
  err << file << ": valid for world size " << world_size << "\n";
  return kCheckConfigValid;
}

}  // namespace loom::config
