// The training loop end to end on a tiny Llama: the loss falls, gradient accumulation equals one
// big batch, a resumed run continues bit for bit, runs are deterministic, Ctrl-C saves, health
// checks skip and stop. (MindFormers' training loop; docs/training.md "The step".)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "loom/core/allocator.h"
#include "loom/core/parallel.h"
#include "trainer_fixture.h"

using namespace loom;
using namespace loom::train;
namespace lt = loom::testing;
namespace fs = std::filesystem;

namespace {

std::vector<double> losses_of(const std::string& run_dir) {
  std::vector<double> out;
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}

std::map<std::string, std::vector<float>> params_of(Trainer& t) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [n, p] : t.model().module().named_parameters()) out[n] = p->tensor.to_float_vector();
  return out;
}

}  // namespace

TEST(Trainer, TinyLlamaLossFalls) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 40, 4, 4)),
            lt::quiet_options(dir.file("run")));
  TrainSummary s = t.train();
  EXPECT_EQ(s.last_step, 40);
  EXPECT_GT(s.first_loss, 3.9);  // ≈ ln(64) = 4.16 at init
  EXPECT_LT(s.last_loss, s.first_loss - 1.0) << "first " << s.first_loss << " last " << s.last_loss;
  auto losses = losses_of(dir.file("run"));
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_EQ(losses.front(), s.first_loss);
  EXPECT_TRUE(fs::exists(dir.file("run/checkpoints/iteration_00000040/common.json")));  // the save at the end
}

TEST(Trainer, GradientAccumulationEqualsOneBigBatch) {
  // 4 micro-batches of 2 vs one batch of 8, fp32: same samples, same update.
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string no_save = "checkpoint:\n  enable_save: False\n";
  Trainer accumulate(lt::tiny_config(lt::tiny_config_yaml(data, 2, 2, 8, no_save)),
                     lt::quiet_options(dir.file("acc")));
  Trainer big(lt::tiny_config(lt::tiny_config_yaml(data, 2, 8, 8, no_save)),
              lt::quiet_options(dir.file("big")));
  EXPECT_EQ(accumulate.state().num_accumulation_steps, 4);
  EXPECT_EQ(big.state().num_accumulation_steps, 1);
  TrainSummary a = accumulate.train(), b = big.train();
  EXPECT_NEAR(a.first_loss, b.first_loss, 1e-6);
  EXPECT_NEAR(a.last_loss, b.last_loss, 1e-6);
  auto pa = params_of(accumulate), pb = params_of(big);
  for (auto& [n, v] : pa)
    for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(v[i], pb[n][i], 1e-6) << n << "[" << i << "]";
}

TEST(Trainer, ResumeContinuesBitForBit) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string save = "checkpoint:\n  save_interleaved_steps: 3\n  save_path: '" + dir.file("ck") + "'\n";
  Trainer straight(lt::tiny_config(lt::tiny_config_yaml(data, 6, 2, 4, "checkpoint:\n  enable_save: False\n")), lt::quiet_options(dir.file("straight")));
  straight.train();
  {
    Trainer first(lt::tiny_config(lt::tiny_config_yaml(data, 3, 2, 4, save)),
                  lt::quiet_options(dir.file("first")));
    first.train();
  }
  Trainer resumed(lt::tiny_config(lt::tiny_config_yaml(data, 6, 2, 4, save),
                                       {"checkpoint.load_path=" + dir.file("ck")}), lt::quiet_options(dir.file("second")));
  EXPECT_EQ(resumed.state().global_step, 3);
  EXPECT_EQ(resumed.state().consumed_samples, 12);
  resumed.train();
  auto all = losses_of(dir.file("straight"));
  auto head = losses_of(dir.file("first")), tail = losses_of(dir.file("second"));
  ASSERT_EQ(all.size(), 6u);
  ASSERT_EQ(head.size(), 3u);
  ASSERT_EQ(tail.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(all[i], head[i]) << "step " << i + 1;
    EXPECT_EQ(all[3 + i], tail[i]) << "step " << i + 4;
  }
  EXPECT_EQ(params_of(straight), params_of(resumed));
}

