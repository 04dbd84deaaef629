// parallel_training.md "Parallelism Configuration Limitations", one test per item, plus the
// other parallelism rules of the spec and the reference (__post_init__, CP methods, SP).
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "loom/config/check_config.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

// Limitation "Total scale": dp_replicate * dp_shard * cp * tp * pp == world_size.
TEST(ParallelLimits, TotalScaleMustMatchTheWorldSize) {
  const std::string e =
      errors("parallelism:\n  tensor_parallel: 3\ntraining:\n  global_batch_size: 8\nmodel:\n  model_type: x\n", 8);
  EXPECT_EQ(e, "test.yaml:1:1: parallelism: Invalid parallel dims: dp_replicate(1) * dp_shard(2) * cp(1) * tp(3) * "
               "pp(1) = 6 != world_size(8); world_size must be divisible by tensor_parallel * pipeline_parallel * "
               "context_parallel = 3");
  EXPECT_NE(e.find("test.yaml:1:1: parallelism: Invalid parallel dims"),
            std::string::npos)
      << e;
}

// Limitation "Data parallel dimension": world // (tp * pp * cp) >= 1 and divisible by dp_shard.
TEST(ParallelLimits, DataParallelDimensionAtLeastOne) {
  EXPECT_NE(errors("parallelism:\n  tensor_parallel: 2\n  pipeline_parallel: 2\n", 2)
                .find("tensor_parallel(2) * pipeline_parallel(2) * context_parallel(1) must be less than or equal to "
                      "world_size(2)."),
            std::string::npos);
  EXPECT_NE(errors("parallelism:\n  data_parallel_shard: 3\ntraining:\n  global_batch_size: 10\n", 10)
                .find("data_parallel_shard (3) must divide data_parallel (10"),
            std::string::npos);
}

// Limitation "Batch size": data_parallel * local_batch_size <= global_batch_size (reference message).
TEST(ParallelLimits, BatchMustCoverEveryDataParallelRank) {
  const std::string e = errors("training:\n  global_batch_size: 4\n  local_batch_size: 1\n", 8);
  EXPECT_NE(e.find("training.global_batch_size: The product of data_parallel and local_batch_size exceeds "
                   "global_batch_size, please increase global_batch_size or decrease local_batch_size. "
                   "(data_parallel 8 x local_batch_size 1 = 8 > global_batch_size 4)"),
            std::string::npos)
      << e;
}

// num_accumulation_steps = global_batch_size // (data_parallel * local_batch_size).
TEST(ParallelLimits, AccumulationStepsAreInferred) {
  LoadedConfig c = load("training:\n  global_batch_size: 32\n  local_batch_size: 2\nparallelism:\n  tensor_parallel: 2\n", 8);
  EXPECT_EQ(c.resolved->layout.dims.data_parallel(), 4);
  EXPECT_EQ(c.resolved->layout.samples_per_micro_step, 8);
  EXPECT_EQ(c.resolved->layout.num_accumulation_steps, 4);
  EXPECT_EQ(c.resolved->layout.samples_per_step, 32);
  EXPECT_TRUE(c.warnings.empty());
}

// The spec floors silently; Loom floors too and warns, naming the dropped samples.
TEST(ParallelLimits, AccumulationFloorsWithAWarning) {
  LoadedConfig c = load("training:\n  global_batch_size: 10\n", 4);
  EXPECT_EQ(c.resolved->layout.num_accumulation_steps, 2);
  EXPECT_EQ(c.resolved->layout.samples_per_step, 8);
  EXPECT_NE(joined(c.warnings).find("10 is not a multiple of data_parallel x local_batch_size = 4: each step accumulates "
                                    "2 micro-batches = 8 samples, and 2 samples of every global batch are dropped"),
            std::string::npos);
}

TEST(ParallelLimits, RampupMustSplitIntoWholeMicroSteps) {
  EXPECT_NE(errors("training:\n  global_batch_size: 16\n  rampup_batch_size: [2, 2, 100]\n", 4)
                .find("rampup_batch_size[0] start_global_batch_size(2) must be divisible by "
                      "data_parallel*local_batch_size(4)."),
            std::string::npos);
  EXPECT_NE(errors("training:\n  global_batch_size: 16\n  rampup_batch_size: [4, 2, 100]\n", 4)
                .find("rampup produces gbs=6 at increment k=1, which is not divisible by "
                      "data_parallel*local_batch_size(4)."),
            std::string::npos);
  LoadedConfig c = load("training:\n  global_batch_size: 16\n  rampup_batch_size: [4, 4, 100]\n", 4);
  EXPECT_EQ(c.resolved->layout.num_accumulation_steps, 1);  // at the start: 4 // 4
}

