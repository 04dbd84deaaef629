// HF interop (HF transformers' weight names): Loom → HF folder → Loom is bit-exact
// for all four architectures (single file and sharded with model.safetensors.index.json), the
// python-written fixtures convert to Loom checkpoints and back to identical bytes, and broken
// folders give CheckpointErrors that list the problems.
#include <gtest/gtest.h>

#include <filesystem>
#include <cstring>
#include <fstream>

#include "loom/models/convert.h"
#include "loom/models/hf_checkpoint.h"
#include "loom/models/hf_config.h"
#include "loom/models/hf_weights.h"
#include "loom/models/registry.h"
#include "loom/models/safetensors.h"
#include "model_test_util.h"
#include "testing/temp_dir.h"

using namespace loom;
using namespace loom::models;
using loom::testing::Json;
using loom::testing::TempDir;

namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

void expect_same_state(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(bit_equal(t, b.at(name))) << name;
  }
}

std::string checkpoint_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "no CheckpointError";
}

}  // namespace

TEST(HfInterop, RoundTripIsBitExactForEveryArchitecture) {
  for (Json j : {loom::testing::tiny_llama(), loom::testing::tiny_qwen3(), loom::testing::tiny_qwen3_moe(),
                 loom::testing::tiny_deepseek_v3()}) {
    j["bos_token_id"] = 1;
    BuiltModel b = build_model(j);
    SCOPED_TRACE(b.args.model_type);
    b.model->materialize(42);
    if (b.args.moe_router_enable_expert_bias)  // a non-trivial correction bias must survive too
      for (auto* moe : b.model->moe_layers()) moe->router().expert_bias().fill_(0.125);
    std::map<std::string, Tensor> state = b.model->state_dict();
    TempDir dir;
    save_hf_model(dir.path().string(), b.args, state);
    EXPECT_TRUE(is_hf_folder(dir.path().string()));
    EXPECT_TRUE(std::filesystem::exists(dir.file("model.safetensors")));
    HfModel back = load_hf_model(dir.path().string(), Json{{"compute_dtype", "float32"}});
    expect_same_state(state, back.state);
    Json written = to_hf_config(back.args);
    EXPECT_EQ(written["torch_dtype"], "float32");  // what the file holds
    written.erase("torch_dtype");
    EXPECT_EQ(written, to_hf_config(b.args));
    EXPECT_EQ(read_hf_config(dir.path().string())["bos_token_id"], 1);
    // Sharded: several files and an index; the same tensors come back.
    TempDir sharded;
    HfSaveOptions small;
    small.max_shard_bytes = 4096;
    save_hf_model(sharded.path().string(), b.args, state, small);
    EXPECT_TRUE(std::filesystem::exists(sharded.file("model.safetensors.index.json")));
    EXPECT_FALSE(std::filesystem::exists(sharded.file("model.safetensors")));
    expect_same_state(state, load_hf_model(sharded.path().string(), Json{{"compute_dtype", "float32"}}).state);
  }
}

TEST(HfInterop, HfNamesAndLayoutsFollowTransformers) {
  BuiltModel b = build_model(loom::testing::tiny_deepseek_v3());
  b.model->materialize(5);
  TempDir dir;
  save_hf_model(dir.path().string(), b.args, b.model->state_dict());
  auto hf = read_hf_tensors(dir.path().string());
  // DeepSeek-V3's HF names; MTP stored as layer L with copies of the shared embedding and head.
  for (const char* n : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_a_proj.weight",
                        "model.layers.0.self_attn.q_a_layernorm.weight", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
                        "model.layers.0.mlp.gate_proj.weight", "model.layers.1.mlp.gate.e_score_correction_bias",
                        "model.layers.1.mlp.experts.3.down_proj.weight", "model.layers.1.mlp.shared_experts.up_proj.weight",
                        "model.layers.2.eh_proj.weight", "model.layers.2.shared_head.norm.weight",
                        "model.layers.2.embed_tokens.weight", "model.layers.2.shared_head.head.weight", "model.norm.weight",
                        "lm_head.weight"})
    EXPECT_TRUE(hf.count(n)) << n;
  // experts.weight1[e] = [gate_eᵀ | up_eᵀ]; linear_fc1 = [gate; up].
  Tensor w1 = b.model->find_parameter("decoder.layers.1.mlp.experts.weight1")->tensor;
  Tensor up2 = hf.at("model.layers.1.mlp.experts.2.up_proj.weight");
  EXPECT_EQ(up2.shape(), Shape({6, 16}));
  EXPECT_EQ(up2.at({4, 9}), w1.at({2, 9, 6 + 4}));
  Tensor fc1 = b.model->find_parameter("decoder.layers.0.mlp.linear_fc1.weight")->tensor;
  EXPECT_EQ(hf.at("model.layers.0.mlp.up_proj.weight").at({3, 5}), fc1.at({20 + 3, 5}));
  Json cfg = read_hf_config(dir.path().string());
  EXPECT_EQ(cfg["architectures"][0], "DeepseekV3ForCausalLM");
  EXPECT_EQ(cfg["qk_rope_head_dim"], 2);
  EXPECT_EQ(cfg["rope_scaling"]["type"], "yarn");
  EXPECT_EQ(cfg["n_shared_experts"], 1);
  // bfloat16 export.
  TempDir bf;
  HfSaveOptions o;
  o.dtype = DType::bf16;
  save_hf_model(bf.path().string(), b.args, b.model->state_dict(), o);
  EXPECT_EQ(read_hf_config(bf.path().string())["torch_dtype"], "bfloat16");
  EXPECT_EQ(read_hf_tensors(bf.path().string()).at("model.norm.weight").dtype(), DType::bf16);
}