TEST(Trainer, DeterministicRunsAreIdentical) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  for (const char* run : {"r1", "r2"}) {
    Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 4, 2, 4, "checkpoint:\n  enable_save: False\n")), lt::quiet_options(dir.file(run)));
    t.train();
  }
  EXPECT_EQ(losses_of(dir.file("r1")), losses_of(dir.file("r2")));
  // training.deterministic: False changes nothing (docs/configuration.md "Fields without an
  // effect"): Loom's kernels and reductions always run in a fixed order.
  config::LoadedConfig loose = lt::tiny_config(lt::tiny_config_yaml(data, 4, 2, 4, "checkpoint:\n  enable_save: False\n"),
                                               {"training.deterministic=False"});
  std::string warned;
  for (const std::string& w : loose.warnings) warned += w + "\n";
  EXPECT_NE(warned.find("training.deterministic: is False, but Loom's kernels and reductions always run in a fixed "
                        "order"),
            std::string::npos)
      << warned;
  Trainer t(std::move(loose), lt::quiet_options(dir.file("r3")));
  t.train();
  EXPECT_EQ(losses_of(dir.file("r1")), losses_of(dir.file("r3")));
}

// create_attention_mask: True (the reference's default) asks for Megatron's dense [S, S] mask,
// which Loom passes in its compressed form (data/sample_builder.h): the causal mask is the
// attention's own, reset_attention_mask's document mask the documents' ends. The losses equal
// those of the compressed options, and the documents do change them.
TEST(Trainer, DenseAttentionMasksTrainAsTheirCompressedForm) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  auto losses = [&](const std::string& run, std::vector<std::string> overrides) {
    overrides.push_back("train_dataset.dataloader.config.eod=3");  // token 3 ends documents in the pattern data
    Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 2, 2, 4, "checkpoint:\n  enable_save: False\n"), overrides),
              lt::quiet_options(dir.file(run)));
    t.train();
    return losses_of(dir.file(run));
  };
  const std::string C = "train_dataset.dataloader.config.";
  const std::vector<double> dense_causal = losses(
      "dense_causal", {C + "create_attention_mask=True"});
  EXPECT_EQ(dense_causal, losses("causal", {C + "create_attention_mask=False"}));
  const std::vector<double> dense_documents =
      losses("dense_documents", {C + "create_attention_mask=True", C + "reset_attention_mask=True"});
  EXPECT_EQ(dense_documents, losses("compressed_documents", {C + "create_attention_mask=False",
                                                             C + "create_compressed_eod_mask=True",
                                                             C + "reset_attention_mask=True"}));
  ASSERT_EQ(dense_documents.size(), 2u);
  EXPECT_NE(dense_documents, dense_causal);
}

TEST(Trainer, StopRequestSavesAndReturns) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 50, 2, 2)),
            lt::quiet_options(dir.file("run")));
  request_stop();  // as if Ctrl-C arrived during the first step
  TrainSummary s = t.train();
  clear_stop_request();
  EXPECT_TRUE(s.interrupted);
  EXPECT_EQ(s.last_step, 0);
  // a stop before any update saves nothing; after at least one step the end-of-train save runs
  EXPECT_FALSE(fs::exists(dir.file("run/checkpoints/latest_checkpointed_iteration.txt")));
}

TEST(Trainer, HealthCheckSkipsAndThenStops) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string health =
      "checkpoint:\n  enable_save: False\nmonitor:\n  health_checkpoint:\n    global_norm_skip_threshold: 1.e-6\n"
      "    global_norm_skip_time: 2\n";
  Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 5, 2, 2, health)),
            lt::quiet_options(dir.file("run")));
  auto before = params_of(t);
  try {
    t.train();
    FAIL() << "expected the run to stop";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 updates in a row were skipped"), std::string::npos) << e.what();
  }
  EXPECT_EQ(params_of(t), before);  // no update was applied
}

// An update that would overflow (a warm-up starting at an lr of 1e39, not an fp32) is skipped by
// the optimizer's guard: nothing written, the step logged as skipped with the reason, and the
// run continues with the next, finite update.
TEST(Trainer, OverflowingUpdateIsSkippedAndTheRunContinues) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::vector<std::string> warmup = {"lr_scheduler.warmup_steps=1", "lr_scheduler.warmup_lr_init=1.e+39"};
  const std::string no_save = "checkpoint:\n  enable_save: False\n";
  Trainer one(lt::tiny_config(lt::tiny_config_yaml(data, 1, 2, 2, no_save), warmup),
              lt::quiet_options(dir.file("one")));
  const auto before = params_of(one);
  EXPECT_EQ(one.train().skipped_updates, 1);
  EXPECT_EQ(params_of(one), before);  // bit for bit: nothing of the update was written

  Trainer four(lt::tiny_config(lt::tiny_config_yaml(data, 4, 2, 2, no_save), warmup),
               lt::quiet_options(dir.file("four")));
  const TrainSummary s = four.train();
  EXPECT_EQ(s.skipped_updates, 1);
  EXPECT_TRUE(std::isfinite(s.last_loss));
  EXPECT_NE(params_of(four), before);
  std::ifstream in(dir.file("four") + "/metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].value("skipped", false), true);
  EXPECT_NE(lines[0].value("skip_reason", std::string()).find("the update would make '"), std::string::npos)
      << lines[0].dump();
  EXPECT_NE(lines[0].value("skip_reason", std::string()).find("' (rank 0) inf or nan"), std::string::npos);
  for (size_t i = 1; i < lines.size(); ++i) EXPECT_FALSE(lines[i].contains("skipped")) << lines[i].dump();
}

