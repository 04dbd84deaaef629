#include "loom/eval/generate_command.h"

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <memory>
#include <ostream>

#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/data/jsonl_reader.h"
#include "loom/data/tokenizer/tokenizer.h"
#include "loom/models/hf_checkpoint.h"
#include "loom/models/model_args.h"
#include "loom/config/config.h"
#include "loom/config/model_section.h"
#include "loom/runtime/backend.h"
#include "loom/runtime/checkpoint_reader.h"
#include "loom/runtime/generation.h"
#include "loom/runtime/model_runtime.h"

namespace loom::eval {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

double number_flag(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  LOOM_CHECK(!v.empty() && *end == '\0', ConfigError, flag, " '", v, "' is not a number\n", generate_usage());
  return x;
}

// The model section: --config's, else the HF folder's config.json, else the checkpoint's
// model_config.json (written beside its tensors), with --set model.key=value applied.
Json model_section(const GenerateOptions& o, const runtime::ResolvedLoadPath& where) {
  Json section;
  if (!o.config_path.empty()) {
    section = config::model_section_json(config::load_config(o.config_path).config.model);
  } else if (where.is_hf) {
    section = models::read_hf_config(where.dir);
    // A folder of bf16 weights runs in bf16, as transformers loads it (torch_dtype "auto").
    if (section.value("torch_dtype", "") == "bfloat16")
      for (const char* key : {"params_dtype", "compute_dtype"})
        if (!section.contains(key)) section[key] = "bfloat16";
  } else {
    for (const fs::path& dir : {fs::path(where.dir), fs::path(where.dir).parent_path()})
      if (fs::exists(dir / "model_config.json")) {
        section = runtime::read_checkpoint_json((dir / "model_config.json").string());
        break;
      }
    LOOM_CHECK(!section.is_null(), ConfigError, "checkpoint '", where.dir, "' does not record its model (no "
               "model_config.json): pass --config with the training YAML");
  }
  for (const std::string& kv : o.model_overrides) {
    const size_t eq = kv.find('=');
    LOOM_CHECK(kv.rfind("model.", 0) == 0 && eq != std::string::npos, ConfigError, "--set '", kv,
               "': loom generate takes model.<key>=<value> (e.g. --set model.compute_dtype=float32)");
    const std::string key = kv.substr(6, eq - 6), value = kv.substr(eq + 1);
    const Json parsed = Json::parse(value, nullptr, false);
    section[key] = parsed.is_discarded() ? Json(value) : parsed;
  }
  return section;
}

// End tokens: the tokenizer's, and those of the HF folder's generation_config.json.
std::vector<int64_t> end_ids(const data::Tokenizer* tokenizer, const runtime::ResolvedLoadPath& where) {
  std::vector<int64_t> out;
  if (tokenizer && tokenizer->eos_id() >= 0) out.push_back(tokenizer->eos_id());
  const fs::path gen = fs::path(where.dir) / "generation_config.json";
  if (where.is_hf && fs::exists(gen)) {
    const Json g = runtime::read_checkpoint_json(gen.string());
    if (g.contains("eos_token_id")) {
      const Json& e = g["eos_token_id"];
      for (const Json& id : e.is_array() ? e : Json::array({e}))
        if (id.is_number_integer()) out.push_back(id.get<int64_t>());
    }
  }
  return out;
}

struct Prompt {
  std::string text;          // what the output echoes ("" for ids)
  std::vector<int64_t> ids;
};

std::vector<int64_t> encode_chat(const data::Tokenizer& tokenizer, const Json& messages, const std::string& where) {
  LOOM_CHECK(tokenizer.has_chat_template(), DataError, where, ": the tokenizer (", tokenizer.path(),
             ") has no chat_template in its tokenizer_config.json; drop --chat / \"messages\" or use the model's "
             "chat tokenizer");
  data::ChatOptions chat;
  chat.add_generation_prompt = true;
  // The template writes the special tokens itself (transformers encodes its text without them).
  return tokenizer.encode(tokenizer.apply_chat_template(messages, chat), false);
}

std::vector<Prompt> read_prompts(const GenerateOptions& o, const data::Tokenizer* tokenizer) {
  std::vector<Prompt> out;
  auto need_tokenizer = [&](const std::string& where) {
    LOOM_CHECK(tokenizer != nullptr, ConfigError, where, " is text: pass --tokenizer PATH (the model's tokenizer.json, "
               "SentencePiece .model or folder), or give token ids (\"prompt_ids\" in --prompts)");
  };
  for (const std::string& text : o.prompts) {
    need_tokenizer("--prompt");
    out.push_back({text, o.chat ? encode_chat(*tokenizer, Json::array({{{"role", "user"}, {"content", text}}}), "--chat")
                                : tokenizer->encode(text)});
  }
  if (!o.prompts_path.empty()) {
    data::JsonlReader reader(o.prompts_path);
    std::string line;
    int64_t n = 0;
    while (reader.next(line, n)) {
      const Json record = data::parse_json_line(line, o.prompts_path, n);
      const std::string where = o.prompts_path + ":" + std::to_string(n);
      if (record.contains("prompt_ids")) {
        LOOM_CHECK(record["prompt_ids"].is_array() && !record["prompt_ids"].empty(), DataError, where,
                   ": prompt_ids must be a non-empty list of token ids");
        Prompt p;
        for (const Json& id : record["prompt_ids"]) {
          LOOM_CHECK(id.is_number_integer(), DataError, where, ": prompt_ids holds ", id.dump(), ", not a token id");
          p.ids.push_back(id.get<int64_t>());
        }
        out.push_back(std::move(p));
      } else if (record.contains("messages")) {
        need_tokenizer(where);
        out.push_back({record["messages"].dump(), encode_chat(*tokenizer, record["messages"], where)});
      } else {
        LOOM_CHECK(record.contains("prompt") && record["prompt"].is_string(), DataError, where,
                   ": give \"prompt\" (text), \"messages\" (a conversation) or \"prompt_ids\" (token ids)");
        need_tokenizer(where);
        const std::string text = record["prompt"].get<std::string>();
        out.push_back({text, o.chat ? encode_chat(*tokenizer, Json::array({{{"role", "user"}, {"content", text}}}),
                                                  where)
                                    : tokenizer->encode(text)});
      }
    }
  }
  LOOM_CHECK(!out.empty(), ConfigError, "no prompt: pass --prompt TEXT or --prompts FILE.jsonl\n", generate_usage());
  return out;
}

// The text of a row's new tokens, cut before the first stop string it holds.
std::string completion_text(const data::Tokenizer* tokenizer, const std::vector<int64_t>& ids,
                            const std::vector<int64_t>& prompt, const std::vector<std::string>& stops,
                            bool* stopped = nullptr) {
  if (!tokenizer) return "";
  std::string text = tokenizer->decode_generated(ids, prompt);
  for (const std::string& s : stops)
    if (const size_t at = text.find(s); at != std::string::npos) {
      text.resize(at);
      if (stopped) *stopped = true;
    }
  return text;
}

// One completion printed as its tokens come. Only text no later token can change is printed:
// nothing from the first replacement character on (bytes a later token may complete into a
// character), nothing of a trailing run of <0xXX> byte tokens (the ByteFallback decoder turns a
// whole run into replacement characters when a later byte makes it invalid), and not a tail
// that could still grow into a stop string (which would cut it). What is printed is then a
// prefix of every later text, and of the final one.
class CompletionStream {
 public:
  CompletionStream(const data::Tokenizer& tokenizer, const std::vector<int64_t>& prompt,
                   const std::vector<std::string>& stops, std::ostream& out)
      : tokenizer_(tokenizer), prompt_(prompt), stops_(stops), out_(out) {}

