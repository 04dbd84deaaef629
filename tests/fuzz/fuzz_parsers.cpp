// A deterministic mutation fuzzer for every parser of untrusted input: the YAML configuration,
// the safetensors header, the Megatron .idx, a sharded checkpoint's metadata.json, a checkpoint's
// common.json and an HF config.json. Each starts from a valid input Loom wrote itself, applies
// seeded mutations (bit flips, byte and block edits, boundary numbers in place of numbers,
// splices) and feeds the result to the real reader. A loom::Error is the expected outcome of a
// bad input; anything else (another exception, a crash, a sanitizer report, a hang caught by the
// caller's timeout) is a failure. Deterministic: the same seed gives the same inputs.
//
//   loom_fuzz <parser|all> [mutations=300] [seed=1]
//   parsers: yaml safetensors idx metadata common hf_config
// Exit 0 when every input ended in a result or a loom::Error; 1 with the input that did not.
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <typeinfo>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/config/config.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/data/indexed_dataset.h"
#include "loom/data/indexed_dataset_builder.h"
#include "loom/dist/process_group.h"
#include "loom/dist/sharded_checkpoint.h"
#include "loom/models/hf_checkpoint.h"
#include "loom/models/model_args.h"
#include "loom/models/safetensors.h"
#include "loom/train/checkpoint.h"

namespace fs = std::filesystem;
using namespace loom;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

// ---- Mutations -------------------------------------------------------------------------------

const char* const kBoundaryNumbers[] = {"0", "-1", "1", "2147483647", "2147483648", "-2147483649",
                                        "9223372036854775807", "9223372036854775808", "-9223372036854775808",
                                        "18446744073709551615", "1e308", "1e309", "-0.0", "4611686018427387904",
                                        "0.5", ".inf", ".nan", "NaN", "Infinity", "65536", "4294967296"};

// One of: flip a bit, set a byte, insert/delete/duplicate a block, replace a number with a
// boundary value, splice in a piece of the seed, truncate.
std::string mutate(const std::string& seed, std::mt19937_64& rng) {
  std::string s = seed;
  auto pick = [&](std::size_t n) { return n == 0 ? std::size_t{0} : static_cast<std::size_t>(rng() % n); };
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 8) {
      case 0:
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng() % 256);
        break;
      case 2: {
        const std::size_t at = pick(s.size() + 1), len = 1 + pick(16);
        std::string junk(len, '\0');
        for (auto& c : junk) c = static_cast<char>(rng() % 256);
        s.insert(at, junk);
        break;
      }
      case 3:
        if (!s.empty()) {
          const std::size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<std::size_t>(32, s.size() - at)));
        }
        break;
      case 4:
        if (!s.empty()) {
          const std::size_t at = pick(s.size()), len = 1 + pick(std::min<std::size_t>(64, s.size() - at));
          s.insert(pick(s.size() + 1), s.substr(at, len));
        }
        break;
      case 5: {
        // A number (a run of digits) becomes a boundary value.
        std::vector<std::size_t> starts;
        for (std::size_t i = 0; i < s.size(); ++i)
          if (std::isdigit(static_cast<unsigned char>(s[i])) &&
              (i == 0 || !std::isdigit(static_cast<unsigned char>(s[i - 1]))))
            starts.push_back(i);
        if (starts.empty()) break;
        const std::size_t at = starts[pick(starts.size())];
        std::size_t end = at;
        while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) || s[end] == '.')) ++end;
        s.replace(at, end - at, kBoundaryNumbers[pick(std::size(kBoundaryNumbers))]);
        break;
      }
      case 6:
        if (!seed.empty()) {
          const std::size_t at = pick(seed.size()), len = 1 + pick(std::min<std::size_t>(128, seed.size() - at));
          const std::size_t to = pick(s.size() + 1);
          s.replace(to, std::min(len, s.size() - to), seed.substr(at, len));
        }
        break;
      case 7:
        s.resize(pick(s.size() + 1));
        break;
    }
  }
  return s;
}

// ---- Targets: a valid seed written by Loom, and the reader of a mutated copy ----------------

struct Target {
  std::string seed;                                        // the valid input
  std::function<void(const std::string& input)> read;      // feeds one input to the parser
};