TEST(HfInterop, FixturesConvertToLoomAndBackUnchanged) {
  for (const char* arch : {"llama", "qwen3", "qwen3_moe", "deepseek_v3"}) {
    SCOPED_TRACE(arch);
    const std::string src = std::string(LOOM_FIXTURES_DIR) + "/models/" + arch;
    TempDir dir;
    const std::string ckpt = dir.file("ckpt"), hf = dir.file("hf");
    const std::string file = convert_from_hf(src, ckpt);
    EXPECT_EQ(std::filesystem::path(file).filename(), "checkpoint-model-0000000-0000001.safetensors");
    // The checkpoint records its model section; to-HF needs nothing else.
    convert_to_hf(ckpt, hf);
    expect_same_state(read_hf_tensors(src), read_hf_tensors(hf));
    // A save folder resolves through latest_checkpointed_iteration.txt.
    std::filesystem::create_directories(dir.file("save/iteration_00000007"));
    std::filesystem::copy_file(file, dir.file("save/iteration_00000007/checkpoint-model-0000000-0000001.safetensors"));
    loom::testing::write_file(dir.file("save/latest_checkpointed_iteration.txt"), "7");
    EXPECT_EQ(read_loom_checkpoint(dir.file("save")).state.size(), read_loom_checkpoint(file).state.size());
  }
}

TEST(HfInterop, BrokenFoldersListEveryProblem) {
  const std::string src = std::string(LOOM_FIXTURES_DIR) + "/models/qwen3";
  auto hf = read_hf_tensors(src, true);
  ModelArgs args = ModelArgs::from_json(read_hf_config(src));
  hf.erase("model.layers.1.self_attn.k_norm.weight");
  hf["model.layers.0.mlp.extra.weight"] = Tensor::zeros({2});
  std::string msg = checkpoint_error([&] { from_hf_weights(args, hf, "qwen3-folder"); });
  EXPECT_NE(msg.find("cannot convert qwen3-folder from HF names (2 problems)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: model.layers.1.self_attn.k_norm.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected: model.layers.0.mlp.extra.weight [2]"), std::string::npos) << msg;

  TempDir dir;
  std::filesystem::copy(std::string(LOOM_FIXTURES_DIR) + "/models/llama", dir.path());
  std::filesystem::remove(dir.file("model-00002-of-00002.safetensors"));
  msg = checkpoint_error([&] { read_hf_tensors(dir.path().string()); });
  EXPECT_NE(msg.find("names shard model-00002-of-00002.safetensors which does not exist"), std::string::npos) << msg;

  // An HF folder whose weights contradict its config.json: refused before anything is written.
  TempDir lying;
  std::filesystem::copy(src, lying.path(), std::filesystem::copy_options::recursive);
  Json lying_config = read_hf_config(src);
  lying_config["intermediate_size"] = 22;
  std::ofstream(lying.file("config.json")) << lying_config.dump(2);
  msg = checkpoint_error([&] { convert_from_hf(lying.path().string(), lying.file("out")); });
  EXPECT_NE(msg.find("does not match the qwen3 model of its configuration"), std::string::npos) << msg;
  EXPECT_NE(msg.find("config.json and the weights disagree"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(lying.file("out")));

  // A Loom checkpoint whose shapes do not fit the configuration it is converted with.
  TempDir ck;
  convert_from_hf(src, ck.path().string());
  Json other = read_hf_config(src);
  other["intermediate_size"] = 22;
  msg = checkpoint_error([&] { convert_to_hf(ck.path().string(), ck.file("hf"), other); });
  EXPECT_NE(msg.find("shape mismatch: decoder.layers.0.mlp.linear_fc1.weight is [40, 16] but the model needs [44, 16]"),
            std::string::npos)
      << msg;
}

// A damaged config.json is named with what the JSON parser found, without the library's tag.
TEST(HfInterop, ADamagedConfigJsonIsNamedWithoutTheParsersTag) {
  TempDir dir;
  std::ofstream(dir.file("config.json")) << "{\"model_type\": \"llama\", ";
  std::string e;
  try {
    read_hf_config(dir.path().string());
  } catch (const CheckpointError& error) {
    e = error.what();
  }
  EXPECT_NE(e.find(dir.file("config.json") + ": invalid JSON near byte"), std::string::npos) << e;
  EXPECT_NE(e.find("parse error at line 1"), std::string::npos) << e;
  EXPECT_EQ(e.find("[json.exception"), std::string::npos) << e;
}

TEST(HfInterop, UnrepresentableModelsAreRefusedBeforeWriting) {
  Json j = loom::testing::tiny_llama();
  j["normalization"] = "LayerNorm";
  ModelArgs a = ModelArgs::from_json(j);
  try {
    to_hf_config(a);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.normalization = LayerNorm has no HF equivalent"), std::string::npos);
  }
  Json q = loom::testing::tiny_qwen3();
  q["use_qk_norm"] = false;
  EXPECT_THROW(to_hf_config(ModelArgs::from_json(q)), ConfigError);
}
