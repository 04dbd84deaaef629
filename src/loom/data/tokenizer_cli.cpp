// `loom tokenizer train|info|encode|decode|chat` (declared in data_cli.h).
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/data/cli_args.h"
#include "loom/data/data_cli.h"
#include "loom/data/jsonl_reader.h"
#include "loom/data/tokenizer/sentencepiece_tokenizer.h"
#include "loom/data/tokenizer/tokenizer.h"

namespace loom::data {

namespace {

using namespace cli;
using ordered_json = nlohmann::ordered_json;

constexpr const char* kUsage =
    "usage: loom tokenizer encode --tokenizer PATH [--input F.jsonl] [--json-keys text] [--no-special-tokens]\n"
    "                             [--with-spans]\n"
    "       loom tokenizer decode --tokenizer PATH [--input F.jsonl] [--skip-special-tokens] [--raw]\n"
    "       loom tokenizer chat   --tokenizer PATH [--input F.jsonl] [--add-generation-prompt]\n"
    "       loom tokenizer info   --tokenizer PATH\n"
    "       loom tokenizer train  --input FILE.jsonl --model-prefix OUT [--json-keys text [more ...]]\n"
    "                             [--vocab-size 8000] [--model-type bpe|unigram|char|word]\n"
    "                             [--character-coverage 1.0] [--no-byte-fallback] [--pad-id -1]\n"
    "                             [--input-sentence-size 2000000] [--threads 2]\n"
    "\n"
    "PATH is a Hugging Face tokenizer.json, a SentencePiece .model, or a model folder holding one\n"
    "(its tokenizer_config.json gives the special tokens and the chat template). encode, decode and\n"
    "chat read JSON lines (from --input, else stdin) and write one JSON line per input line:\n"
    "  encode  {\"text\": ...}                    -> {\"ids\": [...]}   (--with-spans adds byte \"spans\")\n"
    "  decode  [ids...] or {\"ids\": [...]}       -> {\"text\": ...}    (--raw: the text itself)\n"
    "  chat    {\"messages\": [...], ...}         -> {\"text\": ..., \"ids\": [...]}\n"
    "          other keys of the line (tools, enable_thinking, ...) are template variables.\n"
    "train writes OUT.model and OUT.vocab (SentencePiece; ids: unk 0, bos 1, eos 2 = eod).\n";

// Calls f(line, number) for each non-blank line of `path` (stdin when empty).
template <typename F>
void for_each_line(const std::string& path, F&& f) {
  std::ifstream file;
  if (!path.empty()) {
    file.open(path, std::ios::binary);
    LOOM_CHECK(file.good(), IOError, "cannot read ", path);
  }
  std::istream& in = path.empty() ? std::cin : file;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    f(line, number);
  }
}

ordered_json parse_line(const std::string& line, const std::string& path, int64_t number) {
  try {
    return ordered_json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    LOOM_THROW(DataError, path.empty() ? "stdin" : path, ":", number, ": invalid JSON at byte ", e.byte,
               "; each line must be one JSON value");
  }
}

std::string where(const std::string& path, int64_t number) { return (path.empty() ? "stdin" : path) + ":" + std::to_string(number); }

void print_json(const ordered_json& j) {
  const std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
}

std::unique_ptr<Tokenizer> tokenizer_from(const Parsed& p) {
  return load_tokenizer(required(p, "--tokenizer", kUsage));
}

int encode_command(const Parsed& p) {
  const auto tokenizer = tokenizer_from(p);
  const std::string input = value_or(p, "--input", "");
  const auto keys = p.values.count("--json-keys") ? p.values.at("--json-keys") : std::vector<std::string>{"text"};
  LOOM_CHECK(keys.size() == 1, ConfigError, "encode writes one id list per line: give one --json-keys key\n", kUsage);
  const bool special = p.switches.count("--no-special-tokens") == 0;
  const bool spans = p.switches.count("--with-spans") == 1;
  for_each_line(input, [&](const std::string& line, int64_t number) {
    const nlohmann::json record = parse_json_line(line, input.empty() ? "stdin" : input, number);
    ordered_json out = {{"ids", ordered_json::array()}};
    if (spans) out["spans"] = ordered_json::array();
    for (const auto& text : json_texts(record, keys[0], input.empty() ? "stdin" : input, number)) {
      const Encoding e = tokenizer->encode_with_spans(text, special);
      for (size_t i = 0; i < e.ids.size(); ++i) {
        out["ids"].push_back(e.ids[i]);
        if (spans) out["spans"].push_back({e.spans[i].begin, e.spans[i].end});
      }
    }
    print_json(out);
  });
  return 0;
}

std::vector<int64_t> ids_of(const ordered_json& j, const std::string& at) {
  const ordered_json& list = j.is_object() && j.contains("ids") ? j["ids"] : j;
  LOOM_CHECK(list.is_array(), DataError, at, ": expected a list of ids or {\"ids\": [...]}");
  std::vector<int64_t> ids;
  for (const auto& id : list) {
    LOOM_CHECK(id.is_number_integer(), DataError, at, ": ids must be integers, got ", id.dump());
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

int decode_command(const Parsed& p) {
  const auto tokenizer = tokenizer_from(p);
  const std::string input = value_or(p, "--input", "");
  const bool skip = p.switches.count("--skip-special-tokens") == 1;
  const bool raw = p.switches.count("--raw") == 1;
  for_each_line(input, [&](const std::string& line, int64_t number) {
    const std::string text = tokenizer->decode(ids_of(parse_line(line, input, number), where(input, number)), skip);
    if (raw) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fputc('\n', stdout);
    } else {
      print_json({{"text", text}});
    }
  });
  return 0;
}

int chat_command(const Parsed& p) {
  const auto tokenizer = tokenizer_from(p);
  const std::string input = value_or(p, "--input", "");
  const bool generation_prompt = p.switches.count("--add-generation-prompt") == 1;
  for_each_line(input, [&](const std::string& line, int64_t number) {
    const ordered_json record = parse_line(line, input, number);
    LOOM_CHECK(record.is_object() && record.contains("messages"), DataError, where(input, number),
               ": expected {\"messages\": [...]} (and optional template variables)");
    ChatOptions options;
    options.add_generation_prompt = generation_prompt;
    for (const auto& [key, value] : record.items()) {
      if (key == "add_generation_prompt") options.add_generation_prompt = value.is_boolean() && value.get<bool>();
      else if (key != "messages") options.variables[key] = value;
    }
    std::string text;
    try {
      text = tokenizer->apply_chat_template(record["messages"], options);
    } catch (const DataError& e) {
      LOOM_THROW(DataError, where(input, number), ": ", e.what());
    }
    // As transformers' apply_chat_template(tokenize=True): the template wrote the special tokens.
    print_json({{"text", text}, {"ids", tokenizer->encode(text, false)}});
  });
  return 0;
}

int info_command(const Parsed& p) {
  Parsed q = p;
  if (q.values.count("--model") && !q.values.count("--tokenizer")) q.values["--tokenizer"] = q.values["--model"];
  const auto t = tokenizer_from(q);
  auto token = [&](int64_t id) { return id < 0 ? std::string("none") : std::to_string(id) + " " + t->id_to_token(id); };
  std::printf("%s (%s): vocab_size %lld\n  bos %s\n  eos (eod) %s\n  pad %s\n  unk %s\n  chat template: %s\n",
              t->path().c_str(), t->kind().c_str(), static_cast<long long>(t->vocab_size()), token(t->bos_id()).c_str(),
              token(t->eos_id()).c_str(), token(t->pad_id()).c_str(), token(t->unk_id()).c_str(),
              t->has_chat_template() ? "yes" : "no");
  return 0;
}

int train_command(const std::vector<std::string>& rest) {
  const Parsed p = parse(rest,
                         {"--input", "--model-prefix", "--vocab-size", "--model-type", "--character-coverage", "--pad-id",
                          "--input-sentence-size", "--threads"},
                         {"--json-keys"}, {"--no-byte-fallback"}, kUsage);
  TokenizerTrainOptions o;
  o.input = required(p, "--input", kUsage);
  o.model_prefix = required(p, "--model-prefix", kUsage);
  if (auto it = p.values.find("--json-keys"); it != p.values.end()) o.json_keys = it->second;
  o.vocab_size = integer(p, "--vocab-size", o.vocab_size, kUsage);
  o.model_type = value_or(p, "--model-type", o.model_type);
  if (auto it = p.values.find("--character-coverage"); it != p.values.end()) {
    try {
      o.character_coverage = std::stod(it->second.front());
    } catch (const std::exception&) {
      LOOM_THROW(ConfigError, "--character-coverage: '", it->second.front(), "' is not a number");
    }
  }
  o.byte_fallback = p.switches.count("--no-byte-fallback") == 0;
  o.pad_id = integer(p, "--pad-id", o.pad_id, kUsage);
  o.input_sentence_size = integer(p, "--input-sentence-size", o.input_sentence_size, kUsage);
  o.num_threads = integer(p, "--threads", o.num_threads, kUsage);
  const std::string model = train_tokenizer(o);
  const auto t = load_tokenizer(model);
  std::printf("wrote %s (%lld pieces; eod %lld, bos %lld, pad %lld)\n", model.c_str(),
              static_cast<long long>(t->vocab_size()), static_cast<long long>(t->eod_id()),
              static_cast<long long>(t->bos_id()), static_cast<long long>(t->pad_id()));
  return 0;
}

}  // namespace

int run_tokenizer_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("%s", kUsage);
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  for (const auto& a : rest) {
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
  }
  const std::string& sub = args[0];
  if (sub == "train") return train_command(rest);
  if (sub == "encode") {
    return encode_command(parse(rest, {"--tokenizer", "--input"}, {"--json-keys"},
                                {"--no-special-tokens", "--with-spans"}, kUsage));
  }
  if (sub == "decode") {
    return decode_command(parse(rest, {"--tokenizer", "--input"}, {}, {"--skip-special-tokens", "--raw"}, kUsage));
  }
  if (sub == "chat") return chat_command(parse(rest, {"--tokenizer", "--input"}, {}, {"--add-generation-prompt"}, kUsage));
  if (sub == "info") return info_command(parse(rest, {"--tokenizer", "--model"}, {}, {}, kUsage));
  LOOM_THROW(ConfigError, "unknown tokenizer subcommand '", sub, "'\n", kUsage);
}

}  // namespace loom::data