std::string tiny_yaml() {
  return "training:\n  steps: 3\n  local_batch_size: 2\n  global_batch_size: 2\n  max_norm: 1.0\n"
         "optimizer:\n  type: AdamW\n  betas: [0.9, 0.95]\n  weight_decay: 0.01\n"
         "lr_scheduler:\n  type: CosineWithWarmUpLR\n  learning_rate: 3.e-3\n  warmup_steps: 1\n  lr_end: 1.e-4\n"
         "parallelism:\n  data_parallel_shard: -1\n"
         "recompute:\n  mode: full\n  full_recompute_layer: ['0-1']\n"
         "train_dataset:\n  dataloader:\n    type: BlendedMegatronDatasetDataLoader\n    sizes: [400, 0, 0]\n"
         "    config:\n      seq_length: 32\n      split: '1,0,0'\n      data_path: ['/nonexistent/tokens']\n"
         "  num_parallel_workers: 1\n"
         "model:\n  model_type: llama\n  vocab_size: 64\n  hidden_size: 32\n  intermediate_size: 64\n"
         "  num_hidden_layers: 2\n  num_attention_heads: 4\n  num_key_value_heads: 2\n"
         "  rope_scaling: {type: yarn, factor: 4.0, original_max_position_embeddings: 32}\n"
         "  params_dtype: float32\n  compute_dtype: float32\n";
}

std::map<std::string, Tensor> small_state() {
  return {{"a.weight", Tensor::full({3, 4}, 0.5, DType::f32)},
          {"b.bias", Tensor::full({5}, 1.0, DType::bf16)},
          {"global_step", Tensor::scalar(3.0, DType::i64)}};
}

