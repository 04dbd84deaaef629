// `loom generate` (loom/eval/generate_command.h): a checkpoint gives the greedy tokens of the
// weights it holds (checked against a decode without the cache on the trained model), its Hugging
// Face export gives the same, text prompts go through the tokenizer and its chat template, stop
// strings cut the completion, and bad input ends in an error naming the flag or file.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../models/model_test_util.h"
#include "../train/trainer_fixture.h"
#include "loom/eval/generate_command.h"
#include "loom/models/convert.h"
#include "loom/models/hf_checkpoint.h"
#include "loom/models/registry.h"
#include "loom/runtime/generation.h"

namespace loom::eval {
namespace {

namespace lt = loom::testing;
namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kTokenizer = LOOM_FIXTURES_DIR "/data/tokenizers/byte_fallback";

// A model trained three steps, saved to dir/ck; its vocabulary holds the fixture tokenizer's 338
// tokens, its positions the fixture chat template's prompt.
struct TrainedModel {
  lt::TempDir dir;
  std::unique_ptr<train::Trainer> trainer;
  TrainedModel() {
    const std::string data = lt::write_pattern_dataset(dir);
    trainer = std::make_unique<train::Trainer>(
        lt::tiny_config(lt::tiny_config_yaml(data, 3, 2, 2, "checkpoint:\n  save_path: '" + dir.file("ck") + "'\n"),
                        {"model.vocab_size=384", "model.max_position_embeddings=256"}),
        lt::quiet_options(dir.file("run")));
    trainer->train();
  }
};

std::vector<Json> run_json(GenerateOptions o) {
  o.json = true;
  std::ostringstream out, log;
  run_generate(o, out, log);
  EXPECT_NE(log.str().find("tokens/s"), std::string::npos) << log.str();
  std::vector<Json> lines;
  std::istringstream in(out.str());
  for (std::string line; std::getline(in, line);) lines.push_back(Json::parse(line));
  return lines;
}

size_t utf8_length(char lead) {
  const auto b = static_cast<unsigned char>(lead);
  return b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GenerateCommand, ACheckpointAndItsHfExportGiveTheGreedyTokensOfTheTrainedWeights) {
  TrainedModel m;
  lt::write_file(m.dir.file("p.jsonl"), "{\"prompt_ids\": [3, 10, 17, 24]}\n{\"prompt_ids\": [40, 41]}\n");
  GenerateOptions o;
  o.load_path = m.dir.file("ck");
  o.prompts_path = m.dir.file("p.jsonl");
  o.max_new_tokens = 6;
  const std::vector<Json> got = run_json(o);
  ASSERT_EQ(got.size(), 2u);

  runtime::GenerationOptions g;
  g.max_new_tokens = 6;
  nn::CausalLM& lm = m.trainer->runtime().causal_lm();
  const auto expected = runtime::generate_without_cache(
      [&lm](const data::Batch& b) { return lm.logits(b.input_ids, b.position_ids, b.document_ends); },
      {{3, 10, 17, 24}, {40, 41}}, g, 256);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i]["ids"].get<std::vector<int64_t>>(), expected[i].ids) << "prompt " << i + 1;
    EXPECT_EQ(got[i]["finish_reason"], "length");
    EXPECT_FALSE(got[i].contains("completion"));  // no tokenizer, no text
  }

  models::convert_to_hf(m.dir.file("ck"), m.dir.file("hf"));
  o.load_path = m.dir.file("hf");
  const std::vector<Json> hf = run_json(o);
  ASSERT_EQ(hf.size(), 2u);
  EXPECT_EQ(hf[0]["ids"], got[0]["ids"]);
  EXPECT_EQ(hf[1]["ids"], got[1]["ids"]);
}

