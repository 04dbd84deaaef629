// Layer specs (memory_optimization.md "Layer range verification", reference _validate_layer_specs)
// and the pipeline placement (parallel_training.md §4.4, reference PpLayerSetting).
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "loom/config/layer_spec.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

namespace {

std::string spec_errors(std::vector<std::string> specs, std::optional<std::int64_t> n) {
  try {
    parse_layer_specs(LayerSpecs{std::move(specs)}, n, "recompute.full_recompute_layer");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::vector<VirtualStage> stages(const std::string& parallelism, int layers, int world) {
  std::string model = "model:\n  model_type: llama\n  num_hidden_layers: " + std::to_string(layers) +
                      "\n  num_attention_heads: 8\n  seq_length: 4096\n";
  LoadedConfig c = load(parallelism + model, world);
  return c.resolved->layout.pipeline->stages;
}

}  // namespace

TEST(LayerSpecs, SinglesRangesAndInts) {
  auto r = parse_layer_specs(LayerSpecs{{"0-3", "5", "7-7"}}, 8, "x");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], (LayerRange{0, 3}));
  EXPECT_EQ(r[1], (LayerRange{5, 5}));
  EXPECT_EQ(r[2], (LayerRange{7, 7}));
  EXPECT_EQ(layer_ids(r), (std::vector<std::int64_t>{0, 1, 2, 3, 5, 7}));
  EXPECT_EQ(format_layer_range(r[0]), "0-3");
  EXPECT_EQ(format_layer_range(r[1]), "5");
}

TEST(LayerSpecs, YamlIntsAndQuotedStringsBothWork) {
  LoadedConfig c = load("recompute:\n  mode: full\n  full_recompute_layer: [0, '2-3', 5]\n");
  EXPECT_EQ(c.config.recompute.full_recompute_layer->specs, (std::vector<std::string>{"0", "2-3", "5"}));
  // The bare YAML `[0-3]` is the string "0-3" (memory_optimization.md writes it so).
  c = load("recompute:\n  mode: full\n  full_recompute_layer: [0-3]\n");
  EXPECT_EQ(c.config.recompute.full_recompute_layer->specs, (std::vector<std::string>{"0-3"}));
  c = load("recompute:\n  mode: full\n  full_recompute_layer: [' 1 ']\n");
  EXPECT_EQ(c.config.recompute.full_recompute_layer->specs, (std::vector<std::string>{"1"}));  // stripped
}

TEST(LayerSpecs, RangeStartMustNotExceedEnd) {
  EXPECT_EQ(spec_errors({"3-1"}, 8), "recompute.full_recompute_layer[0]: range start must be <= end, got '3-1'");
}

TEST(LayerSpecs, LayerIdOutOfRange) {
  EXPECT_EQ(spec_errors({"0-8"}, 8), "recompute.full_recompute_layer[0]: layer id 8 out of range [0, 7], got '0-8'");
  EXPECT_EQ(spec_errors({"0-8"}, std::nullopt), "");  // unknown depth: format checks only
}

TEST(LayerSpecs, MustBeStrictlyAscendingAndNonOverlapping) {
  EXPECT_EQ(spec_errors({"0-3", "3-5"}, 8),
            "recompute.full_recompute_layer: layer specs must be in strictly ascending order; spec[1] '3-5' starts at 3 "
            "but previous spec ends at 3");
  EXPECT_NE(spec_errors({"5", "2"}, 8).find("spec[1] '2' starts at 2 but previous spec ends at 5"), std::string::npos);
}

TEST(LayerSpecs, InvalidFormats) {
  for (const char* bad : {"a", "-1", "1-", "1-2-3", "1.5", "", "1 - 2"})
    EXPECT_NE(spec_errors({bad}, 8).find("invalid layer spec '" + std::string(bad) +
                                         "'; expected one non-negative integer or 'start-end' (e.g. '5', '0-19')"),
              std::string::npos)
        << bad;
  EXPECT_NE(spec_errors({"99999999999999999999"}, 8).find("too large"), std::string::npos);
  EXPECT_NE(errors("recompute:\n  mode: full\n  full_recompute_layer: [[1, 2]]\n").find("invalid layer spec list"),
            std::string::npos);
  EXPECT_NE(errors("recompute:\n  mode: full\n  full_recompute_layer: '0-3'\n")
                .find("expected a list of layer specs like ['0-3', '5'], got str '0-3'; write it as a list: ['0-3']"),
            std::string::npos);
}

TEST(LayerSpecs, AllProblemsOfAListAreReported) {
  const std::string e = spec_errors({"x", "9", "2-1"}, 8);
  EXPECT_EQ(count(e, "\n"), 2) << e;
}

