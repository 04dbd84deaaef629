#include "loom/data/data_cli.h"

#include <cstdio>
#include <map>
#include <set>

#include "loom/core/error.h"
#include "loom/data/preprocess.h"
#include "loom/data/tokenizer.h"

namespace loom::data {

namespace {

constexpr const char* kPreprocessUsage =
    "usage: loom preprocess --input FILE.jsonl --output-prefix OUT --tokenizer-model M.model\n"
    "                       [--json-keys text [more ...]] [--append-eod] [--workers N]\n"
    "\n"
    "Tokenizes one JSON object per line into Megatron indexed datasets\n"
    "OUT_<key>_document.bin/.idx (uint16 tokens below 65500 vocabulary entries, else int32).\n"
    "  --append-eod   end every non-empty document with the tokenizer's eod (eos) id\n"
    "  --workers N    encoding threads (default 1)\n";

constexpr const char* kTokenizerUsage =
    "usage: loom tokenizer train --input FILE.jsonl --model-prefix OUT [--json-keys text [more ...]]\n"
    "                            [--vocab-size 8000] [--model-type bpe|unigram|char|word]\n"
    "                            [--character-coverage 1.0] [--no-byte-fallback] [--pad-id -1]\n"
    "                            [--input-sentence-size 2000000] [--threads 2]\n"
    "       loom tokenizer info --model M.model\n"
    "\n"
    "train writes OUT.model and OUT.vocab (SentencePiece; ids: unk 0, bos 1, eos 2 = eod).\n";

// --flag value [value...] parsing: multi-valued flags collect until the next --flag.
struct Parsed {
  std::map<std::string, std::vector<std::string>> values;
  std::set<std::string> switches;
};

Parsed parse(const std::vector<std::string>& args, const std::set<std::string>& valued,
             const std::set<std::string>& multi, const std::set<std::string>& switches, const char* usage) {
  Parsed p;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    std::string inline_value;
    bool has_inline = false;
    if (const auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    if (switches.count(a)) {
      LOOM_CHECK(!has_inline, ConfigError, a, " takes no value\n", usage);
      p.switches.insert(a);
      continue;
    }
    LOOM_CHECK(valued.count(a) || multi.count(a), ConfigError, "unknown option '", a, "'\n", usage);
    auto& out = p.values[a];
    out.clear();
    if (has_inline) {
      out.push_back(inline_value);
      continue;
    }
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      out.push_back(args[++i]);
      if (!multi.count(a)) break;
    }
    LOOM_CHECK(!out.empty(), ConfigError, a, " needs a value\n", usage);
  }
  return p;
}

std::string required(const Parsed& p, const std::string& flag, const char* usage) {
  auto it = p.values.find(flag);
  LOOM_CHECK(it != p.values.end(), ConfigError, flag, " is required\n", usage);
  return it->second.front();
}

int64_t integer(const Parsed& p, const std::string& flag, int64_t fallback, const char* usage) {
  auto it = p.values.find(flag);
  if (it == p.values.end()) return fallback;
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second.front(), &used);
    if (used == it->second.front().size()) return v;
  } catch (const std::exception&) {
  }
  LOOM_THROW(ConfigError, flag, ": '", it->second.front(), "' is not an integer\n", usage);
}

}  // namespace

int run_preprocess_command(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("%s", kPreprocessUsage);
      return 0;
    }
  }
  const Parsed p = parse(args, {"--input", "--output-prefix", "--tokenizer-model", "--workers", "--log-interval"},
                         {"--json-keys"}, {"--append-eod", "--quiet"}, kPreprocessUsage);
  PreprocessOptions o;
  o.input = required(p, "--input", kPreprocessUsage);
  o.output_prefix = required(p, "--output-prefix", kPreprocessUsage);
  o.tokenizer_model = required(p, "--tokenizer-model", kPreprocessUsage);
  if (auto it = p.values.find("--json-keys"); it != p.values.end()) o.json_keys = it->second;
  o.append_eod = p.switches.count("--append-eod") == 1;
  o.workers = integer(p, "--workers", 1, kPreprocessUsage);
  o.progress = p.switches.count("--quiet") == 0;
  const PreprocessResult r = preprocess_jsonl(o);
  for (size_t k = 0; k < r.output_prefixes.size(); ++k) {
    std::printf("wrote %s.bin/.idx: %lld documents, %lld tokens\n", r.output_prefixes[k].c_str(),
                static_cast<long long>(r.documents), static_cast<long long>(r.tokens[k]));
  }
  return 0;
}

int run_tokenizer_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("%s", kTokenizerUsage);
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  for (const auto& a : rest) {
    if (a == "--help" || a == "-h") {
      std::printf("%s", kTokenizerUsage);
      return 0;
    }
  }
  if (args[0] == "train") {
    const Parsed p = parse(rest,
                           {"--input", "--model-prefix", "--vocab-size", "--model-type", "--character-coverage",
                            "--pad-id", "--input-sentence-size", "--threads"},
                           {"--json-keys"}, {"--no-byte-fallback"}, kTokenizerUsage);
    TokenizerTrainOptions o;
    o.input = required(p, "--input", kTokenizerUsage);
    o.model_prefix = required(p, "--model-prefix", kTokenizerUsage);
    if (auto it = p.values.find("--json-keys"); it != p.values.end()) o.json_keys = it->second;
    o.vocab_size = integer(p, "--vocab-size", o.vocab_size, kTokenizerUsage);
    if (auto it = p.values.find("--model-type"); it != p.values.end()) o.model_type = it->second.front();
    if (auto it = p.values.find("--character-coverage"); it != p.values.end()) {
      try {
        o.character_coverage = std::stod(it->second.front());
      } catch (const std::exception&) {
        LOOM_THROW(ConfigError, "--character-coverage: '", it->second.front(), "' is not a number");
      }
    }
    o.byte_fallback = p.switches.count("--no-byte-fallback") == 0;
    o.pad_id = integer(p, "--pad-id", o.pad_id, kTokenizerUsage);
    o.input_sentence_size = integer(p, "--input-sentence-size", o.input_sentence_size, kTokenizerUsage);
    o.num_threads = integer(p, "--threads", o.num_threads, kTokenizerUsage);
    const std::string model = train_tokenizer(o);
    const Tokenizer t(model);
    std::printf("wrote %s (%lld pieces; eod %lld, bos %lld, pad %lld)\n", model.c_str(),
                static_cast<long long>(t.vocab_size()), static_cast<long long>(t.eod_id()),
                static_cast<long long>(t.bos_id()), static_cast<long long>(t.pad_id()));
    return 0;
  }
  if (args[0] == "info") {
    const Parsed p = parse(rest, {"--model"}, {}, {}, kTokenizerUsage);
    const Tokenizer t(required(p, "--model", kTokenizerUsage));
    std::printf("%s: vocab_size %lld, eod %lld, bos %lld, pad %lld, unk %lld\n", t.model_path().c_str(),
                static_cast<long long>(t.vocab_size()), static_cast<long long>(t.eod_id()),
                static_cast<long long>(t.bos_id()), static_cast<long long>(t.pad_id()),
                static_cast<long long>(t.unk_id()));
    return 0;
  }
  LOOM_THROW(ConfigError, "unknown tokenizer subcommand '", args[0], "'\n", kTokenizerUsage);
}

}  // namespace loom::data