TEST(Trainer, DataVocabularyLargerThanTheModelsIsNamed) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);  // ids up to 63
  Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 2, 2, 2, "checkpoint:\n  enable_save: False\n"),
                            {"model.vocab_size=32"}), lt::quiet_options(dir.file("run")));
  try {
    t.train();
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("but model.vocab_size is 32"), std::string::npos) << e.what();
  }
}

TEST(Trainer, MuonTrainsATinyDeepSeekV3WithTheModelsSplit) {
  // Muon (spec training_hyperparameters.md §1.2) on an MLA + MoE model: the optimizer gets its
  // per-head and gate/up pieces from the model; QK-clip reads the attention's max logits.
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  std::string yaml = lt::tiny_config_yaml(data, 6, 2, 2, "checkpoint:\n  enable_save: False\n");
  const size_t m = yaml.find("model:\n");
  yaml = yaml.substr(0, m) +
         "model:\n  model_type: deepseek_v3\n  vocab_size: 64\n  hidden_size: 32\n  intermediate_size: 64\n"
         "  num_hidden_layers: 2\n  num_attention_heads: 4\n  q_lora_rank: 16\n  kv_lora_rank: 16\n"
         "  qk_nope_head_dim: 8\n  qk_rope_head_dim: 4\n  v_head_dim: 8\n  n_routed_experts: 4\n"
         "  num_experts_per_tok: 2\n  moe_intermediate_size: 16\n  first_k_dense_replace: 1\n  n_group: 1\n"
         "  topk_group: 1\n  max_position_embeddings: 64\n  params_dtype: float32\n  compute_dtype: float32\n";
  yaml.replace(yaml.find("type: AdamW"), 11, "type: Muon");
  Trainer t(lt::tiny_config(yaml), lt::quiet_options(dir.file("run")));
  ASSERT_EQ(t.optimizer().type(), "Muon");
  TrainSummary s = t.train();
  EXPECT_TRUE(std::isfinite(s.last_loss));
  EXPECT_LT(s.last_loss, s.first_loss);
}

// The trainer runs what the configuration resolved, as it is: the layout, the model, the memory
// and loader options are the ones resolve_config gives, and it resolves nothing itself.
TEST(Trainer, RunsWhatTheConfigurationResolved) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  const std::string extra = "checkpoint:\n  enable_save: False\nrecompute:\n  mode: full\n  full_recompute_layer: ['1']\n";
  config::LoadedConfig loaded = lt::tiny_config(lt::tiny_config_yaml(data, 2, 2, 8, extra));
  const config::ResolvedConfig again = config::resolve_config(loaded.config, 1);
  Trainer t(std::move(loaded), lt::quiet_options(dir.file("run")));
  EXPECT_EQ(again.layout.num_accumulation_steps, 4);  // 8 // (1 x 2)
  EXPECT_EQ(t.state().num_accumulation_steps, again.layout.num_accumulation_steps);
  EXPECT_EQ(t.resolved().layout.samples_per_step, again.layout.samples_per_step);
  EXPECT_EQ(t.model().num_layers(), again.model_args().num_layers);
  EXPECT_EQ(t.model().module().num_parameters(), runtime::build_causal_lm(again.model_args())->module().num_parameters());
  EXPECT_EQ(t.resolved().recompute.full_layers, (std::set<int64_t>{1}));
  EXPECT_EQ(t.resolved().recompute.full_layers, again.recompute.full_layers);
  EXPECT_EQ(t.seq_length(), again.loader_options().config.seq_length);
  EXPECT_EQ(t.data_loader().settings().num_workers, again.loader_options().num_parallel_workers);
  EXPECT_EQ(t.data_loader().settings().local_batch_size, 2);
  EXPECT_EQ(t.train().last_step, 2);
}