// Megatron-LM's RampupBatchsizeNumMicroBatchesCalculator (num_microbatches_calculator.py), which
// MindFormers' dynamic batch follows: increments of batch_size_increment every
// rampup_samples / ((gbs - start) / increment) consumed samples, the target once more than
// rampup_samples were consumed; the micro-batch count of a step is its global batch size over
// data_parallel x local_batch_size.
TEST(ParallelLimits, RampupFollowsMegatronsClosedForm) {
  LoadedConfig c = load("training:\n  local_batch_size: 2\n  global_batch_size: 32\n  rampup_batch_size: [8, 8, 100]\n", 2);
  const ParallelLayout& layout = c.resolved->layout;
  ASSERT_TRUE(layout.rampup.has_value());
  for (std::int64_t consumed = 0; consumed <= 240; ++consumed) {
    // The calculator's update(): steps = int(consumed / (ramp_samples / num_increments)).
    const double per_increment = 100.0 / ((32 - 8) / 8);
    const std::int64_t megatron =
        consumed > 100 ? 32 : std::min<std::int64_t>(8 + static_cast<std::int64_t>(consumed / per_increment) * 8, 32);
    EXPECT_EQ(layout.rampup->global_batch_size(consumed), megatron) << consumed;
    EXPECT_EQ(layout.micro_batches_at(consumed), megatron / 4) << consumed;  // data_parallel 2 x local 2
  }
  // The steps of a run: each consumes its own global batch.
  std::vector<std::int64_t> batches;
  for (std::int64_t consumed = 0; batches.size() < 12; consumed += batches.back())
    batches.push_back(layout.micro_batches_at(consumed) * layout.samples_per_micro_step);
  EXPECT_EQ(batches, (std::vector<std::int64_t>{8, 8, 8, 8, 8, 16, 16, 24, 24, 32, 32, 32}));
  EXPECT_EQ(layout.micro_batch_counts(), (std::vector<std::int64_t>{2, 4, 6, 8}));
  EXPECT_EQ(layout.final_micro_batches(), 8);
  // No increments (start = target) or no ramp samples: the target after the first step.
  EXPECT_EQ(BatchRampup({8, 8, 0, 32}).global_batch_size(0), 8);
  EXPECT_EQ(BatchRampup({8, 8, 0, 32}).global_batch_size(1), 32);
  EXPECT_EQ(BatchRampup({32, 8, 100, 32}).global_batch_size(0), 32);
  // check-config shows the ramp with the layout.
  EXPECT_NE(layout_yaml(layout, c.config).find("  rampup: {start_global_batch_size: 8, batch_size_increment: 8, "
                                               "rampup_samples: 100, micro_batches: [2, 4, 6, 8]}"),
            std::string::npos);
}