TEST(GenerateCommand, TextPromptsGoThroughTheTokenizerItsChatTemplateAndStopStrings) {
  TrainedModel m;
  auto tokenizer = data::load_tokenizer(kTokenizer);
  GenerateOptions o;
  o.load_path = m.dir.file("ck");
  o.tokenizer_path = kTokenizer;
  o.prompts = {"hello world"};
  o.max_new_tokens = 8;

  const Json plain = run_json(o).at(0);
  EXPECT_EQ(plain["prompt"], "hello world");
  const auto ids = plain["ids"].get<std::vector<int64_t>>();
  EXPECT_EQ(plain["completion"].get<std::string>(), tokenizer->decode_generated(ids, tokenizer->encode("hello world")));

  // The same prompt streamed as text prints the same completion.
  {
    GenerateOptions text = o;
    std::ostringstream out, log;
    run_generate(text, out, log);
    EXPECT_EQ(out.str(), plain["completion"].get<std::string>() + "\n");
  }

  // A stop string cuts the completion before it (the completion's second character, so it
  // occurs), streamed or not.
  const std::string completion = plain["completion"].get<std::string>();
  const size_t first = utf8_length(completion[0]);
  ASSERT_GT(completion.size(), first);
  const std::string stop = completion.substr(first, utf8_length(completion[first]));
  const std::string before = completion.substr(0, completion.find(stop));
  GenerateOptions stopped = o;
  stopped.stops = {stop};
  const Json cut = run_json(stopped).at(0);
  EXPECT_EQ(cut["completion"].get<std::string>(), before);
  EXPECT_EQ(cut["finish_reason"], "stop");
  {
    std::ostringstream out, log;
    run_generate(stopped, out, log);
    EXPECT_EQ(out.str(), before + "\n");
  }

  // --chat: the prompt is the template's user turn with the generation prompt, so the tokens
  // are those of a prompt_ids line holding that encoding.
  GenerateOptions chat = o;
  chat.chat = true;
  const Json as_chat = run_json(chat).at(0);
  data::ChatOptions co;
  co.add_generation_prompt = true;
  const std::vector<int64_t> chat_ids =
      tokenizer->encode(tokenizer->apply_chat_template(Json::parse(R"([{"role": "user", "content": "hello world"}])"), co),
                        false);
  lt::write_file(m.dir.file("ids.jsonl"), "{\"prompt_ids\": " + Json(chat_ids).dump() + "}\n");
  GenerateOptions by_ids = o;
  by_ids.prompts.clear();
  by_ids.prompts_path = m.dir.file("ids.jsonl");
  EXPECT_EQ(run_json(by_ids).at(0)["ids"], as_chat["ids"]);
}

TEST(GenerateCommand, BadFlagsNameTheFlag) {
  auto parse_error = [](const std::vector<std::string>& args) {
    return error_of([&] { parse_generate_args(args); });
  };
  EXPECT_NE(parse_error({"--prompt", "x"}).find("--load PATH is required"), std::string::npos);
  EXPECT_NE(parse_error({"--load", "x", "--top-p", "1.5"}).find("--top-p must be in (0, 1], got 1.5"), std::string::npos);
  EXPECT_NE(parse_error({"--load", "x", "--top-p", "0"}).find("--top-p must be in (0, 1]"), std::string::npos);
  EXPECT_NE(parse_error({"--load", "x", "--top-k", "-1"}).find("--top-k must be a whole number >= 0"), std::string::npos);
  EXPECT_NE(parse_error({"--load", "x", "--temperature", "-0.5"}).find("--temperature must be >= 0"), std::string::npos);
  EXPECT_NE(parse_error({"--load", "x", "--max-new-tokens", "0"}).find("--max-new-tokens must be a positive integer"),
            std::string::npos);
  EXPECT_NE(parse_error({"--load", "x", "--seed", "abc"}).find("--seed 'abc' is not a number"), std::string::npos);
  EXPECT_NE(parse_error({"--load", "x", "--stop"}).find("--stop needs a value"), std::string::npos);
  EXPECT_NE(parse_error({"--load", "x", "--bogus"}).find("unknown option '--bogus'"), std::string::npos);
  EXPECT_NE(parse_error({"--load", "x", "--speculative", "eagle"}).find("--speculative takes 'mtp'"), std::string::npos);
  EXPECT_NE(parse_error({"--load", "x", "--speculative", "mtp", "--temperature", "0.7"})
                .find("--speculative mtp is greedy only"),
            std::string::npos);
}