// MTP layer i is layer num_layers + i (MindFormers' activation_checkpoint.py): recompute/swap may
// address it.
TEST(LayerSpecs, MtpLayersCountAfterTheDecoderLayers) {
  const std::string model = "model:\n  model_type: x\n  num_hidden_layers: 4\n  num_nextn_predict_layers: 1\n";
  EXPECT_EQ(errors(model + "recompute:\n  mode: full\n  full_recompute_layer: ['0-4']\n"), "");
  EXPECT_NE(errors(model + "recompute:\n  mode: full\n  full_recompute_layer: ['0-5']\n")
                .find("layer id 5 out of range [0, 4]"),
            std::string::npos);
  const std::string mf_names = "model:\n  model_type: x\n  num_layers: 4\n  mtp_num_layers: 2\n";
  EXPECT_EQ(errors(mf_names + "recompute:\n  mode: full\n  full_recompute_layer: ['5']\n"), "");
}

TEST(LayerSpecs, UnknownDepthSkipsRangesWithANote) {
  LoadedConfig c = load("model:\n  model_type: x\nrecompute:\n  mode: full\n  full_recompute_layer: ['0-99']\n");
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("not checked against the model depth"), std::string::npos);
}

// parallel_training.md §4.4 Scenario 1: 8 layers, pp 2, interleave 2, auto -> 2 layers per stage.
TEST(Pipeline, AutoSplitsEvenly) {
  auto s = stages("parallelism:\n  tensor_parallel: 4\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2\n"
                  "  pipeline_parallel_layers_per_stage: auto\n",
                  8, 8);
  ASSERT_EQ(s.size(), 4u);
  for (int v = 0; v < 4; ++v) {
    EXPECT_EQ(s[v].index, v);
    EXPECT_EQ(s[v].pp_rank, v % 2);
    EXPECT_EQ(s[v].chunk, v / 2);
    EXPECT_EQ(s[v].layers, (LayerRange{2 * v, 2 * v + 1}));
  }
}

TEST(Pipeline, AutoNeedsDivisibleLayers) {
  const std::string e = errors(
      "parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2\n"
      "model:\n  model_type: x\n  num_hidden_layers: 10\n");
  EXPECT_NE(e.find("parallelism.pipeline_parallel_layers_per_stage: Number of layers (10) is not divisible by total "
                   "stages (4). Please configure the model distribution via 'pipeline_parallel_layers_per_stage'."),
            std::string::npos)
      << e;
}

// §4.4 Scenario 2: "0-1, 4-8" / "2-3, 9": virtual stages 0..3 hold 0-1, 2-3, 4-8, 9.
TEST(Pipeline, ExplicitRangesMapToVirtualStages) {
  auto s = stages("parallelism:\n  tensor_parallel: 4\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2\n"
                  "  pipeline_parallel_layers_per_stage: ['0-1, 4-8', '2-3, 9']\n",
                  10, 8);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].layers, (LayerRange{0, 1}));
  EXPECT_EQ(s[1].layers, (LayerRange{2, 3}));
  EXPECT_EQ(s[2].layers, (LayerRange{4, 8}));
  EXPECT_EQ(s[3].layers, (LayerRange{9, 9}));
  EXPECT_EQ(s[2].pp_rank, 0);
  EXPECT_EQ(s[2].chunk, 1);
  PipelinePlan plan;
  plan.pipeline_parallel = 2;
  plan.interleave_num = 2;
  EXPECT_EQ(plan.local_stage_indices(1), (std::vector<int>{1, 3}));
}

TEST(Pipeline, ExplicitListNeedsOneStringPerRank) {
  const std::string e = errors(
      "parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_layers_per_stage: ['0-9']\n"
      "model:\n  model_type: x\n  num_hidden_layers: 10\n");
  EXPECT_NE(e.find("The length of 'pipeline_parallel_layers_per_stage' (1) must equal 'pipeline_parallel' (2), but "
                   "got 1 entries for 2 PP ranks."),
            std::string::npos)
      << e;
}

TEST(Pipeline, EachRankNeedsInterleaveNumChunks) {
  const std::string e = errors(
      "parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2\n"
      "  pipeline_parallel_layers_per_stage: ['0-4', '5-9']\n");
  EXPECT_NE(e.find("PP rank 0 has 1 chunk(s) in 'pipeline_parallel_layers_per_stage' (got '0-4'), but "
                   "'pipeline_parallel_interleave_num' is 2. Each PP rank must have exactly 2 comma-separated chunk(s)."),
            std::string::npos)
      << e;
}

