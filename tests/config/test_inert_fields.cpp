// Fields Loom accepts but does not act on (config/inert_fields.cpp; docs/configuration.md "Fields
// without an effect"): each one the file writes asking for something Loom does not do warns once,
// naming the field and why, at load time (check-config and train share load_config); written with
// the value Loom follows anyway, it is silent.
#include <gtest/gtest.h>

#include "config_test_util.h"

using namespace loom::config::testing;

namespace {

struct Case {
  const char* yaml;     // sections
  const char* path;     // the field warned about
  const char* reason;   // a piece of the warning's why
};

const Case kCases[] = {
    {"training:\n  deterministic: False\n", "training.deterministic", "always run in a fixed order"},
    {"parallelism:\n  data_parallel_shard_strategy: optim\n", "parallelism.data_parallel_shard_strategy",
     "always shards parameters, gradients and optimizer state"},
    {"parallelism:\n  dense_fsdp_shard_size: 2\n", "parallelism.dense_fsdp_shard_size", "whole fsdp axis"},
    {"parallelism:\n  enable_mc2: True\n", "parallelism.enable_mc2", "separate operations"},
    {"parallelism:\n  tensor_parallel: 2\n  enable_loss_parallel: False\n",
     "parallelism.enable_loss_parallel", "over the vocabulary shards"},
    {"parallelism:\n  expert_parallel_async_d2h: True\n", "parallelism.expert_parallel_async_d2h", "host memory"},
    {"parallelism:\n  expert_parallel_use_safe_tokens: True\n", "parallelism.expert_parallel_use_safe_tokens",
     "no zero padding rows"},
    {"parallelism:\n  pipeline_parallel_p2p_transport: auto\n", "parallelism.pipeline_parallel_p2p_transport",
     "point-to-point"},
    {"parallelism:\n  pipeline_parallel_enable_dxdw_split: True\n  pipeline_parallel_overlap_b_f: True\n",
     "parallelism.pipeline_parallel_enable_dxdw_split", "reserved field"},
    {"train_dataset:\n  use_distribute_dataset: True\n  dataloader:\n    type: BlendedMegatronDatasetDataLoader\n",
     "train_dataset.use_distribute_dataset", "reads the same batch"},
    {"train_dataset:\n  numa_enable: True\n  dataloader:\n    type: BlendedMegatronDatasetDataLoader\n",
     "train_dataset.numa_enable", "NUMA"},
    {"train_dataset:\n  dataloader:\n    type: BlendedMegatronDatasetDataLoader\n    python_multiprocessing: True\n",
     "train_dataset.dataloader.python_multiprocessing", "C++ threads"},
    {"monitor:\n  tensorboard:\n    queue_size: 10\n", "monitor.tensorboard.queue_size", "no queue"},
    {"profiler:\n  mstx: True\n", "profiler.mstx", "Ascend profiler"},
    {"profiler:\n  with_stack: True\n", "profiler.with_stack", "Python call stacks"},
    {"profiler:\n  profile_cpu: False\n", "profiler.profile_cpu", "host's activity"},
    {"checkpoint:\n  save_global_layout_cache: False\n", "checkpoint.save_global_layout_cache", "metadata.json"},
    {"checkpoint:\n  load_worker_number: 4\n", "checkpoint.load_worker_number", "one thread"},
    {"context:\n  max_device_memory: 58GB\n", "context.max_device_memory", "LOOM_MEMORY_LIMIT"},
};

}  // namespace

TEST(InertFields, EachWarnsOnceWithItsPathAndWhy) {
  for (const Case& c : kCases) {
    const std::string w = warnings(c.yaml);
    EXPECT_EQ(count(w, std::string(c.path) + ": "), 1) << c.yaml << "\n" << w;
    EXPECT_NE(w.find(c.reason), std::string::npos) << c.yaml << "\n" << w;
  }
}

// The value Loom follows anyway took effect: no warning. Unwritten fields never warn.
TEST(InertFields, TheValueLoomFollowsIsSilent) {
  for (const char* yaml :
       {"training:\n  deterministic: True\n", "parallelism:\n  data_parallel_shard_strategy: optim_grads_params\n",
        "parallelism:\n  enable_mc2: False\n", "parallelism:\n  pipeline_parallel_p2p_transport: plain\n",
        "parallelism:\n  enable_loss_parallel: False\n", "profiler:\n  profile_cpu: True\n",
        "checkpoint:\n  load_worker_number: 1\n", "parallelism:\n  expert_parallel_use_safe_tokens: False\n",
        "monitor:\n  tensorboard:\n    queue_size: 1000\n", "training:\n  steps: 3\n"}) {
    const std::string w = warnings(yaml);
    EXPECT_EQ(w.find("has no effect"), std::string::npos) << yaml << "\n" << w;
    EXPECT_EQ(w.find("is False, but"), std::string::npos) << yaml << "\n" << w;
  }
}