TEST(GenerateCommand, SpeculativeMtpGivesPlainGreedysTokensAndSaysHowManyDraftsItKept) {
  // A DeepSeek-V3 with one MTP layer saved as an HF folder: its drafts (random weights) are
  // mostly rejected, and the tokens are still plain greedy's.
  lt::TempDir dir;
  Json section = lt::tiny_deepseek_v3();
  section["max_position_embeddings"] = 64;
  models::BuiltModel built = models::build_model(section);
  built.model->materialize(5);
  models::save_hf_model(dir.file("hf"), built.args, built.model->state_dict());
  lt::write_file(dir.file("p.jsonl"), "{\"prompt_ids\": [3, 10, 17, 2]}\n{\"prompt_ids\": [9, 1]}\n");
  GenerateOptions o;
  o.load_path = dir.file("hf");
  o.prompts_path = dir.file("p.jsonl");
  o.max_new_tokens = 12;
  o.json = true;
  std::ostringstream plain, plain_log, speculative, speculative_log;
  run_generate(o, plain, plain_log);
  o.speculative = runtime::Speculative::mtp;
  run_generate(o, speculative, speculative_log);
  EXPECT_EQ(speculative.str(), plain.str());
  EXPECT_NE(speculative_log.str().find("speculative (mtp, 1 draft per forward): "), std::string::npos)
      << speculative_log.str();
  EXPECT_NE(speculative_log.str().find("tokens per forward of the main model"), std::string::npos);
  EXPECT_EQ(plain_log.str().find("speculative"), std::string::npos);
}

TEST(GenerateCommand, BadInputNamesTheFileOrPrompt) {
  TrainedModel m;
  GenerateOptions o;
  o.load_path = m.dir.file("ck");
  o.prompts = {"hello"};
  auto error = [&](const GenerateOptions& x) { return error_of([&] { run_json(x); }); };

  EXPECT_NE(error(o).find("--prompt is text: pass --tokenizer PATH"), std::string::npos) << error(o);

  GenerateOptions missing = o;
  missing.load_path = m.dir.file("nowhere");
  EXPECT_NE(error(missing).find("--load '" + m.dir.file("nowhere") + "' does not exist"), std::string::npos)
      << error(missing);

  // A template-less copy of the tokenizer: --chat says where the template is missing.
  fs::create_directories(m.dir.file("plain_tok"));
  fs::copy_file(kTokenizer + "/tokenizer.json", m.dir.file("plain_tok/tokenizer.json"));
  lt::write_file(m.dir.file("plain_tok/tokenizer_config.json"), R"({"bos_token": "<s>", "eos_token": "</s>"})");
  GenerateOptions chat = o;
  chat.tokenizer_path = m.dir.file("plain_tok");
  chat.chat = true;
  EXPECT_NE(error(chat).find("has no chat_template"), std::string::npos) << error(chat);

  GenerateOptions speculative = o;
  speculative.prompts.clear();
  speculative.prompts_path = m.dir.file("ids.jsonl");
  lt::write_file(speculative.prompts_path, "{\"prompt_ids\": [3, 4]}\n");
  speculative.speculative = runtime::Speculative::mtp;
  EXPECT_NE(error(speculative).find("--speculative mtp drafts with the model's multi-token prediction layers and " +
                                    m.dir.file("ck") + " has none"),
            std::string::npos)
      << error(speculative);

  lt::write_file(m.dir.file("long.jsonl"), "{\"prompt_ids\": " + Json(std::vector<int64_t>(256, 5)).dump() + "}\n");
  GenerateOptions too_long = o;
  too_long.prompts.clear();
  too_long.prompts_path = m.dir.file("long.jsonl");
  EXPECT_NE(error(too_long).find("prompt 1 has 256 tokens, and the model has 256 positions"), std::string::npos)
      << error(too_long);

  lt::write_file(m.dir.file("oov.jsonl"), "{\"prompt_ids\": [3, 900]}\n");
  GenerateOptions oov = too_long;
  oov.prompts_path = m.dir.file("oov.jsonl");
  EXPECT_NE(error(oov).find("token id 900, outside the model's vocabulary [0, 384)"), std::string::npos) << error(oov);

  lt::write_file(m.dir.file("bad.jsonl"), "{\"text\": \"hi\"}\n");
  GenerateOptions bad_line = too_long;
  bad_line.prompts_path = m.dir.file("bad.jsonl");
  EXPECT_NE(error(bad_line).find(m.dir.file("bad.jsonl") + ":1: give \"prompt\""), std::string::npos)
      << error(bad_line);

  // A tokenizer larger than the model's vocabulary is not the model's.
  GenerateOptions small = o;
  small.tokenizer_path = kTokenizer;
  small.model_overrides = {"model.vocab_size=64"};
  EXPECT_NE(error(small).find("use the model's own tokenizer"), std::string::npos) << error(small);
  GenerateOptions bad_set = o;
  bad_set.tokenizer_path = kTokenizer;
  bad_set.model_overrides = {"training.steps=3"};
  EXPECT_NE(error(bad_set).find("--set 'training.steps=3': loom generate takes model.<key>=<value>"),
            std::string::npos)
      << error(bad_set);
}

}  // namespace
}  // namespace loom::eval
