// recompute / recompute_comm / swap: memory_optimization.md ("Combination Constraints") and the
// reference activation_checkpoint.py validations, one test per rule and message.
#include <gtest/gtest.h>

#include "config_test_util.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

// recompute.mode accepts "None", "full", "select" (other values fail at construction).
TEST(RecomputeRules, ModeValues) {
  EXPECT_EQ(errors("recompute:\n  mode: None\n"), "");
  EXPECT_NE(errors("recompute:\n  mode: Full\n").find("recompute.mode: must be \"None\", \"full\" or \"select\", got "
                                                      "'Full'; did you mean 'full'?"),
            std::string::npos);
  EXPECT_NE(errors("recompute:\n  mode: null\n").find("cannot be None"), std::string::npos);
}

TEST(RecomputeRules, FullNeedsFullRecomputeLayer) {
  EXPECT_NE(errors("recompute:\n  mode: full\n").find("recompute.full_recompute_layer: mode is 'full' but "
                                                      "full_recompute_layer is missing or empty"),
            std::string::npos);
  EXPECT_NE(errors("recompute:\n  mode: full\n  full_recompute_layer: []\n").find("missing or empty"),
            std::string::npos);
}

TEST(RecomputeRules, SelectNeedsSelectModule) {
  EXPECT_NE(errors("recompute:\n  mode: select\n").find("recompute.select_module: mode is 'select' but select_module "
                                                        "is missing or empty"),
            std::string::npos);
}

// select_module must be a dict; the list form is rejected as in the reference.
TEST(RecomputeRules, SelectModuleMustBeADict) {
  EXPECT_NE(errors("recompute:\n  mode: select\n  select_module: ['.*mlp']\n")
                .find("recompute.select_module: must be a dict (module path -> list of layer ranges), got list"),
            std::string::npos);
  EXPECT_NE(errors("recompute:\n  mode: select\n  select_module:\n    '.*mlp': '0-3'\n")
                .find("recompute.select_module['.*mlp']: value must be a list or tuple of layer ranges, got str"),
            std::string::npos);
}

// select_module keys are regular expressions (fullmatch over module paths).
TEST(RecomputeRules, SelectModuleKeysAreRegexes) {
  EXPECT_NE(errors("recompute:\n  mode: select\n  select_module:\n    '.*mlp(': ['0']\n")
                .find("recompute.select_module['.*mlp(']: '.*mlp(' is not a valid regular expression (ECMAScript syntax)"),
            std::string::npos);
  // A pattern that matches no module is only a warning (the reference logs it and trains on).
  const std::string w = warnings("recompute:\n  mode: select\n  select_module:\n    'attention': ['0-1']\n    'mlp': ['2']\n");
  EXPECT_NE(w.find("pattern 'attention' matches no module of a Loom decoder layer"), std::string::npos) << w;
  EXPECT_EQ(w.find("pattern 'mlp'"), std::string::npos) << w;
  EXPECT_EQ(warnings("recompute:\n  mode: select\n  select_module:\n    '.*attention': ['0-1']\n"), "");
}

TEST(RecomputeRules, LayerSpecsAreValidatedAgainstTheModel) {
  EXPECT_NE(errors("recompute:\n  mode: full\n  full_recompute_layer: ['0-8']\n")
                .find("recompute.full_recompute_layer[0]: layer id 8 out of range [0, 7], got '0-8'"),
            std::string::npos);
  EXPECT_NE(errors("recompute:\n  mode: select\n  select_module:\n    '.*mlp': ['3', '1']\n")
                .find("recompute.select_module['.*mlp']: layer specs must be in strictly ascending order"),
            std::string::npos);
}

TEST(RecomputeRules, ExcludeOpNeedsNames) {
  EXPECT_NE(errors("recompute:\n  mode: full\n  full_recompute_layer: ['0']\n  exclude_op: ['AllGather', '']\n")
                .find("recompute.exclude_op[1]: operator names must be non-empty strings"),
            std::string::npos);
}

TEST(RecomputeRules, FieldsOfAnOffModeAreIgnoredWithAWarning) {
  EXPECT_NE(warnings("recompute:\n  full_recompute_layer: ['0']\n").find("is ignored because recompute.mode is \"None\""),
            std::string::npos);
  EXPECT_NE(warnings("recompute:\n  mode: full\n  full_recompute_layer: ['0']\n  select_module:\n    '.*mlp': ['1']\n")
                .find("is ignored in mode 'full'"),
            std::string::npos);
}

// "The select_module must be provided under the condition of recompute_comm.enable: True."
TEST(RecomputeCommRules, EnableNeedsSelectModule) {
  EXPECT_NE(errors("recompute_comm:\n  enable: true\n").find("recompute_comm.select_module: enable is True but "
                                                             "select_module is missing or empty"),
            std::string::npos);
  EXPECT_EQ(errors("recompute_comm:\n  enable: true\n  select_module:\n    '.*\\.all_gather': ['0-3']\n"), "");
  EXPECT_NE(errors("recompute_comm:\n  enable: true\n  select_module:\n    '.*': ['0-9']\n").find("layer id 9 out of range"),
            std::string::npos);
}