  void update(const std::vector<int64_t>& ids, const std::string& text) {
    size_t ready = std::min(text.size(), text.find("\xEF\xBF\xBD", printed_));
    size_t run = ids.size();
    while (run > 0 && is_byte_token(ids[run - 1])) --run;
    if (run < ids.size()) {
      const std::vector<int64_t> settled(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(run));
      ready = std::min(ready, tokenizer_.decode_generated(settled, prompt_).size());
    }
    for (const std::string& s : stops_)
      for (size_t n = std::min(s.size() - 1, ready); n > 0; --n)
        if (text.compare(ready - n, n, s, 0, n) == 0) {
          ready -= n;
          break;
        }
    if (ready > printed_) {
      out_ << text.substr(printed_, ready - printed_) << std::flush;
      printed_ = ready;
    }
  }
  void finish(const std::string& text) { out_ << (text.size() > printed_ ? text.substr(printed_) : "") << "\n"; }

 private:
  bool is_byte_token(int64_t id) const {
    if (id < 0 || id >= tokenizer_.vocab_size()) return false;
    const std::string t = tokenizer_.id_to_token(id);
    return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>';
  }

  const data::Tokenizer& tokenizer_;
  const std::vector<int64_t>& prompt_;
  const std::vector<std::string>& stops_;
  std::ostream& out_;
  size_t printed_ = 0;
};

}  // namespace