// Every micro-batch count of the ramp runs through the pipeline schedule, so the interleaved
// schedule's rule applies to each, with the field to change.
TEST(ParallelLimits, EveryRampedCountMustSuitTheInterleavedSchedule) {
  const std::string pp = "parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2\n"
                         "model:\n  model_type: llama\n  num_hidden_layers: 8\n  num_attention_heads: 8\n  seq_length: 64\n";
  // m micro-batches run in m / 2 rounds over 2 stages: 4, 6 and 8 are multiples of theirs, 5 is not
  // a multiple of its 2.
  EXPECT_EQ(errors("training:\n  global_batch_size: 8\n  rampup_batch_size: [4, 2, 16]\n" + pp, 2), "");
  const std::string e = errors("training:\n  global_batch_size: 8\n  rampup_batch_size: [5, 3, 16]\n" + pp, 2);
  EXPECT_NE(e.find("training.rampup_batch_size: the interleaved 1F1B schedule (pipeline_parallel_interleave_num 2) "
                   "runs the 5 micro-batches of a step in 2 rounds"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("change rampup_batch_size"), std::string::npos) << e;
}

// Limitation "TP/SP": SP comes with TP and cannot be disabled. The reference raises for
// tensor_parallel > 1 with sequence_parallel false; Loom accepts the field and warns.
TEST(ParallelLimits, SequenceParallelComesWithTensorParallel) {
  LoadedConfig c = load("parallelism:\n  tensor_parallel: 2\n  sequence_parallel: false\ntraining:\n  global_batch_size: 4\n", 8);
  EXPECT_NE(joined(c.warnings).find("parallelism.sequence_parallel: is false but tensor_parallel is 2: sequence "
                                    "parallelism always comes with tensor parallelism and cannot be disabled"),
            std::string::npos);
  EXPECT_TRUE(load("parallelism:\n  tensor_parallel: 2\ntraining:\n  global_batch_size: 4\n", 8).warnings.empty());
  EXPECT_NE(warnings("parallelism:\n  context_parallel: 2\n  sequence_parallel: true\nmodel:\n  model_type: x\n"
                     "  use_attn_mask_compression: true\n")
                .find("conflicts with context parallelism"),
            std::string::npos);
}

// Limitation "CP method": ulysses needs ulysses_degree_in_cp == context_parallel.
TEST(ParallelLimits, UlyssesDegreeMustEqualContextParallel) {
  const std::string model = "model:\n  model_type: x\n  num_attention_heads: 8\n  use_attn_mask_compression: true\n";
  EXPECT_NE(errors("parallelism:\n  context_parallel: 4\n  context_parallel_method: ulysses\n  ulysses_degree_in_cp: 2\n" + model)
                .find("context_parallel_method 'ulysses' requires ulysses_degree_in_cp == context_parallel (4), got 2"),
            std::string::npos);
  EXPECT_EQ(errors("parallelism:\n  context_parallel: 4\n  context_parallel_method: ulysses\n" + model), "");
}

// "ulysses + async also requires num_attention_heads % ulysses_degree == 0".
TEST(ParallelLimits, UlyssesAsyncNeedsDivisibleHeads) {
  const std::string e = errors(
      "parallelism:\n  context_parallel: 4\n  context_parallel_method: ulysses\n  context_parallel_async: true\n"
      "model:\n  model_type: x\n  num_attention_heads: 6\n  use_attn_mask_compression: true\n  seq_length: 64\n");
  EXPECT_NE(e.find("ulysses with context_parallel_async requires num_attention_heads % ulysses_degree == 0, got "
                   "model.num_attention_heads 6 and ulysses degree 4"),
            std::string::npos)
      << e;
  // With async the per-tensor-parallel-rank rule holds too: 8 heads over tp 4 leave 2 per rank,
  // which a degree of 4 cannot split (8 % 4 == 0 satisfies the spec's rule alone).
  const std::string tp4 = errors(
      "parallelism:\n  context_parallel: 4\n  tensor_parallel: 4\n  context_parallel_method: ulysses\n"
      "  context_parallel_async: true\nmodel:\n  model_type: x\n  num_attention_heads: 8\n"
      "  use_attn_mask_compression: true\n  seq_length: 64\n", 16);
  EXPECT_NE(tp4.find("'ulysses' requires the attention heads per tensor-parallel rank (model.num_attention_heads 8 / "
                     "tensor_parallel 4) to be divisible by the ulysses degree 4"),
            std::string::npos)
      << tp4;
}

// "hybrid requires 1 < ulysses_degree_in_cp < context_parallel and divisibility".
TEST(ParallelLimits, HybridDegree) {
  const std::string model = "model:\n  model_type: x\n  use_attn_mask_compression: true\n";
  const std::string p = "parallelism:\n  context_parallel: 4\n  context_parallel_method: hybrid\n";
  EXPECT_NE(errors(p + model).find("'hybrid' requires ulysses_degree_in_cp with 1 < ulysses_degree_in_cp < "
                                   "context_parallel (4)"),
            std::string::npos);
  for (const char* bad : {"1", "4", "3"})
    EXPECT_NE(errors(p + "  ulysses_degree_in_cp: " + bad + "\n" + model).find("got ulysses_degree_in_cp " + std::string(bad)),
              std::string::npos)
        << bad;
  EXPECT_EQ(errors(p + "  ulysses_degree_in_cp: 2\n" + model), "");
}

// "When CP is enabled, the FSDP shard group size is dp_shard * cp."
TEST(ParallelLimits, FsdpGroupIncludesContextParallel) {
  LoadedConfig c = load("parallelism:\n  context_parallel: 2\ntraining:\n  global_batch_size: 4\nmodel:\n"
                        "  model_type: x\n  use_attn_mask_compression: true\n",
                        8);
  EXPECT_EQ(c.resolved->layout.dims.fsdp(), 8);
}

// "(Required) CP mask compression" with the reference's message.
TEST(ParallelLimits, ContextParallelNeedsACompressedMask) {
  const std::string e = errors("parallelism:\n  context_parallel: 2\n");
  EXPECT_NE(e.find("parallelism.context_parallel: Context parallel (context_parallel > 1) requires a compressed "
                   "attention mask. Please enable use_attn_mask_compression for non-eod data, or "
                   "create_compressed_eod_mask for eod data."),
            std::string::npos)
      << e;
  // EOD data: create_compressed_eod_mask (with create_attention_mask false).
  EXPECT_EQ(errors("parallelism:\n  context_parallel: 2\ntrain_dataset:\n  dataloader:\n    type: X\n    config:\n"
                   "      create_compressed_eod_mask: true\n      create_attention_mask: false\n"),
            "");
  EXPECT_NE(warnings("parallelism:\n  context_parallel: 2\ntrain_dataset:\n  dataloader:\n    type: X\n    config:\n"
                     "      create_compressed_eod_mask: true\n")
                .find("create_attention_mask: should be false"),
            std::string::npos);
  // The skeleton's dataloader.config says False to both: not enough for CP.
  EXPECT_NE(errors("parallelism:\n  context_parallel: 2\ntrain_dataset:\n  dataloader:\n    type: X\n    config:\n"
                   "      create_compressed_eod_mask: False\n")
                .find("requires a compressed attention mask"),
            std::string::npos);
}

TEST(ParallelLimits, ContextParallelMaskTypeAndSequenceLength) {
  const std::string model = "model:\n  model_type: x\n  use_attn_mask_compression: true\n  seq_length: 4097\n";
  const std::string e = errors("parallelism:\n  context_parallel: 2\n  context_parallel_mask_type: full\n" + model);
  EXPECT_NE(e.find("only 'causal' is supported with context parallelism, got 'full'"), std::string::npos);
  EXPECT_NE(e.find("seq_length 4097 must be divisible by context_parallel (2)"), std::string::npos);
}

// Limitation "EP": expert_parallel divides dp_shard * cp * tp; it is not part of the world product.
TEST(ParallelLimits, ExpertParallelDividesTheExpertBlock) {
  const std::string e = errors("parallelism:\n  tensor_parallel: 2\n  expert_parallel: 3\ntraining:\n  global_batch_size: 4\n", 8);
  EXPECT_NE(e.find("parallelism.expert_parallel (3) must divide dp_shard * cp * tp = 8"), std::string::npos) << e;
  LoadedConfig c = load("parallelism:\n  expert_parallel: 8\ntraining:\n  global_batch_size: 8\n", 8);
  EXPECT_EQ(c.resolved->layout.dims.efsdp(), 1);
  EXPECT_EQ(c.resolved->layout.dims.data_parallel(), 8);
}

// "moe_token_dispatcher_type = alltoall_deredundancy requires expert_parallel >= npu_nums_per_device".
TEST(ParallelLimits, DeredundancyDispatcherNeedsLargeExpertParallel) {
  EXPECT_NE(errors("parallelism:\n  expert_parallel: 4\n  moe_token_dispatcher_type: alltoall_deredundancy\n")
                .find("requires expert_parallel >= npu_nums_per_device, got expert_parallel 4 < npu_nums_per_device 8"),
            std::string::npos);
  EXPECT_EQ(errors("parallelism:\n  expert_parallel: 4\n  npu_nums_per_device: 4\n"
                   "  moe_token_dispatcher_type: alltoall_deredundancy\n"),
            "");
}

// Expert parallelism trains with either dispatcher (dist/expert_parallel.h): no start-up gap.
TEST(ParallelRules, ExpertParallelTrainsWithEitherDispatcher) {
  auto gaps_about = [](const LoadedConfig& c, const std::string& what) {
    std::string out;
    for (const std::string& g : c.resolved->gaps)
      if (g.find(what) != std::string::npos) out += g;
    return out;
  };
  LoadedConfig plain = load("parallelism:\n  expert_parallel: 2\ntraining:\n  global_batch_size: 2\n", 2);
  ASSERT_TRUE(plain.resolved.has_value());
  EXPECT_EQ(gaps_about(plain, "expert_parallel"), "");
  EXPECT_EQ(gaps_about(plain, "moe_token_dispatcher_type"), "");
  LoadedConfig deredundant = load("parallelism:\n  expert_parallel: 2\n  npu_nums_per_device: 2\n"
                                  "  moe_token_dispatcher_type: alltoall_deredundancy\ntraining:\n"
                                  "  global_batch_size: 2\n", 2);
  ASSERT_TRUE(deredundant.resolved.has_value());
  EXPECT_EQ(gaps_about(deredundant, "moe_token_dispatcher_type"), "");
  EXPECT_EQ(gaps_about(deredundant, "expert_parallel"), "");
}

// Nodes are blocks of npu_nums_per_device ep ranks: ep must fill whole nodes.
TEST(ParallelLimits, DeredundancyNodesDivideExpertParallel) {
  const std::string e = errors("parallelism:\n  expert_parallel: 6\n  npu_nums_per_device: 4\n"
                               "  moe_token_dispatcher_type: alltoall_deredundancy\n");
  EXPECT_NE(e.find("parallelism.npu_nums_per_device: moe_token_dispatcher_type 'alltoall_deredundancy' groups the "
                   "expert_parallel ranks into nodes of npu_nums_per_device, so expert_parallel (6) must be a multiple "
                   "of npu_nums_per_device (4)"),
            std::string::npos)
      << e;
  EXPECT_EQ(errors("parallelism:\n  expert_parallel: 4\n  npu_nums_per_device: 2\n"
                   "  moe_token_dispatcher_type: alltoall_deredundancy\n"),
            "");
  // The plain dispatcher ignores npu_nums_per_device.
  EXPECT_EQ(errors("parallelism:\n  expert_parallel: 6\n  npu_nums_per_device: 4\n"), "");
}

TEST(ParallelRules, EnumeratedValues) {
  EXPECT_NE(errors("parallelism:\n  reshard_after_forward_policy: sometimes\n")
                .find("must be one of 'always', 'never', 'default', got 'sometimes'"),
            std::string::npos);
  EXPECT_NE(errors("parallelism:\n  context_parallel_method: ulyses\n").find("did you mean 'ulysses'?"),
            std::string::npos);
  EXPECT_NE(errors("parallelism:\n  moe_token_dispatcher_type: allgather\n").find("must be one of 'alltoall'"),
            std::string::npos);
  EXPECT_NE(errors("parallelism:\n  pipeline_parallel_p2p_transport: fast\n").find("must be one of 'auto', 'plain'"),
            std::string::npos);
}

TEST(ParallelRules, DegreesMustBePositive) {
  const std::string e = errors("parallelism:\n  tensor_parallel: 0\n  pipeline_parallel_interleave_num: 0\n"
                               "  data_parallel_shard: 0\n", 1);
  EXPECT_NE(e.find("parallelism.tensor_parallel: must be >= 1, got 0"), std::string::npos);
  EXPECT_NE(e.find("parallelism.pipeline_parallel_interleave_num: must be >= 1, got 0"), std::string::npos);
  EXPECT_NE(e.find("parallelism.data_parallel_shard: must be -1"), std::string::npos);
}

TEST(ParallelRules, ModelMustSplitOverTensorAndExpertRanks) {
  const std::string model = "model:\n  model_type: x\n  num_attention_heads: 6\n  n_routed_experts: 6\n  seq_length: 4096\n";
  const std::string e = errors("parallelism:\n  tensor_parallel: 4\n  expert_parallel: 4\n" + model);
  EXPECT_NE(e.find("model.num_attention_heads (6) must be divisible by tensor_parallel (4)"), std::string::npos);
  EXPECT_NE(e.find("the number of routed experts (6) must be divisible by expert_parallel (4)"), std::string::npos);
  EXPECT_NE(errors("parallelism:\n  tensor_parallel: 4\nmodel:\n  model_type: x\n  seq_length: 4098\n")
                .find("the sequence length per CP rank (4098) must be divisible by tensor_parallel (4)"),
            std::string::npos);
}

TEST(ParallelRules, ComputedAndReservedFieldsWarn) {
  EXPECT_NE(warnings("parallelism:\n  pipeline_parallel_microbatch_size: 4\n").find("is computed, not configured"),
            std::string::npos);
  // Reserved (parallel_training.md): no effect, and the warning does not suggest one with overlap_b_f.
  const std::string dxdw = warnings("parallelism:\n  pipeline_parallel_enable_dxdw_split: true\n");
  EXPECT_NE(dxdw.find("has no effect: it is a reserved field"), std::string::npos) << dxdw;
  EXPECT_EQ(dxdw.find("has no effect without"), std::string::npos) << dxdw;
  // A shard degree the world cannot give is an error (it was a warning, and the run trained on
  // with another layout than the file's).
  EXPECT_NE(errors("parallelism:\n  data_parallel_shard: 16\ntraining:\n  global_batch_size: 8\n", 8)
                .find("is 16 but the inferred shard degree is 8 (data_parallel 8 = dp_replicate 1 x dp_shard 8 on 8 "
                      "ranks); set it to a divisor of data_parallel (8) or -1"),
            std::string::npos);
}

TEST(ParallelRules, WorldSizeOneIsTheDefaultLayout) {
  LoadedConfig c = load("", 1);
  ASSERT_TRUE(c.resolved.has_value());
  EXPECT_EQ(c.resolved->layout.dims.data_parallel(), 1);
  EXPECT_EQ(c.resolved->layout.num_accumulation_steps, 1);
  ASSERT_TRUE(c.resolved->layout.pipeline.has_value());
  ASSERT_EQ(c.resolved->layout.pipeline->stages.size(), 1u);
  EXPECT_EQ(c.resolved->layout.pipeline->stages[0].layers, (LayerRange{0, 7}));
}

TEST(ParallelRules, LayoutWaitsForTypeErrors) {
  // A mistyped batch size would fall back to 1 and fail the batch check; only the real error shows.
  const std::string e = errors("training:\n  global_batch_size: eight\n", 8);
  EXPECT_NE(e.find("expected int, got str 'eight'"), std::string::npos);
  EXPECT_EQ(e.find("exceeds global_batch_size"), std::string::npos);
}

TEST(ParallelRules, ProfilerRanksOutsideTheWorldWarn) {
  EXPECT_NE(warnings("profiler:\n  profiler_rank: [0, 9]\ntraining:\n  global_batch_size: 8\n", 8)
                .find("profiler.profiler_rank[1]: rank 9 does not exist in a world of 8 ranks"),
            std::string::npos);
}

// Context parallelism as Loom trains it (dist/context_parallel.h): the load-balanced split needs
// 2·cp chunks, MTP trains under CP (its shifts happen before the split), and Ulysses splits the
// heads per tensor-parallel rank with or without async.
TEST(ParallelLimits, ContextParallelLoomRules) {
  const std::string model = "model:\n  model_type: x\n  use_attn_mask_compression: true\n  num_attention_heads: 8\n";
  const std::string cp2 = "parallelism:\n  context_parallel: 2\n";
  EXPECT_NE(errors(cp2 + model + "  seq_length: 66\n").find("seq_length 66 must be divisible by 2 * context_parallel (4)"),
            std::string::npos);
  EXPECT_EQ(errors(cp2 + "  context_parallel_load_balance: false\n" + model + "  seq_length: 66\n"), "");
  EXPECT_EQ(errors(cp2 + model + "  seq_length: 64\n"), "");
  EXPECT_EQ(errors(cp2 + model + "  seq_length: 64\n  mtp_num_layers: 1\n"), "");
  const std::string ulysses = "parallelism:\n  context_parallel: 4\n  context_parallel_method: ulysses\n";
  const std::string six = "model:\n  model_type: x\n  use_attn_mask_compression: true\n  num_attention_heads: 6\n";
  EXPECT_NE(errors(ulysses + six).find("'ulysses' requires the attention heads per tensor-parallel rank "
                                       "(model.num_attention_heads 6 / tensor_parallel 1) to be divisible by the "
                                       "ulysses degree 4"),
            std::string::npos);
  EXPECT_NE(errors(ulysses + model + "  num_key_value_heads: 3\n").find("'ulysses' requires the KV heads per "
                                                                          "tensor-parallel rank (3) and the ulysses "
                                                                          "degree 4 to divide one another"),
            std::string::npos);
  EXPECT_EQ(errors(ulysses + model + "  num_key_value_heads: 2\n"), "");  // 2 KV heads repeated for 4 ranks
  EXPECT_NE(warnings(cp2 + "  context_parallel_async: true\n" + model).find("context_parallel_async: has no effect"),
            std::string::npos);
}

// Pipeline parallelism trains; the schedule's micro-batches are the accumulation steps, and the
// counts interleaved 1F1B cannot run (the reference's m % max(1, m // p) rule) stop at start-up.
TEST(ParallelRules, PipelineMicroBatchCounts) {
  LoadedConfig ok = load("parallelism:\n  pipeline_parallel: 2\ntraining:\n  global_batch_size: 8\n", 2);
  ASSERT_TRUE(ok.resolved.has_value());
  EXPECT_EQ(joined(ok.resolved->gaps).find("pipeline_parallel"), std::string::npos) << joined(ok.resolved->gaps);
  EXPECT_EQ(ok.resolved->layout.num_accumulation_steps, 8);
  EXPECT_EQ(ok.resolved->layout.pipeline->stages[1].layers, (LayerRange{4, 7}));

  EXPECT_NE(warnings("parallelism:\n  pipeline_parallel: 4\ntraining:\n  global_batch_size: 2\n", 4)
                .find("training.global_batch_size: gives 2 micro-batches per step, fewer than the 4 pipeline stages"),
            std::string::npos);
  const std::string e = errors("parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2\n"
                               "training:\n  global_batch_size: 5\n", 2);
  EXPECT_NE(e.find("training.global_batch_size: the interleaved 1F1B schedule (pipeline_parallel_interleave_num 2) "
                   "runs the 5 micro-batches of a step in 2 rounds"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("change global_batch_size or local_batch_size"), std::string::npos) << e;
  EXPECT_EQ(errors("parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2\n"
                   "training:\n  global_batch_size: 6\n", 2),
            "");
}

// Every pipeline option trains: overlap_b_f on a MoE model, turned off with a warning on a dense
// one (as the reference), GPipe, Muon's QK-clip.
TEST(ParallelRules, PipelineOptionsTrain) {
  LoadedConfig c = load("parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_overlap_b_f: true\n"
                        "  pipeline_parallel_schedule: gpipe\ntraining:\n  global_batch_size: 4\n", 2);
  ASSERT_TRUE(c.resolved.has_value());
  const std::string gaps = joined(c.resolved->gaps);
  EXPECT_EQ(gaps.find("pipeline_parallel_overlap_b_f"), std::string::npos) << gaps;
  EXPECT_NE(joined(c.warnings).find("has no effect for a dense model"),
            std::string::npos)
      << joined(c.warnings);
  EXPECT_FALSE(c.resolved->layout.pipeline->overlap_b_f);
  LoadedConfig moe = load("parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_overlap_b_f: true\n"
                          "training:\n  global_batch_size: 4\nmodel:\n  model_type: qwen3_moe\n  num_hidden_layers: 4\n"
                          "  num_experts: 4\n  num_experts_per_tok: 2\n", 2);
  ASSERT_TRUE(moe.resolved.has_value());
  EXPECT_TRUE(moe.resolved->layout.pipeline->overlap_b_f);
  EXPECT_EQ(joined(moe.warnings).find("overlap_b_f"), std::string::npos) << joined(moe.warnings);
  // GPipe trains (a Loom extension: the reference reserves the string).
  EXPECT_EQ(gaps.find("pipeline_parallel_schedule"), std::string::npos) << gaps;
  LoadedConfig muon = load("parallelism:\n  pipeline_parallel: 2\ntraining:\n  global_batch_size: 4\n"
                           "optimizer:\n  type: Muon\nmodel:\n  model_type: deepseek_v3\n  num_hidden_layers: 4\n"
                           "  multi_latent_attention: True\n", 2);
  ASSERT_TRUE(muon.resolved.has_value());
  // QK-clip's maxima are reduced over the ranks of each stage: Muon with QK-clip trains under pp.
  EXPECT_EQ(joined(muon.resolved->gaps).find("QK-clip"), std::string::npos) << joined(muon.resolved->gaps);
}