// "SWAP does not support pipeline parallelism" (reference message).
TEST(SwapRules, NotWithPipelineParallel) {
  EXPECT_NE(errors("swap:\n  enable: true\n  layer_swap:\n    - layers: ['0']\nparallelism:\n  pipeline_parallel: 2\n")
                .find("swap.enable: swap is not supported with pipeline parallel (pipeline_parallel = 2)"),
            std::string::npos);
}

// "swap.default_prefetch must be within the range of [1, num_layers-1]".
TEST(SwapRules, DefaultPrefetchRange) {
  EXPECT_NE(errors("swap:\n  enable: true\n  default_prefetch: 0\n").find("swap.default_prefetch: value 0 out of range [1, 7]"),
            std::string::npos);
  EXPECT_NE(errors("swap:\n  enable: true\n  default_prefetch: 8\n").find("value 8 out of range [1, 7]"), std::string::npos);
}

// "the maximum layer ID plus default_prefetch must be less than num_layers".
TEST(SwapRules, MaxLayerPlusPrefetch) {
  EXPECT_NE(errors("swap:\n  enable: true\n  default_prefetch: 2\n  layer_swap:\n    - layers: ['0-6']\n")
                .find("swap.layer_swap[0].layers: max layer id 6 plus prefetch 2 exceeds num_layers (8); max allowed "
                      "layer id is 5"),
            std::string::npos);
  EXPECT_NE(errors("swap:\n  enable: true\n  op_swap:\n    - op_name: '.*mlp'\n      layers: ['7']\n")
                .find("swap.op_swap[0].layers: max layer id 7 plus prefetch 1 exceeds num_layers (8)"),
            std::string::npos);
  EXPECT_EQ(errors("swap:\n  enable: true\n  layer_swap:\n    - layers: ['0-6']\n"), "");
}

TEST(SwapRules, EntryStructure) {
  EXPECT_NE(errors("swap:\n  enable: true\n  layer_swap:\n    - {}\n").find("swap.layer_swap[0]: each entry must include 'layers'"),
            std::string::npos);
  EXPECT_NE(errors("swap:\n  enable: true\n  op_swap:\n    - layers: ['1']\n")
                .find("swap.op_swap[0]: each entry must include 'op_name' and 'layers'"),
            std::string::npos);
  EXPECT_NE(errors("swap:\n  enable: true\n  op_swap:\n    - op_name: ' '\n      layers: ['1']\n")
                .find("op_name must be a non-empty str"),
            std::string::npos);
  EXPECT_NE(errors("swap:\n  enable: true\n  layer_swap: {layers: ['0']}\n").find("swap.layer_swap: expected List[LayerSwapItem]"),
            std::string::npos);
  EXPECT_NE(errors("swap:\n  enable: true\n  layer_swap:\n    - layer: ['0']\n")
                .find("Unknown configuration keys for LayerSwapItem: ['layer']; did you mean 'layers'?"),
            std::string::npos);
  EXPECT_NE(errors("swap:\n  enable: true\n  op_swap:\n    - op_name: '(x'\n      layers: ['1']\n")
                .find("is not a valid regular expression"),
            std::string::npos);
}

// The reference: "layer_swap actually takes only the first entry"; Loom merges them and says so.
TEST(SwapRules, SeveralLayerSwapEntriesAreMergedWithAWarning) {
  EXPECT_NE(warnings("swap:\n  enable: true\n  layer_swap:\n    - layers: ['0']\n    - layers: ['2']\n")
                .find("has 2 entries: Loom swaps the layers of all of them, where the reference uses only the first"),
            std::string::npos);
}

// The options the memory layer gets: the layers of every layer_swap entry (what the trainer has
// always swapped, docs/memory.md), although the spec's reference keeps only the first.
TEST(SwapRules, SeveralLayerSwapEntriesAreMerged) {
  LoadedConfig c = load("swap:\n  enable: true\n  layer_swap:\n    - layers: ['0-1']\n    - layers: ['4']\n", 1);
  ASSERT_TRUE(c.resolved.has_value());
  EXPECT_TRUE(c.resolved->swap.enable);
  EXPECT_EQ(c.resolved->swap.layers, (std::set<std::int64_t>{0, 1, 4}));
}

TEST(SwapRules, SettingsOfADisabledSwapWarn) {
  EXPECT_NE(warnings("swap:\n  layer_swap:\n    - layers: ['0']\n").find("is ignored because swap.enable is False"),
            std::string::npos);
}