const char* generate_usage() {
  return "usage: loom generate --load PATH [--tokenizer PATH] (--prompt TEXT ... | --prompts FILE.jsonl)\n"
         "                     [--chat] [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
         "                     [--seed S] [--stop STR ...] [--speculative mtp] [--json] [--config FILE]\n"
         "                     [--set model.key=value]\n"
         "  --load PATH          a Loom checkpoint (save directory or iteration_* folder) or a Hugging Face folder\n"
         "  --tokenizer PATH     tokenizer.json, SentencePiece .model or a folder (default: the HF folder's)\n"
         "  --prompt TEXT        a prompt (repeatable); --prompts FILE: {\"prompt\"}, {\"messages\"} or\n"
         "                       {\"prompt_ids\"} per line\n"
         "  --chat               format --prompt text with the tokenizer's chat template, as a user turn\n"
         "  --max-new-tokens N   tokens to generate at most (default 64)\n"
         "  --temperature T      0 (default) is greedy; above, sample from softmax(logits / T)\n"
         "  --top-k K, --top-p P sample from the K most likely tokens, then from the smallest set reaching P\n"
         "  --seed S             the sampling seed (the same tokens for a seed on any machine and thread count)\n"
         "  --stop STR           end a completion at STR (repeatable); the end-of-text token always ends it\n"
         "  --speculative mtp    draft tokens with the model's MTP layers (DeepSeek-V3) and check them in one\n"
         "                       forward: greedy only, the same tokens as without, fewer forwards\n"
         "  --json               one JSON object per prompt: prompt, completion, ids, finish_reason\n"
         "  --config FILE        take the model section from a training YAML instead of PATH's\n"
         "  --set model.k=v      override a model field (e.g. model.compute_dtype=float32)\n"
         "  --threads N          compute threads\n";
}

