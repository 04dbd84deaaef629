// Samples while training (training.sample_interval, sample_prompts, sample_max_new_tokens,
// sample_tokenizer): the greedy continuations every N steps and after the last, in metrics.jsonl,
// equal to generating from the trained weights afterwards, with the training curve bit-identical
// to a run without them; and the configuration's rules.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "loom/runtime/generation.h"
#include "trainer_fixture.h"

using namespace loom;
using namespace loom::train;
namespace lt = loom::testing;
namespace fs = std::filesystem;

namespace {

const std::string kTokenizer = LOOM_FIXTURES_DIR "/data/tokenizers/byte_fallback";

// The fixture tokenizer has 338 tokens: the tiny model's vocabulary grows to hold them.
std::vector<std::string> sampling(int64_t every) {
  return {"model.vocab_size=512", "training.sample_interval=" + std::to_string(every),
          "training.sample_prompts=['hello world', 'ab']", "training.sample_max_new_tokens=5",
          "training.sample_tokenizer=" + kTokenizer};
}

std::vector<nlohmann::json> lines(const std::string& run_dir, bool samples) {
  std::vector<nlohmann::json> out;
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("sample") == samples) out.push_back(j);
  }
  return out;
}

const std::string kNoSave = "checkpoint:\n  enable_save: False\n";

}  // namespace

TEST(Sampling, GreedyContinuationsEveryIntervalEqualToGeneratingAfterwards) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 3, 2, 2, kNoSave), sampling(2)), lt::quiet_options(dir.file("run")));
  t.train();
  const auto samples = lines(dir.file("run"), true);
  ASSERT_EQ(samples.size(), 4u);  // two prompts after steps 2 and 3
  EXPECT_EQ(samples[0]["step"], 2);
  EXPECT_EQ(samples[2]["step"], 3);
  EXPECT_EQ(samples[3]["prompt"], "ab");
  EXPECT_EQ(samples[3]["sample"], 1);

  auto tokenizer = data::load_tokenizer(kTokenizer);
  runtime::GenerationOptions o;
  o.max_new_tokens = 5;
  o.end_ids = {tokenizer->eos_id()};
  runtime::TokenGenerator generator(t.runtime().causal_lm(), 64);
  const auto now = generator.generate({tokenizer->encode("hello world"), tokenizer->encode("ab")}, o);
  EXPECT_EQ(samples[2]["completion"].get<std::string>(),
            tokenizer->decode_generated(now[0].ids, tokenizer->encode("hello world")));
  EXPECT_EQ(samples[3]["completion"].get<std::string>(), tokenizer->decode_generated(now[1].ids, tokenizer->encode("ab")));
}

TEST(Sampling, LeavesTheTrainingCurveBitIdentical) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  std::vector<std::string> off = {"model.vocab_size=512"};
  Trainer with(lt::tiny_config(lt::tiny_config_yaml(data, 4, 2, 2, kNoSave), sampling(1)), lt::quiet_options(dir.file("on")));
  with.train();
  Trainer without(lt::tiny_config(lt::tiny_config_yaml(data, 4, 2, 2, kNoSave), off), lt::quiet_options(dir.file("off")));
  without.train();
  const auto a = lines(dir.file("on"), false), b = lines(dir.file("off"), false);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
}

TEST(Sampling, TheConfigurationNamesWhatIsMissing) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  auto error_of = [&](const std::vector<std::string>& sets) {
    try {
      lt::tiny_config(lt::tiny_config_yaml(data, 2, 2, 2, kNoSave), sets);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({"training.sample_interval=2", "training.sample_prompts=['x']"})
                .find("training.sample_tokenizer: is required with training.sample_interval"),
            std::string::npos);
  EXPECT_NE(error_of({"training.sample_interval=2", "training.sample_tokenizer=" + kTokenizer, "model.vocab_size=512"})
                .find("training.sample_prompts: is empty"),
            std::string::npos);
  EXPECT_NE(error_of({"training.sample_interval=2", "training.sample_prompts=['x']",
                      "training.sample_tokenizer=" + kTokenizer})
                .find("has 338 tokens but model.vocab_size is 64"),
            std::string::npos);
  EXPECT_NE(error_of({"training.sample_interval=2", "training.sample_prompts=['x']",
                      "training.sample_tokenizer=" + dir.file("nowhere")})
                .find("training.sample_tokenizer"),
            std::string::npos);
  EXPECT_EQ(error_of(sampling(2)), "");
}
