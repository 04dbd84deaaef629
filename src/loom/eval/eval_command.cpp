#include "loom/eval/eval_command.h"

#include <chrono>
#include <cstdio>
#include <ostream>

#include <nlohmann/json.hpp>

#include "loom/config/config.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/data/data_loader.h"
#include "loom/data/dataset_builder.h"
#include "loom/eval/multiple_choice.h"
#include "loom/runtime/backend.h"
#include "loom/runtime/evaluation.h"
#include "loom/runtime/model_runtime.h"

namespace loom::eval {

namespace {

using Json = nlohmann::ordered_json;

data::Split parse_split_name(const std::string& name) {
  if (name == "train") return data::Split::train;
  if (name == "valid") return data::Split::valid;
  LOOM_CHECK(name == "test", ConfigError, "--split '", name, "': use valid, test or train\n", eval_usage());
  return data::Split::test;
}

std::string describe_weights(const runtime::LoadedWeights& w) {
  return (w.is_hf ? "Hugging Face weights in " : "checkpoint ") + w.dir;
}

// The split's loss: its first K global batches, this rank's data shard of each.
void evaluate_split(const EvalCommandOptions& o, const config::LoadedConfig& loaded, runtime::ModelRuntime& runtime,
                    const runtime::LoadedWeights& weights, std::ostream& out) {
  const config::ResolvedConfig& resolved = *loaded.resolved;
  const data::LoaderOptions& options = resolved.loader_options();
  const data::Split split = parse_split_name(o.split);
  const std::string gap = data::split_gap(options.config, options.sizes, split);
  LOOM_CHECK(gap.empty(), ConfigError, "--split ", o.split, ": ", gap, "; evaluate a split the data section gives "
             "samples (--split train, valid or test)");
  const dist::ParallelDims& dims = resolved.layout.dims;
  const data::ShardInfo shard =
      data::data_parallel_shard(runtime.mesh().rank(), dims.world_size(), dims.tp(), dims.cp(), dims.pp());
  auto loader = data::build_data_loader(options, loaded.config.training.local_batch_size, shard, split);
  const int64_t per_epoch = loader->batches_per_epoch() / runtime.micro_batches();
  LOOM_CHECK(per_epoch >= 1, DataError, "the ", o.split, " split holds ", loader->dataset_size(), " samples, fewer "
             "than one global batch of ", loaded.config.training.global_batch_size, ": lower "
             "training.global_batch_size (--set training.global_batch_size=N)");
  const int64_t asked = o.iters.value_or(loaded.config.training.eval_iters);
  const int64_t batches = asked == -1 ? per_epoch : asked;
  const runtime::LossEvaluation e = runtime::evaluate_loss(
      runtime.schedule(), [&loader] { return loader->next(); }, batches, dims.num_dataset_shards());
  if (runtime.mesh().rank() != 0) return;
  if (o.json) {
    out << Json{{"split", o.split},
                {"loss", e.loss},
                {"perplexity", e.perplexity},
                {"tokens", e.loss_tokens},
                {"tokens_per_s", e.tokens_per_s},
                {"global_batches", e.global_batches},
                {"seconds", e.seconds},
                {"load", weights.dir}}
               .dump()
        << "\n";
    return;
  }
  char line[512];
  std::snprintf(line, sizeof(line),
                "%s split: loss %.6f, perplexity %.4f, %lld tokens, %.0f tokens/s (%lld global batch%s of %lld "
                "samples in %.2f s)\n",
                o.split.c_str(), e.loss, e.perplexity, static_cast<long long>(e.loss_tokens), e.tokens_per_s,
                static_cast<long long>(e.global_batches), e.global_batches == 1 ? "" : "es",
                static_cast<long long>(loaded.config.training.global_batch_size), e.seconds);
  out << "eval: " << describe_weights(weights) << "\n" << line;
}

void evaluate_choices(const EvalCommandOptions& o, const config::LoadedConfig& loaded, runtime::ModelRuntime& runtime,
                      const runtime::LoadedWeights& weights, std::ostream& out) {
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (!o.tokenizer_path.empty()) tokenizer = data::load_tokenizer(o.tokenizer_path);
  const int64_t vocab = runtime.model().vocab_size();
  const std::vector<ChoiceExample> examples = read_choices(o.choices_path, tokenizer.get(), vocab);
  const dist::ParallelDims& dims = loaded.resolved->layout.dims;
  ScoringOptions scoring;
  scoring.batch_size = loaded.config.training.local_batch_size;
  scoring.max_length = runtime.model_args().max_position_embeddings;
  // Context parallelism cuts a sequence into 2·cp pieces, sequence parallelism each in tp.
  scoring.length_multiple = 2 * dims.cp() * dims.tp();
  const auto start = std::chrono::steady_clock::now();
  const ChoiceScores s = score_choices(
      examples, [&runtime](const data::Batch& batch) { return runtime.schedule().logits(batch); }, scoring);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (runtime.mesh().rank() != 0) return;
  if (o.json) {
    out << Json{{"choices", o.choices_path}, {"examples", s.examples}, {"acc", s.acc},      {"acc_norm", s.acc_norm},
                {"requests", s.requests},    {"tokens", s.tokens},     {"seconds", seconds}, {"load", weights.dir}}
               .dump()
        << "\n";
    return;
  }
  char line[512];
  std::snprintf(line, sizeof(line), "%s: acc %.4f, acc_norm %.4f over %lld examples (%lld choices, %lld tokens, %.2f s)\n",
                o.choices_path.c_str(), s.acc, s.acc_norm, static_cast<long long>(s.examples),
                static_cast<long long>(s.requests), static_cast<long long>(s.tokens), seconds);
  out << "eval: " << describe_weights(weights) << "\n" << line;
}

}  // namespace

const char* eval_usage() {
  return "usage: loom eval --config FILE --load PATH [--split valid|test|train] [--iters K] [--json]\n"
         "       loom eval --config FILE --load PATH --choices FILE.jsonl [--tokenizer PATH] [--json]\n"
         "  --config FILE      the training YAML: model, data and parallel layout to evaluate in\n"
         "  --load PATH        a Loom checkpoint (save directory or iteration_* folder) or a Hugging Face folder\n"
         "  --split S          the data split whose loss to measure (default valid)\n"
         "  --iters K          global batches to read (default training.eval_iters; -1: the whole split)\n"
         "  --choices FILE     multiple-choice questions, one JSON object per line: {\"context\", \"choices\",\n"
         "                     \"label\"} (text, needs --tokenizer) or {\"context_ids\", \"choices_ids\", \"label\"}\n"
         "  --tokenizer PATH   tokenizer.json, SentencePiece .model, or a model folder\n"
         "  --set k=v          override a configuration field; --device D its context.device_target\n"
         "  --threads N        compute threads\n"
         "  --json             one JSON object instead of the text lines\n";
}

EvalCommandOptions parse_eval_args(const std::vector<std::string>& args) {
  EvalCommandOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      LOOM_CHECK(i + 1 < args.size(), ConfigError, a, " needs a value\n", eval_usage());
      return args[++i];
    };
    if (a == "--config") o.config_path = value();
    else if (a == "--load") o.load_path = value();
    else if (a == "--split") o.split = value();
    else if (a == "--choices") o.choices_path = value();
    else if (a == "--tokenizer") o.tokenizer_path = value();
    else if (a == "--set") o.overrides.push_back(value());
    else if (a == "--device") o.overrides.push_back("context.device_target=" + value());
    else if (a == "--json") o.json = true;
    else if (a == "--iters") {
      const std::string v = value();
      char* end = nullptr;
      const long long k = std::strtoll(v.c_str(), &end, 10);
      LOOM_CHECK(!v.empty() && *end == '\0' && (k >= 1 || k == -1), ConfigError, "--iters '", v,
                 "': give a positive number of global batches, or -1 for the whole split");
      o.iters = k;
    } else {
      LOOM_THROW(ConfigError, "unknown option '", a, "'\n", eval_usage());
    }
  }
  LOOM_CHECK(!o.config_path.empty(), ConfigError, "--config FILE is required\n", eval_usage());
  LOOM_CHECK(!o.load_path.empty(), ConfigError, "--load PATH is required: the weights to evaluate\n", eval_usage());
  parse_split_name(o.split);
  LOOM_CHECK(o.choices_path.empty() || !o.iters, ConfigError, "--iters counts batches of a split; --choices scores "
             "every question of its file: pass one of them");
  return o;
}

void run_eval(const EvalCommandOptions& o, const std::shared_ptr<dist::ProcessGroup>& world, std::ostream& out) {
  // --json: the object alone on stdout (warnings stay on stderr).
  if (o.json) log::set_level(log::Level::warn);
  config::LoadOptions load;
  load.overrides = o.overrides;
  load.world_size = world->size();
  config::LoadedConfig loaded = config::load_config(o.config_path, load);
  const std::unique_ptr<runtime::Backend> backend = runtime::make_backend(loaded.resolved->device, world);
  runtime::ModelRuntime runtime(loaded.config, *loaded.resolved, *backend);
  const runtime::LoadedWeights weights = runtime.load_weights(o.load_path, "--load");
  if (!o.choices_path.empty()) evaluate_choices(o, loaded, runtime, weights, out);
  else evaluate_split(o, loaded, runtime, weights, out);
}

}  // namespace loom::eval