std::map<std::string, Target> make_targets(const fs::path& work) {
  std::map<std::string, Target> t;
  config::LoadOptions load;
  load.world_size = 1;
  t["yaml"] = {tiny_yaml(), [load](const std::string& in) { config::load_config_text(in, "fuzz.yaml", load); }};

  const fs::path st = work / "seed.safetensors";
  models::write_safetensors(st.string(), small_state(), {{"format", "loom"}});
  t["safetensors"] = {slurp(st), [work](const std::string& in) {
                        write(work / "in.safetensors", in);
                        const auto f = models::SafetensorsFile::open((work / "in.safetensors").string());
                        for (const auto& e : f.entries()) (void)f.tensor(e.name, true);
                      }};

  const fs::path prefix = work / "tokens";
  {
    data::IndexedDatasetBuilder b(prefix.string() + ".bin", data::TokenDType::u16);
    for (int d = 0; d < 6; ++d) {
      std::vector<int64_t> tokens;
      for (int i = 0; i < 5 + d; ++i) tokens.push_back(d * 10 + i);
      const std::vector<int32_t> lengths{static_cast<int32_t>(tokens.size())};
      b.add_document(tokens, lengths);
    }
    b.finalize(prefix.string() + ".idx");
  }
  t["idx"] = {slurp(prefix.string() + ".idx"), [work, prefix](const std::string& in) {
                const fs::path p = work / "in_tokens";
                write(p.string() + ".idx", in);
                fs::copy_file(prefix.string() + ".bin", p.string() + ".bin", fs::copy_options::overwrite_existing);
                data::IndexedDataset ds(p.string());
                std::vector<int64_t> buf;
                for (int64_t i = 0; i < ds.num_sequences() && i < 64; ++i) {
                  buf.resize(static_cast<std::size_t>(std::max<int32_t>(ds.sequence_length(i), 0)));
                  ds.read(i, 0, static_cast<int64_t>(buf.size()), buf.data());
                }
              }};

  // A sharded checkpoint folder of one rank, written by the sharded save.
  const fs::path ck = work / "sharded";
  fs::create_directories(ck);
  auto group = std::shared_ptr<dist::ProcessGroup>(dist::make_single_rank_group("fuzz"));
  std::vector<dist::ShardedTensorEntry> entries;
  for (const auto& [name, tensor] : small_state()) entries.push_back(dist::whole_entry(name, tensor));
  const dist::ShardedSave save = dist::prepare_sharded_save(
      *group, entries, [](bool opt, int, int) { return opt ? std::string("opt.safetensors") : "model.safetensors"; },
      false);
  models::write_safetensors((ck / "model.safetensors").string(), save.model, {});
  write(ck / "metadata.json", save.metadata.dump());
  t["metadata"] = {save.metadata.dump(), [ck, entries](const std::string& in) {
                     write(ck / "metadata.json", in);
                     auto targets = entries;
                     for (auto& e : targets) e.local = Tensor::zeros(e.global_shape, e.local.dtype());
                     dist::load_resharded(ck.string(), targets, false);
                   }};

  // A trainer checkpoint folder (common.json and the model file) as the checkpoint manager saves it.
  const fs::path saves = work / "saves";
  train::CheckpointOptions co;
  co.save_path = saves.string();
  co.async_save = false;
  train::CheckpointManager manager(co, 0, 1, [] {});
  train::CheckpointContents contents;
  contents.iteration = 3;
  contents.step_num = 10;
  contents.global_batch_size = 2;
  contents.consumed_samples = 6;
  contents.model = {{"a.weight", Tensor::full({3, 4}, 0.5, DType::f32)}};
  contents.extra = {{"data", {{"consumed_samples", 6}}}};
  manager.save(contents);
  const fs::path iteration = saves / runtime::iteration_dir_name(3);
  t["common"] = {slurp(iteration / "common.json"), [iteration, saves](const std::string& in) {
                   write(iteration / "common.json", in);
                   const auto loaded = runtime::read_checkpoint_state(saves.string(), false);
                   (void)loaded.global_step();
                   (void)loaded.consumed_samples();
                   (void)loaded.global_batch_size();
                 }};

  const fs::path hf = work / "hf";
  fs::create_directories(hf);
  nlohmann::ordered_json hf_config = {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"},
                                      {"vocab_size", 64}, {"hidden_size", 32}, {"intermediate_size", 64},
                                      {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                                      {"num_key_value_heads", 2}, {"head_dim", 8}, {"rms_norm_eps", 1e-6},
                                      {"rope_theta", 1000000.0}, {"tie_word_embeddings", false},
                                      {"rope_scaling", nullptr}, {"torch_dtype", "float32"}};
  t["hf_config"] = {hf_config.dump(2), [hf](const std::string& in) {
                      write(hf / "config.json", in);
                      models::ModelArgs::from_json(models::read_hf_config(hf.string()), "config.json", false);
                    }};
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  const long mutations = argc > 2 ? std::atol(argv[2]) : 300;
  const unsigned long long seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
  log::set_level(log::Level::error);
  const fs::path work = fs::temp_directory_path() / ("loom_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(work);
  // A misspelt parser or mutation count would fuzz nothing and still exit 0 (CTest: Passed).
  if (mutations <= 0) {
    std::fprintf(stderr, "error: mutations '%s' must be a positive count\n", argv[2]);
    return 2;
  }
  int failures = 0, fuzzed = 0;
  try {
    auto targets = make_targets(work);
    for (auto& [name, target] : targets) {
      if (which != "all" && which != name) continue;
      ++fuzzed;
      // The seed itself must be read without an error: else the mutations test nothing.
      target.read(target.seed);
      std::mt19937_64 rng(seed * 1000003ull + std::hash<std::string>{}(name));
      long rejected = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < mutations; ++i) {
        const std::string input = mutate(target.seed, rng);
        try {
          target.read(input);
        } catch (const loom::Error&) {
          ++rejected;
        } catch (const std::exception& e) {
          const fs::path keep = work.parent_path() / ("loom_fuzz_failure_" + name + "_" + std::to_string(i));
          write(keep, input);
          std::fprintf(stderr, "FAIL %s mutation %ld (seed %llu): %s is not a loom::Error: %s\n  input kept in %s\n",
                       name.c_str(), i, seed, typeid(e).name(), e.what(), keep.c_str());
          ++failures;
        }
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%-12s %ld mutations, %ld rejected with a loom::Error, %ld read, %.2fs\n", name.c_str(), mutations,
                  rejected, mutations - rejected, s);
    }
    if (fuzzed == 0) {
      std::string names;
      for (const auto& [name, target] : targets) names += " " + name;
      std::fprintf(stderr, "error: unknown parser '%s'; the parsers are:%s (or all)\n", which.c_str(), names.c_str());
      failures = 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: setting up the seeds: %s\n", e.what());
    failures = 1;
  }
  std::error_code ec;
  fs::remove_all(work, ec);
  return failures == 0 ? 0 : 1;
}