TEST(Pipeline, ChunkFormatErrors) {
  const std::string p = "parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_layers_per_stage: ";
  EXPECT_NE(errors(p + "['0-1-2', '3']\n").find("Invalid layer range format: 0-1-2. Expected format is 'start-end' or "
                                                 "'single_layer'."),
            std::string::npos);
  EXPECT_NE(errors(p + "['a-b', '3']\n").find("Invalid layer range format: a-b. Layer IDs must be integers, got 'a' and 'b'"),
            std::string::npos);
  EXPECT_NE(errors(p + "['4-1', '5']\n").find("layer_start must be less than or equal to layer_end."), std::string::npos);
}

// The spec: "All intervals must exactly cover 0 to num_hidden_layers - 1 in the virtual stage
// sequence" (a Loom check; the reference does not verify it).
TEST(Pipeline, VirtualStagesMustCoverEveryLayerInOrder) {
  const std::string p = "parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_layers_per_stage: ";
  const std::string model = "model:\n  model_type: x\n  num_hidden_layers: 8\n";
  EXPECT_NE(errors(p + "['0-3', '5-7']\n" + model).find("virtual stage 1 (PP rank 1, chunk 0) starts at layer 5 but the "
                                                       "previous virtual stage ends at layer 3"),
            std::string::npos);
  EXPECT_NE(errors(p + "['1-3', '4-7']\n" + model).find("the first stage must start at layer 0"), std::string::npos);
  EXPECT_NE(errors(p + "['0-3', '4-6']\n" + model).find("the virtual stages cover layers 0-6 but the model has 8 layers"),
            std::string::npos);
  EXPECT_EQ(errors(p + "['0-2', '3-7']\n" + model), "");
}

TEST(Pipeline, NullIsRejectedWhenPipelineParallelIsUsed) {
  EXPECT_NE(errors("parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_layers_per_stage: null\n")
                .find("is required when pipeline_parallel > 1"),
            std::string::npos);
  // With pp 1 null is fine (parallel_training.md's overview writes it so).
  EXPECT_EQ(errors("parallelism:\n  pipeline_parallel_layers_per_stage: null\n"), "");
}

TEST(Pipeline, WrongShapesAreTypeErrors) {
  const std::string p = "parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_layers_per_stage: ";
  EXPECT_NE(errors(p + "even\n").find("expected 'auto' or a list, got str 'even'"), std::string::npos);
  EXPECT_NE(errors(p + "[4, 4]\n").find("expected a list of strings (one per pipeline rank)"), std::string::npos);
  EXPECT_NE(errors(p + "[[0, 1], [2, 3]]\n").find("the List[List[int]] form is not supported"), std::string::npos);
}

// reference pipeline_parallel.py _infer_schedule_type / _create_schedule.
TEST(Pipeline, ScheduleInference) {
  const std::string model = "model:\n  model_type: x\n  num_hidden_layers: 8\n";
  LoadedConfig c = load("parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2\n" + model, 2);
  EXPECT_EQ(c.resolved->layout.pipeline->schedule, "interleaved_1f1b");  // 1f1b upgraded silently by default
  c = load("parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_schedule: GPipe\n" + model, 2);
  EXPECT_EQ(c.resolved->layout.pipeline->schedule, "gpipe");
  EXPECT_NE(joined(load("parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2\n"
                        "  pipeline_parallel_schedule: 1f1b\n" + model).warnings)
                .find("using 'interleaved_1f1b'"),
            std::string::npos);
  EXPECT_NE(errors("parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_schedule: interleaved_1f1b\n" + model)
                .find("pipeline_parallel_schedule='interleaved_1f1b' requires pipeline_parallel_interleave_num > 1, but got 1."),
            std::string::npos);
  EXPECT_NE(errors("parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2\n"
                   "  pipeline_parallel_schedule: gpipe\n" + model)
                .find("'gpipe' runs one chunk per rank, but pipeline_parallel_interleave_num is 2"),
            std::string::npos);
  EXPECT_NE(errors("parallelism:\n  pipeline_parallel: 2\n  pipeline_parallel_schedule: zb\n" + model)
                .find("Unsupported pipeline_parallel_schedule 'zb'. Supported values: 1f1b, gpipe, interleaved_1f1b"),
            std::string::npos);
}

TEST(Pipeline, InterleaveWithoutPipelineWarns) {
  EXPECT_NE(warnings("parallelism:\n  pipeline_parallel_interleave_num: 2\n").find("interleaving has no effect"),
            std::string::npos);
}