// The trainer takes a resolution for its own world size only.
TEST(Trainer, NeedsAResolutionForItsWorldSize) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  config::LoadedConfig unresolved =
      config::load_config_text(lt::tiny_config_yaml(data, 2, 2, 2), "<test config>", config::LoadOptions{});
  EXPECT_THROW(Trainer(std::move(unresolved), lt::quiet_options(dir.file("a"))), ValueError);
  config::LoadOptions for_two;
  for_two.world_size = 2;
  config::LoadedConfig two = config::load_config_text(lt::tiny_config_yaml(data, 2, 2, 4), "<test config>", for_two);
  EXPECT_THROW(Trainer(std::move(two), lt::quiet_options(dir.file("b"))), ValueError);
}

// The start-up memory estimate (config/memory_estimate.h) is a lower bound of what a step really
// holds at its peak: parameters, gradients, optimizer state and the activations of a micro-batch.
TEST(Trainer, MemoryEstimateIsALowerBoundOfTheMeasuredPeak) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  config::LoadedConfig loaded = lt::tiny_config(lt::tiny_config_yaml(data, 2, 4, 4, "checkpoint:\n  enable_save: False\n"));
  ASSERT_TRUE(loaded.resolved->memory.has_value());
  const config::MemoryEstimate estimate = *loaded.resolved->memory;
  Trainer t(std::move(loaded), lt::quiet_options(dir.file("run")));
  t.train();
  const int64_t peak = loom::memory_stats().peak_bytes;  // of the last step
  EXPECT_GE(peak, estimate.per_rank_bytes());
  // A lower bound that is not far off: the step holds less than three times the estimate.
  EXPECT_LT(peak, 3 * estimate.per_rank_bytes()) << "estimate " << estimate.per_rank_bytes() << " peak " << peak;
}

// MFU divides by the peak of the unit the products run on (the backend's), for fp32 and bf16
// compute alike, and every metrics.jsonl line names that peak.
TEST(Trainer, MfuIsMeasuredAgainstThePeakOfTheComputeUnit) {
  for (const char* compute : {"float32", "bfloat16"}) {
    lt::TempDir dir;
    auto data = lt::write_pattern_dataset(dir);
    Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 2, 2, 2, "checkpoint:\n  enable_save: False\n"),
                              {std::string("model.compute_dtype=") + compute}), lt::quiet_options(dir.file("run")));
    t.train();
    const runtime::PeakFlops peak = t.runtime().backend().peak_flops(t.resolved().model_args().compute_dtype, num_threads());
    std::ifstream in(fs::path(dir.file("run")) / "metrics.jsonl");
    int lines = 0;
    for (std::string line; std::getline(in, line); ++lines) {
      const auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j["mfu_peak"].get<std::string>(), peak.description) << compute;
      const double expected = t.model().flops_per_token(t.seq_length()) * j["tokens_per_s"].get<double>() / (peak.gflops * 1e9);
      EXPECT_NEAR(j["mfu"].get<double>(), expected, 1e-9 * expected) << compute;
    }
    EXPECT_EQ(lines, 2) << compute;
  }
}

// bf16 compute (fp32 master weights) follows the fp32 loss curve of the same deterministic run:
// every step and the end within 1% (measured here: 2e-4 at most; bench/bf16_convergence.sh
// checks the 300-step demo the same way). Runs on whatever matrix path the CPU has.
TEST(Trainer, Bf16ComputeFollowsTheFp32LossCurve) {
  std::map<std::string, std::vector<double>> curves;
  for (const char* compute : {"float32", "bfloat16"}) {
    lt::TempDir dir;
    auto data = lt::write_pattern_dataset(dir);
    Trainer t(lt::tiny_config(lt::tiny_config_yaml(data, 30, 4, 4, "checkpoint:\n  enable_save: False\n"),
                              {std::string("model.compute_dtype=") + compute}), lt::quiet_options(dir.file("run")));
    t.train();
    curves[compute] = losses_of(dir.file("run"));
  }
  const auto& fp32 = curves["float32"];
  const auto& bf16 = curves["bfloat16"];
  ASSERT_EQ(fp32.size(), 30u);
  ASSERT_EQ(bf16.size(), 30u);
  EXPECT_LT(fp32.back(), fp32.front() - 1.0) << "the fp32 run did not learn: the comparison would say nothing";
  EXPECT_NE(bf16, fp32) << "bf16 compute gave the fp32 bits: it did not run in bf16";
  for (size_t i = 0; i < fp32.size(); ++i)
    EXPECT_NEAR(bf16[i], fp32[i], 0.01 * fp32[i]) << "step " << i + 1;
  EXPECT_NEAR(bf16.back(), fp32.back(), 0.01 * fp32.back());
}
