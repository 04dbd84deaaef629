// Golden tests, one per architecture: an HF folder written by the numpy reference implementation
// (tests/models/reference/*.py, HF transformers' modeling code in numpy, no Loom code involved)
// is loaded through the HF importer and its logits and loss recomputed: within 1e-5 computing in
// float32, within 1e-9 in float64. DeepSeek-V3 also checks the MTP loss.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/autograd/grad_mode.h"
#include "loom/models/hf_checkpoint.h"
#include "loom/models/registry.h"
#include "loom/models/safetensors.h"

using namespace loom;
using namespace loom::models;

namespace {

void check_golden(const std::string& arch, const char* dtype, double tol) {
  SCOPED_TRACE(arch + " in " + dtype);
  const std::string dir = std::string(LOOM_FIXTURES_DIR) + "/models/" + arch;
  nlohmann::ordered_json precision{{"params_dtype", dtype}, {"compute_dtype", dtype}};
  HfModel hf = load_hf_model(dir, precision);
  EXPECT_EQ(hf.args.model_type, arch);
  auto model = build_model(hf.args);
  model->load_state_dict(hf.state, true, dir);
  ASSERT_TRUE(model->is_materialized());
  auto golden = read_safetensors(dir + "/golden.safetensors");

  autograd::NoGradGuard no_grad;
  Tensor logits = model->logits(golden.at("input_ids"));
  std::vector<double> got = logits.to_double_vector(), want = golden.at("logits").to_double_vector();
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LT(worst, tol) << "largest logit difference";

  nn::LMBatch batch;
  batch.input_ids = golden.at("input_ids");
  batch.labels = golden.at("labels");
  batch.loss_mask = golden.at("loss_mask");
  nn::LMOutput out = model->forward(batch);
  EXPECT_NEAR(out.loss.item(), golden.at("loss").item(), tol);
  if (golden.count("mtp_loss")) {
    ASSERT_TRUE(out.mtp_loss.defined());
    EXPECT_NEAR(out.mtp_loss.item(), golden.at("mtp_loss").item(), tol);
  }
}

}  // namespace

TEST(ModelGolden, LlamaShardedWithLlama3RopeAndBiases) {
  check_golden("llama", "float32", 1e-5);
  check_golden("llama", "float64", 1e-9);
}

TEST(ModelGolden, Qwen3TiedWithQkNorm) {
  check_golden("qwen3", "float32", 1e-5);
  check_golden("qwen3", "float64", 1e-9);
}

TEST(ModelGolden, Qwen3MoeSoftmaxRouterAndDenseLayer) {
  check_golden("qwen3_moe", "float32", 1e-5);
  check_golden("qwen3_moe", "float64", 1e-9);
}

TEST(ModelGolden, DeepseekV3MlaYarnGroupedSigmoidRouterAndMtp) {
  check_golden("deepseek_v3", "float32", 1e-5);
  check_golden("deepseek_v3", "float64", 1e-9);
}
