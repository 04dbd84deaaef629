// Weight-decay groups (MindFormers' get_param_groups; spec training_hyperparameters.md §1.1
// weight_decay_include / weight_decay_exclude).
#include <gtest/gtest.h>

#include "loom/optim/adamw.h"
#include "loom/optim/param_groups.h"
#include "optim_test_util.h"

using namespace loom;
using namespace loom::optim;
using namespace loom::optim::testing;

namespace {

NamedParams llama_like() {
  auto p = [](const Shape& s) { return make_param(std::vector<float>(s.numel(), 0.f), s); };
  return {
      {"embedding.word_embeddings.weight", p({16, 4})},
      {"decoder.layers.0.input_layernorm.weight", p({4})},
      {"decoder.layers.0.self_attention.linear_q.weight", p({4, 4})},
      {"decoder.layers.0.self_attention.linear_q.bias", p({4})},
      {"decoder.layers.0.self_attention.q_layernorm.weight", p({4})},
      {"decoder.layers.0.mlp.linear_fc1.weight", p({8, 4})},
      {"decoder.layers.0.mlp.router.expert_bias", p({4})},
      {"decoder.final_layernorm.weight", p({4})},
      {"output_layer.weight", p({16, 4})},
  };
}

std::vector<std::string> decayed(const NamedParams& params, const WeightDecayRules& rules) {
  std::vector<std::string> out;
  for (const auto& p : params)
    if (applies_weight_decay(p.name, p.param.shape(), rules)) out.push_back(p.name);
  return out;
}

}  // namespace

TEST(ParamGroups, RuleMatchesExactSubstringAndGlob) {
  EXPECT_TRUE(rule_matches("output_layer.weight", "output_layer.weight"));
  EXPECT_TRUE(rule_matches("bias", "decoder.layers.0.self_attention.linear_q.bias"));
  EXPECT_TRUE(rule_matches("*norm*", "decoder.layers.0.input_layernorm.weight"));
  EXPECT_TRUE(rule_matches("decoder.layers.?.mlp.*", "decoder.layers.3.mlp.linear_fc1.weight"));
  EXPECT_TRUE(rule_matches("decoder.layers.[0-1].*", "decoder.layers.1.mlp.linear_fc2.weight"));
  EXPECT_FALSE(rule_matches("decoder.layers.[!0-1].*", "decoder.layers.1.mlp.linear_fc2.weight"));
  EXPECT_FALSE(rule_matches("*norm", "decoder.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(rule_matches("Bias", "linear.bias"));  // case-sensitive like Python's fnmatch on POSIX
}

// Defaults: 1-D parameters and names ending ".bias" get no decay.
TEST(ParamGroups, DefaultsExcludeOneDimAndBias) {
  EXPECT_EQ(decayed(llama_like(), {}),
            (std::vector<std::string>{"embedding.word_embeddings.weight",
                                      "decoder.layers.0.self_attention.linear_q.weight",
                                      "decoder.layers.0.mlp.linear_fc1.weight", "output_layer.weight"}));
}

// spec §1.1 example: weight_decay_exclude ["*norm*", "*bias*"] (and the issue's ["bias", "norm"]).
TEST(ParamGroups, SpecExcludeExamples) {
  WeightDecayRules globs;
  globs.exclude = {"*norm*", "*bias*"};
  WeightDecayRules words;
  words.exclude = {"bias", "norm"};
  const auto expected = std::vector<std::string>{"embedding.word_embeddings.weight",
                                                 "decoder.layers.0.self_attention.linear_q.weight",
                                                 "decoder.layers.0.mlp.linear_fc1.weight",
                                                 "output_layer.weight"};
  EXPECT_EQ(decayed(llama_like(), globs), expected);
  EXPECT_EQ(decayed(llama_like(), words), expected);
  WeightDecayRules embed;
  embed.exclude = {"*word_embeddings*", "output_layer.weight"};
  EXPECT_EQ(decayed(llama_like(), embed),
            (std::vector<std::string>{"decoder.layers.0.self_attention.linear_q.weight",
                                      "decoder.layers.0.mlp.linear_fc1.weight"}));
}

// Include wins over exclude and over the 1-D / bias defaults.
TEST(ParamGroups, IncludeWinsOverExcludeAndDefaults) {
  WeightDecayRules r;
  r.include = {"*q_layernorm*", "linear_q.bias"};
  r.exclude = {"*layernorm*", "*linear_q*"};
  EXPECT_EQ(decayed(llama_like(), r),
            (std::vector<std::string>{"embedding.word_embeddings.weight",
                                      "decoder.layers.0.self_attention.linear_q.bias",
                                      "decoder.layers.0.self_attention.q_layernorm.weight",
                                      "decoder.layers.0.mlp.linear_fc1.weight", "output_layer.weight"}));
}

TEST(ParamGroups, ModelNoDecayNamesAndKeywords) {
  WeightDecayRules r;
  r.no_decay_names = {"output_layer.weight"};
  r.no_decay_keywords = {"word_embeddings"};
  EXPECT_EQ(decayed(llama_like(), r),
            (std::vector<std::string>{"decoder.layers.0.self_attention.linear_q.weight",
                                      "decoder.layers.0.mlp.linear_fc1.weight"}));
}

TEST(ParamGroups, TwoGroupsCarryTheirWeightDecay) {
  auto groups = build_param_groups(llama_like(), 0.1, {});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_DOUBLE_EQ(groups[0].weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(groups[1].weight_decay, 0.0);
  EXPECT_EQ(groups[0].params.size(), 4u);
  EXPECT_EQ(groups[1].params.size(), 5u);
  EXPECT_EQ(groups[1].params[0].name, "decoder.layers.0.input_layernorm.weight");
}

// The optimizer applies the group's decay: an excluded parameter with a zero grad stays put.
TEST(ParamGroups, AdamWAppliesGroupDecay) {
  Tensor norm = make_param({2.f, 2.f}, {2});
  Tensor lin = make_param({2.f, 2.f}, {1, 2});
  AdamWOptions o;
  o.weight_decay = 0.5;
  AdamW opt({{"decoder.final_layernorm.weight", norm}, {"decoder.layers.0.mlp.linear_fc2.weight", lin}}, o);
  set_grad(norm, {0.f, 0.f});
  set_grad(lin, {0.f, 0.f});
  opt.step_with_lr(0.1);
  EXPECT_EQ(norm.to_float_vector(), (std::vector<float>{2.f, 2.f}));
  EXPECT_NEAR(lin.to_float_vector()[0], 2.f * (1 - 0.05), 1e-6);
  EXPECT_DOUBLE_EQ(opt.param_states()[0].weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(opt.param_states()[1].weight_decay, 0.5);
}