GenerateOptions parse_generate_args(const std::vector<std::string>& args) {
  GenerateOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      LOOM_CHECK(i + 1 < args.size(), ConfigError, a, " needs a value\n", generate_usage());
      return args[++i];
    };
    if (a == "--load") o.load_path = value();
    else if (a == "--tokenizer") o.tokenizer_path = value();
    else if (a == "--config") o.config_path = value();
    else if (a == "--set") o.model_overrides.push_back(value());
    else if (a == "--prompt") o.prompts.push_back(value());
    else if (a == "--prompts") o.prompts_path = value();
    else if (a == "--chat") o.chat = true;
    else if (a == "--json") o.json = true;
    else if (a == "--stop") o.stops.push_back(value());
    else if (a == "--speculative") {
      const std::string kind = value();
      LOOM_CHECK(kind == "mtp", ConfigError, "--speculative takes 'mtp' (drafts from the model's multi-token "
                 "prediction layers), got '", kind, "'");
      o.speculative = runtime::Speculative::mtp;
    }
    else if (a == "--max-new-tokens") {
      const double n = number_flag(a, value());
      LOOM_CHECK(n >= 1 && n == static_cast<double>(static_cast<int64_t>(n)), ConfigError,
                 "--max-new-tokens must be a positive integer, got ", n);
      o.max_new_tokens = static_cast<int64_t>(n);
    } else if (a == "--temperature") {
      o.sampling.temperature = number_flag(a, value());
      LOOM_CHECK(o.sampling.temperature >= 0, ConfigError, "--temperature must be >= 0 (0 is greedy), got ",
                 o.sampling.temperature);
    } else if (a == "--top-k") {
      const double k = number_flag(a, value());
      LOOM_CHECK(k >= 0 && k == static_cast<double>(static_cast<int64_t>(k)), ConfigError,
                 "--top-k must be a whole number >= 0 (0 keeps every token), got ", k);
      o.sampling.top_k = static_cast<int64_t>(k);
    } else if (a == "--top-p") {
      o.sampling.top_p = number_flag(a, value());
      LOOM_CHECK(o.sampling.top_p > 0 && o.sampling.top_p <= 1, ConfigError, "--top-p must be in (0, 1], got ",
                 o.sampling.top_p);
    } else if (a == "--seed") {
      const double s = number_flag(a, value());
      LOOM_CHECK(s >= 0 && s == static_cast<double>(static_cast<uint64_t>(s)), ConfigError,
                 "--seed must be a whole number >= 0, got ", s);
      o.sampling.seed = static_cast<uint64_t>(s);
    } else {
      LOOM_THROW(ConfigError, "unknown option '", a, "'\n", generate_usage());
    }
  }
  LOOM_CHECK(!o.load_path.empty(), ConfigError, "--load PATH is required: the weights to generate with\n",
             generate_usage());
  LOOM_CHECK(o.speculative == runtime::Speculative::none || o.sampling.temperature == 0, ConfigError,
             "--speculative mtp is greedy only (a draft is kept when it equals the main model's argmax), got "
             "--temperature ", o.sampling.temperature, ": drop one of the two");
  return o;
}