// "Full-layer recomputation and full-layer SWAP cannot be configured for the same layer."
TEST(CombinationRules, RecomputeAndSwapOnTheSameLayer) {
  const std::string e = errors(
      "recompute:\n  mode: full\n  full_recompute_layer: ['0-3']\n"
      "swap:\n  enable: true\n  layer_swap:\n    - layers: ['3-4']\n");
  EXPECT_NE(e.find("swap.layer_swap: layers [3] are configured for both recompute and layer swap, which is not allowed"),
            std::string::npos)
      << e;
  // Level 3 of memory_optimization.md: 0-15 recomputed, 16-30 swapped.
  EXPECT_EQ(errors("recompute:\n  mode: full\n  full_recompute_layer: ['0-15']\nswap:\n  enable: true\n"
                   "  layer_swap:\n    - layers: ['16-30']\nmodel:\n  model_type: x\n  num_hidden_layers: 32\n"),
            "");
}

TEST(CombinationRules, SelectedLayersCannotBeLayerSwapped) {
  EXPECT_NE(errors("recompute:\n  mode: select\n  select_module:\n    '.*mlp': ['2']\n"
                   "swap:\n  enable: true\n  layer_swap:\n    - layers: ['1-2']\n")
                .find("layers [2] are configured for both recompute and layer swap"),
            std::string::npos);
}

TEST(CombinationRules, OpSwapOnAFullyRecomputedLayer) {
  EXPECT_NE(errors("recompute:\n  mode: full\n  full_recompute_layer: ['0-1']\n"
                   "swap:\n  enable: true\n  op_swap:\n    - op_name: '.*mlp'\n      layers: ['1-2']\n")
                .find("swap.op_swap[0]: layers [1] are configured for full recompute, op swap is not allowed"),
            std::string::npos);
}

// "Operator-level recomputation and operator-level SWAP cannot be configured for the same
// module (including parent and child modules)."
TEST(CombinationRules, SameOrParentChildModules) {
  const std::string same = errors(
      "recompute:\n  mode: select\n  select_module:\n    '.*mlp': ['0-3']\n"
      "swap:\n  enable: true\n  op_swap:\n    - op_name: 'mlp'\n      layers: ['2']\n");
  EXPECT_NE(same.find("op swap and selective recompute select the same or parent/child modules (layer 2: 'mlp'/'.*mlp')"),
            std::string::npos)
      << same;
  const std::string child = errors(
      "recompute:\n  mode: select\n  select_module:\n    'self_attention': ['0']\n"
      "swap:\n  enable: true\n  op_swap:\n    - op_name: '.*linear_proj'\n      layers: ['0']\n");
  EXPECT_NE(child.find("parent/child modules (layer 0: '.*linear_proj'/'self_attention')"), std::string::npos) << child;
  // Different modules on the same layer, or the same module on different layers, are fine.
  EXPECT_EQ(errors("recompute:\n  mode: select\n  select_module:\n    '.*attention': ['0-3']\n"
                   "swap:\n  enable: true\n  op_swap:\n    - op_name: '.*mlp'\n      layers: ['0-3']\n"),
            "");
  EXPECT_EQ(errors("recompute:\n  mode: select\n  select_module:\n    '.*mlp': ['0-1']\n"
                   "swap:\n  enable: true\n  op_swap:\n    - op_name: '.*mlp'\n      layers: ['2-3']\n"),
            "");
}

TEST(CombinationRules, CommRecomputeCountsAsRecompute) {
  EXPECT_NE(errors("recompute_comm:\n  enable: true\n  select_module:\n    'mlp.linear_fc1': ['1']\n"
                   "swap:\n  enable: true\n  op_swap:\n    - op_name: 'mlp'\n      layers: ['1']\n")
                .find("'mlp'/'mlp.linear_fc1'"),
            std::string::npos);
}

// Muon cannot be used with swap (training_hyperparameters.md §1.2).
TEST(CombinationRules, MuonWithSwap) {
  const std::string e = errors(
      "optimizer:\n  type: Muon\nswap:\n  enable: true\nmodel:\n  model_type: deepseek_v3\n  num_hidden_layers: 4\n");
  EXPECT_NE(e.find("swap.enable: Muon does not support swap."), std::string::npos) << e;
}

// std::regex is recursive: a pattern that would exhaust its stack is refused before compiling.
TEST(RecomputeRules, PathologicalRegexesAreRefused) {
  const std::string nested = std::string(200, '(') + "x" + std::string(200, ')');
  EXPECT_NE(errors("recompute:\n  mode: select\n  select_module:\n    '" + nested + "': ['0']\n")
                .find("regular expression nests 200 groups; at most 32 are allowed"),
            std::string::npos);
  EXPECT_NE(errors("recompute:\n  mode: select\n  select_module:\n    '" + std::string(1010, 'a') + "': ['0']\n")
                .find("regular expression of 1010 characters"),
            std::string::npos);
}
