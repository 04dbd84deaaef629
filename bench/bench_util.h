// Shared by the parallel-strategy benchmarks (bench_tp, bench_ep, bench_pipeline, bench_cp): the
// random token batches they train on and the command line every one of them takes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/config/config.h"
#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/core/tensor.h"
#include "loom/dist/runtime.h"
#include "cpu_path.h"

namespace loom::bench {

// Random input ids and labels [B, S] for batch `index` (the same index gives the same tokens on
// every rank that passes it: the ranks of one data shard). Batch: data::Batch or nn::LMBatch.
template <class Batch>
Batch random_tokens(int64_t vocab, int64_t B, int64_t S, uint64_t index) {
  std::vector<int32_t> ids(static_cast<size_t>(B * S)), labels(ids.size());
  for (int64_t i = 0; i < B * S; ++i) {
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(stream_uniform({index, 1, 0}, i) * vocab) % static_cast<int32_t>(vocab);
    labels[static_cast<size_t>(i)] = static_cast<int32_t>(stream_uniform({index, 2, 0}, i) * vocab) % static_cast<int32_t>(vocab);
  }
  Batch b;
  b.input_ids = Tensor::from_vector(ids, {B, S});
  b.labels = Tensor::from_vector(labels, {B, S});
  return b;
}

// `--config FILE [--set key=value]... [AXIS_FLAG N] --steps N --warmup N`, where AXIS_FLAG (e.g.
// "--tp") sets parallelism.AXIS_FIELD; the configuration loaded for this world.
struct BenchCommandLine {
  std::string config_path;
  config::LoadedConfig loaded;
  int steps = 4;
  int warmup = 1;
};
inline BenchCommandLine parse_bench_command_line(int argc, char** argv, dist::Runtime& rt,
                                                 const std::string& axis_flag = "",
                                                 const std::string& axis_field = "") {
  config::LoadOptions load;
  BenchCommandLine out;
  std::string& config_path = out.config_path;
  const std::string usage = "use --config FILE" + (axis_flag.empty() ? "" : " [" + axis_flag + " N]") +
                            " [--set key=value]... --steps N --warmup N";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { LOOM_CHECK(i + 1 < argc, ValueError, a, " needs a value"); return argv[++i]; };
    if (a == "--config") config_path = next();
    else if (a == "--set") load.overrides.push_back(next());
    else if (!axis_flag.empty() && a == axis_flag) load.overrides.push_back("parallelism." + axis_field + "=" + next());
    else if (a == "--steps") out.steps = std::stoi(next());
    else if (a == "--warmup") out.warmup = std::stoi(next());
    else LOOM_THROW(ValueError, "unknown option ", a, "; ", usage);
  }
  LOOM_CHECK(!config_path.empty(), ValueError, "--config FILE is required (e.g. configs/bench/size_a.yaml)");
  LOOM_CHECK(out.steps >= 1 && out.warmup >= 0, ValueError, "--steps must be >= 1 and --warmup >= 0");
  load.world_size = rt.world_size();
  out.loaded = config::load_config(config_path, load);
  return out;
}

}  // namespace loom::bench