void run_generate(const GenerateOptions& o, std::ostream& out, std::ostream& log) {
  const runtime::ResolvedLoadPath where = runtime::resolve_load_path(o.load_path, "--load");
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (!o.tokenizer_path.empty()) tokenizer = data::load_tokenizer(o.tokenizer_path);
  else if (where.is_hf && (fs::exists(fs::path(where.dir) / "tokenizer.json") ||
                           fs::exists(fs::path(where.dir) / "tokenizer.model")))
    tokenizer = data::load_tokenizer(where.dir);
  const std::vector<Prompt> prompts = read_prompts(o, tokenizer.get());

  const models::ModelArgs args = models::ModelArgs::from_json(model_section(o, where));
  std::unique_ptr<runtime::Backend> backend = runtime::make_backend(Device::cpu());
  if (tokenizer)
    LOOM_CHECK(tokenizer->vocab_size() <= args.vocab_size, ConfigError, "the tokenizer ", tokenizer->path(), " has ",
               tokenizer->vocab_size(), " tokens but the model's vocabulary is ", args.vocab_size,
               ": use the model's own tokenizer");
  std::vector<std::vector<int64_t>> ids;
  for (const Prompt& p : prompts) {
    for (int64_t id : p.ids)
      LOOM_CHECK(id >= 0 && id < args.vocab_size, DataError, "a prompt holds token id ", id,
                 ", outside the model's vocabulary [0, ", args.vocab_size, ")");
    ids.push_back(p.ids);
  }
  LOOM_CHECK(o.speculative == runtime::Speculative::none || args.mtp_num_layers > 0, ConfigError,
             "--speculative mtp drafts with the model's multi-token prediction layers and ", o.load_path,
             " has none (model.mtp_num_layers / num_nextn_predict_layers is 0): generate without --speculative");
  runtime::ModelRuntime model(args, *backend);
  model.load_weights(where.dir, "--load");

  runtime::GenerationOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.sampling = o.sampling;
  g.end_ids = end_ids(tokenizer.get(), where);
  g.speculative = o.speculative;
  // One prompt in text mode streams; every prompt stops at a --stop string as soon as it appears.
  const bool stream = prompts.size() == 1 && !o.json && tokenizer;
  std::unique_ptr<CompletionStream> streamed;
  if (stream) streamed = std::make_unique<CompletionStream>(*tokenizer, ids[0], o.stops, out);
  std::vector<std::vector<int64_t>> so_far(prompts.size());
  auto on_token = [&](size_t row, int64_t token) {
    so_far[row].push_back(token);
    if (!tokenizer || (o.stops.empty() && !stream)) return false;
    bool stopped = false;
    const std::string text = completion_text(tokenizer.get(), so_far[row], ids[row], o.stops, &stopped);
    if (streamed) streamed->update(so_far[row], text);
    return stopped;
  };
  runtime::TokenGenerator generator(model.causal_lm(), args.max_position_embeddings);
  const std::vector<runtime::Generation> result = generator.generate(ids, g, on_token);

  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string text = completion_text(tokenizer.get(), result[i].ids, ids[i], o.stops);
    if (o.json) {
      Json line = {{"prompt", prompts[i].text}, {"completion", text}, {"ids", result[i].ids},
                   {"finish_reason", result[i].finish_reason}};
      if (!tokenizer) line.erase("completion");
      out << line.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    } else if (streamed) {
      streamed->finish(text);
    } else {
      out << "=== " << (i + 1) << ": " << prompts[i].text << "\n" << (tokenizer ? text : Json(result[i].ids).dump())
          << "\n";
    }
  }
  out << std::flush;  // the completions before the summary, when both go to a terminal
  const runtime::GenerationStats& s = generator.last_stats();
  // The decode rate counts the tokens after each row's first (which the prefill gives).
  const auto after_prefill = static_cast<double>(s.generated_tokens - static_cast<int64_t>(ids.size()));
  char line[320];
  std::snprintf(line, sizeof(line),
                "generate: %lld prompt tokens in %.2f s, %lld new tokens in %.2f s (%.1f tokens/s), KV cache %.1f MiB\n",
                static_cast<long long>(s.prompt_tokens), s.prefill_s, static_cast<long long>(s.generated_tokens),
                s.decode_s, s.decode_s > 0 ? after_prefill / s.decode_s : 0.0,
                static_cast<double>(s.cache_bytes) / (1 << 20));
  log << line;
  if (o.speculative == runtime::Speculative::mtp) {
    std::snprintf(line, sizeof(line),
                  "speculative (mtp, %lld draft%s per forward): %lld of %lld drafts kept (%.0f%%), %.2f tokens per "
                  "forward of the main model (1 without drafts)\n",
                  static_cast<long long>(args.mtp_num_layers), args.mtp_num_layers == 1 ? "" : "s",
                  static_cast<long long>(s.accepted_tokens), static_cast<long long>(s.drafted_tokens),
                  s.drafted_tokens ? 100.0 * static_cast<double>(s.accepted_tokens) / static_cast<double>(s.drafted_tokens) : 0.0,
                  s.row_forwards ? static_cast<double>(s.generated_tokens) / static_cast<double>(s.row_forwards) : 1.0);
    log << line;
  }
}

}  // namespace loom::eval
