// `loom train` as a user runs it: the run directory, Ctrl-C (SIGINT) saving and exiting cleanly,
// resuming from that checkpoint, and clear exits for bad command lines.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include <nlohmann/json.hpp>

#include "../train/trainer_fixture.h"
#include "loom/models/safetensors.h"

namespace fs = std::filesystem;
namespace lt = loom::testing;

namespace {

const std::string kLoom = LOOM_BINARY_DIR "/apps/loom/loom";

// Runs loom with args, output to `log`; returns the pid.
pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    dup2(fileno(stdout), fileno(stderr));
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(kLoom.c_str()));
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    setenv("LOOM_NUM_THREADS", "1", 1);
    execv(kLoom.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run(const std::vector<std::string>& args, const std::string& log) { return wait_exit(spawn(args, log)); }

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

size_t lines_in(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  std::string l;
  while (std::getline(in, l)) ++n;
  return n;
}

}  // namespace

TEST(TrainCli, CtrlCSavesStopsCleanlyAndResumes) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  lt::write_file(dir.file("train.yaml"), lt::tiny_config_yaml(data, 100000, 2, 2));
  const std::string run_dir = dir.file("run");
  pid_t pid = spawn({"train", "--config", dir.file("train.yaml"), "--output", run_dir}, dir.file("log1"));
  // Wait until a few steps are logged, then interrupt.
  for (int i = 0; i < 600 && lines_in(run_dir + "/metrics.jsonl") < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(lines_in(run_dir + "/metrics.jsonl"), 3u) << slurp(dir.file("log1"));
  kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid), 0) << slurp(dir.file("log1"));
  const std::string log = slurp(dir.file("log1"));
  EXPECT_NE(log.find("on request (Ctrl-C / SIGTERM)"), std::string::npos) << log;
  EXPECT_NE(log.find("to continue: loom train --config"), std::string::npos) << log;
  const std::string latest = run_dir + "/checkpoints/latest_checkpointed_iteration.txt";
  ASSERT_TRUE(fs::exists(latest)) << log;
  const int64_t saved = std::stoll(slurp(latest));
  EXPECT_EQ(static_cast<int64_t>(lines_in(run_dir + "/metrics.jsonl")), saved);
  EXPECT_TRUE(fs::exists(run_dir + "/config.yaml"));
  EXPECT_TRUE(fs::exists(run_dir + "/train.log"));
  // Resume two more steps from the saved state with the effective config.
  EXPECT_EQ(run({"train", "--config", run_dir + "/config.yaml", "--output", dir.file("run2"), "--set",
                 "checkpoint.load_path=" + run_dir + "/checkpoints", "--set",
                 "training.steps=" + std::to_string(saved + 2)},
                dir.file("log2")),
            0)
      << slurp(dir.file("log2"));
  EXPECT_NE(slurp(dir.file("log2")).find("resumed from"), std::string::npos);
  EXPECT_EQ(lines_in(dir.file("run2") + "/metrics.jsonl"), 2u);
}

TEST(TrainCli, BadCommandLinesAndConfigsExitWithAMessage) {
  lt::TempDir dir;
  EXPECT_EQ(run({"train"}, dir.file("a")), 2);
  EXPECT_NE(slurp(dir.file("a")).find("--config FILE is required"), std::string::npos);
  EXPECT_EQ(run({"train", "--config", dir.file("missing.yaml")}, dir.file("b")), 2);
  EXPECT_NE(slurp(dir.file("b")).find("configuration file not found"), std::string::npos) << slurp(dir.file("b"));
  EXPECT_EQ(run({"train", "--confg", "x"}, dir.file("c")), 2);
  EXPECT_NE(slurp(dir.file("c")).find("unknown option '--confg'"), std::string::npos);
  lt::write_file(dir.file("bad.yaml"), "training:\n  stepz: 3\n");
  EXPECT_EQ(run({"train", "--config", dir.file("bad.yaml")}, dir.file("d")), 1);
  EXPECT_NE(slurp(dir.file("d")).find("did you mean 'steps'"), std::string::npos) << slurp(dir.file("d"));
  EXPECT_FALSE(fs::exists(dir.file("runs"))) << "an invalid config must not create a run directory";
  // A data path that does not exist: the message names it.
  lt::write_file(dir.file("nodata.yaml"), lt::tiny_config_yaml(dir.file("nope/tokens"), 3, 2, 2));
  EXPECT_EQ(run({"train", "--config", dir.file("nodata.yaml"), "--output", dir.file("r")}, dir.file("e")), 1);
  EXPECT_NE(slurp(dir.file("e")).find(dir.file("nope/tokens")), std::string::npos) << slurp(dir.file("e"));
}

namespace {

// `loom check-config FILE --set ...`: exit code and what it printed.
std::pair<int, std::string> check_config(const std::string& file, const std::vector<std::string>& sets,
                                         const std::string& log) {
  std::vector<std::string> args = {"check-config", file, "--quiet"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const int code = run(args, log);
  return {code, slurp(log)};
}

}  // namespace

// One validation: every error `loom train` raises from the configuration before its first step,
// `loom check-config` reports too, with the same message (an error, or for what only keeps the
// file from running, a note "loom train cannot run this file"). Each class of the start-up errors
// is here: model values, non-finite floats, sizes whose products overflow, runs the host cannot
// hold, unsupported sections, callback entries. Files named by the configuration (data, checkpoints) are checked
// when train opens them, not by check-config.
TEST(TrainCli, EveryStartUpErrorOfTrainIsReportedByCheckConfig) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  lt::write_file(dir.file("train.yaml"), lt::tiny_config_yaml(data, 3, 2, 2));
  lt::write_file(dir.file("callback.yaml"), lt::tiny_config_yaml(data, 3, 2, 2, "callbacks:\n  - type: NoSuchCallback\n"));
  lt::write_file(dir.file("callback_arg.yaml"),
                 lt::tiny_config_yaml(data, 3, 2, 2, "callbacks:\n  - type: LossCallback\n    log_interval: 0\n"));
  lt::write_file(dir.file("lora.yaml"),
                 lt::tiny_config_yaml(data, 3, 2, 2, "lora_config:\n  target_modules: '.*linear_q'\n"));
  struct Case {
    std::vector<std::string> sets;
    std::string message;  // in train's error and check-config's report
    std::string file = "train.yaml";
    std::vector<std::pair<std::string, std::string>> env = {};  // set for both commands
  };
  const std::vector<Case> cases = {
      {{"model.hidden_size=66"}, "model.hidden_size = 66 is not a multiple of model.num_attention_heads = 4"},
      {{"model.num_key_value_heads=3"}, "is not a multiple of model.num_key_value_heads = 3"},
      {{"model.rope_theta=0.5"}, "model.rope_theta = 0.5 must be greater than 1"},
      {{"model.rope_theta=.nan"}, "model.rope_theta = nan is not a finite number"},
      {{"lr_scheduler.learning_rate=.inf"}, "lr_scheduler.learning_rate: is .inf, which is not a finite number"},
      {{"optimizer.weight_decay=.inf"}, "optimizer.weight_decay: is .inf, which is not a finite number"},
      {{"training.max_norm=-.inf"}, "training.max_norm: is -.inf, which is not a finite number"},
      {{"model.hidden_size=4611686018427387904"}, "overflows 64 bits"},
      {{"model.vocab_size=4611686018427387904"}, "vocab_size × hidden_size = 4611686018427387904 × 32 overflows"},
      {{"model.num_hidden_layers=100000000000"}, "is more layers than Loom builds"},
      {{"train_dataset.dataloader.config.seq_length=4611686018427387904"}, "local_batch_size × seq_length"},
      {{"model.vocab_size=1000000000000"}, "the run needs at least", "train.yaml", {{"LOOM_MEMORY_LIMIT", "64G"}}},
      {{"train_dataset.dataloader.config.seq_length=1000000000000"}, "lower the sequence length", "train.yaml", {{"LOOM_MEMORY_LIMIT", "64G"}}},
      {{"model.num_hidden_layers=1000000"}, "the run needs at least", "train.yaml", {{"LOOM_MEMORY_LIMIT", "64G"}}},
      {{}, "LoRA fine-tuning is not supported by Loom yet", "lora.yaml"},
      {{}, "callbacks[0].type: unknown callback type 'NoSuchCallback'; registered callbacks are: LossCallback",
       "callback.yaml"},
      {{}, "log_interval", "callback_arg.yaml"},
      {{"training.global_batch_size=1"}, "exceeds global_batch_size"},
      {{}, "LOOM_MAX_CPU_ISA=avx2 is not a CPU matrix path: use amx_bf16, avx512_bf16 or fp32", "train.yaml",
       {{"LOOM_MAX_CPU_ISA", "avx2"}}},
  };
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.sets.empty() ? c.file : c.sets.front());
    for (const auto& [name, value] : c.env) ::setenv(name.c_str(), value.c_str(), 1);
    const std::string run_dir = dir.file("run" + std::to_string(i));
    std::vector<std::string> args = {"train", "--config", dir.file(c.file), "--output", run_dir};
    for (const auto& s : c.sets) args.insert(args.end(), {"--set", s});
    const std::string train_log = dir.file("train" + std::to_string(i) + ".log");
    EXPECT_EQ(run(args, train_log), 1);
    const std::string train_out = slurp(train_log);
    EXPECT_NE(train_out.find(c.message), std::string::npos) << train_out;
    EXPECT_FALSE(fs::exists(run_dir + "/metrics.jsonl")) << "no step may run";
    EXPECT_FALSE(fs::exists(run_dir + "/checkpoints")) << "nothing may be saved";
    const auto [code, report] = check_config(dir.file(c.file), c.sets, dir.file("check" + std::to_string(i)));
    EXPECT_NE(report.find(c.message), std::string::npos) << report;
    if (code == 0) EXPECT_NE(report.find("note: loom train cannot run this file"), std::string::npos) << report;
    else EXPECT_EQ(code, 1) << report;
    for (const auto& [name, value] : c.env) ::unsetenv(name.c_str());
    ++i;
  }
}

// `loom cpu` names the matrix path the bench scripts print next to their figures and the MFU
// peaks; a bad LOOM_MAX_CPU_ISA is an error naming it, extra arguments a usage error.
TEST(TrainCli, CpuPrintsTheMatrixPath) {
  lt::TempDir dir;
  EXPECT_EQ(run({"cpu"}, dir.file("a")), 0);
  const std::string out = slurp(dir.file("a"));
  EXPECT_NE(out.find("cpu matrix path: "), std::string::npos) << out;
  EXPECT_TRUE(out.find("amx_bf16") != std::string::npos || out.find("avx512_bf16") != std::string::npos ||
              out.find("fp32") != std::string::npos) << out;
  // ... and the MFU peaks of fp32 and bf16 compute, each with its derivation.
  EXPECT_NE(out.find("mfu peak (float32 compute): fp32 FMA: "), std::string::npos) << out;
  EXPECT_NE(out.find("mfu peak (bfloat16 compute): "), std::string::npos) << out;
  EXPECT_NE(out.find("FLOP/cycle"), std::string::npos) << out;
  ::setenv("LOOM_MAX_CPU_ISA", "avx2", 1);
  EXPECT_EQ(run({"cpu"}, dir.file("b")), 1);
  ::unsetenv("LOOM_MAX_CPU_ISA");
  EXPECT_NE(slurp(dir.file("b")).find("LOOM_MAX_CPU_ISA=avx2 is not a CPU matrix path"), std::string::npos);
  EXPECT_EQ(run({"cpu", "extra"}, dir.file("c")), 2);
}

// --threads above the cores warns and clamps (MFU is computed from the threads used).
TEST(TrainCli, ThreadsAboveTheCoresAreClamped) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  lt::write_file(dir.file("train.yaml"), lt::tiny_config_yaml(data, 1, 2, 2));
  EXPECT_EQ(run({"train", "--config", dir.file("train.yaml"), "--output", dir.file("run"), "--threads", "100000"},
                dir.file("log")),
            0)
      << slurp(dir.file("log"));
  const std::string log = slurp(dir.file("log"));
  const std::string cores = std::to_string(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_NE(log.find("--threads 100000 is more than the " + cores + " cores available; using " + cores),
            std::string::npos) << log;
}

// A FIFO, a directory or a device given as the configuration, or in place of a data or
// checkpoint file, is refused saying what it is, never opened (a FIFO would block forever).
TEST(TrainCli, OnlyRegularFilesAreOpened) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  ASSERT_EQ(::mkfifo(dir.file("fifo.yaml").c_str(), 0600), 0);
  EXPECT_EQ(run({"train", "--config", dir.file("fifo.yaml")}, dir.file("a")), 2);
  EXPECT_NE(slurp(dir.file("a")).find("fifo.yaml: is a FIFO (named pipe), not a regular file"), std::string::npos)
      << slurp(dir.file("a"));
  EXPECT_EQ(run({"check-config", dir.file("fifo.yaml")}, dir.file("b")), 2);
  EXPECT_NE(slurp(dir.file("b")).find("is a FIFO (named pipe), not a regular file"), std::string::npos);
  EXPECT_EQ(run({"check-config", "/dev/null"}, dir.file("c")), 2);
  EXPECT_NE(slurp(dir.file("c")).find("/dev/null: is a character device, not a regular file"), std::string::npos)
      << slurp(dir.file("c"));
  // The .bin of a dataset linked to a device.
  const std::string prefix = dir.file("dev_tokens");
  fs::copy_file(data + ".idx", prefix + ".idx");
  fs::create_symlink("/dev/zero", prefix + ".bin");
  lt::write_file(dir.file("dev.yaml"), lt::tiny_config_yaml(prefix, 3, 2, 2));
  EXPECT_EQ(run({"train", "--config", dir.file("dev.yaml"), "--output", dir.file("r")}, dir.file("d")), 1);
  EXPECT_NE(slurp(dir.file("d")).find(prefix + ".bin is a character device, not a regular file"), std::string::npos)
      << slurp(dir.file("d"));
}

namespace {

// Whether every floating tensor of a safetensors file holds only finite values.
bool all_f32_finite(const std::string& path) {
  const auto f = loom::models::SafetensorsFile::open(path);
  for (const auto& e : f.entries()) {
    const loom::Tensor t = f.tensor(e.name, true);
    if (!loom::is_floating(t.dtype())) continue;
    for (float x : t.to_float_vector())
      if (!std::isfinite(x)) return false;
  }
  return true;
}

// Overwrites the first value of the first F32 tensor of a safetensors file with a NaN.
void poison_first_tensor(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const auto j = nlohmann::json::parse(header);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__" || it.value()["dtype"] != "F32") continue;
    const uint64_t begin = it.value()["data_offsets"][0].get<uint64_t>();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    f.seekp(static_cast<std::streamoff>(8 + header_len + begin));
    f.write(reinterpret_cast<const char*>(&nan), sizeof(nan));
    return;
  }
  FAIL() << "no F32 tensor in " << path;
}

}  // namespace

// Non-finite state is never trained on, saved or resumed: an update that would make a parameter
// non-finite is skipped (nothing written, so what is saved stays finite); a checkpoint holding
// NaN is refused on resume; a run whose every update was skipped exits 1 with a summary; a
// resume at training.steps writes nothing.
TEST(TrainCli, NonFiniteStateIsNeverSavedOrResumed) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  lt::write_file(dir.file("train.yaml"), lt::tiny_config_yaml(data, 2, 2, 2));
  // 1e39 is a finite double but not a finite fp32: every update would write inf, so every one is
  // skipped, the run says so and exits 1, and the checkpoint it saved holds only finite values.
  EXPECT_EQ(run({"train", "--config", dir.file("train.yaml"), "--output", dir.file("big"), "--set",
                 "lr_scheduler.learning_rate=1.e+39"},
                dir.file("a")),
            1);
  EXPECT_NE(slurp(dir.file("a")).find("step 1: the update would make '"), std::string::npos) << slurp(dir.file("a"));
  EXPECT_NE(slurp(dir.file("a")).find("inf or nan; the update is skipped (1 in a row)"), std::string::npos);
  EXPECT_NE(slurp(dir.file("a")).find("all 2 updates of this run were skipped"), std::string::npos);
  const std::string big_model =
      dir.file("big") + "/checkpoints/iteration_00000002/checkpoint-model-0000000-0000001.safetensors";
  ASSERT_TRUE(fs::exists(big_model));
  EXPECT_TRUE(all_f32_finite(big_model));

  // Every update skipped (a norm threshold no norm is under): exit 1 and say so.
  EXPECT_EQ(run({"train", "--config", dir.file("train.yaml"), "--output", dir.file("skip"), "--set",
                 "monitor.health_checkpoint.global_norm_skip_threshold=1.e-30", "--set",
                 "monitor.health_checkpoint.global_norm_skip_time=10"},
                dir.file("b")),
            1);
  EXPECT_NE(slurp(dir.file("b")).find("all 2 updates of this run were skipped"), std::string::npos)
      << slurp(dir.file("b"));

  // A good run, then a resume at its last step: refused, nothing rewritten.
  ASSERT_EQ(run({"train", "--config", dir.file("train.yaml"), "--output", dir.file("good")}, dir.file("c")), 0)
      << slurp(dir.file("c"));
  const std::string iteration = dir.file("good") + "/checkpoints/iteration_00000002";
  const std::string model_file = iteration + "/checkpoint-model-0000000-0000001.safetensors";
  ASSERT_TRUE(fs::exists(model_file));
  const auto written = fs::last_write_time(model_file);
  EXPECT_EQ(run({"train", "--config", dir.file("train.yaml"), "--output", dir.file("again"), "--set",
                 "checkpoint.load_path=" + dir.file("good") + "/checkpoints", "--set",
                 "checkpoint.save_path=" + dir.file("good") + "/checkpoints"},
                dir.file("d")),
            1);
  EXPECT_NE(slurp(dir.file("d")).find("resumes at step 2, at or beyond training.steps = 2"), std::string::npos)
      << slurp(dir.file("d"));
  EXPECT_EQ(fs::last_write_time(model_file), written);

  // A dtype label that lies (F32 data labelled I32: the same byte size, so the header is
  // consistent) is refused against the model.
  const std::string lying = dir.file("lying");
  fs::copy(dir.file("good") + "/checkpoints", lying, fs::copy_options::recursive);
  {
    const std::string file = lying + "/iteration_00000002/checkpoint-model-0000000-0000001.safetensors";
    std::string bytes = slurp(file);
    const auto at = bytes.find("\"F32\"");
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at, 5, "\"I32\"");
    std::ofstream(file, std::ios::binary) << bytes;
  }
  EXPECT_EQ(run({"train", "--config", dir.file("train.yaml"), "--output", dir.file("lie"), "--set",
                 "checkpoint.load_path=" + lying, "--set", "training.steps=4"},
                dir.file("f")),
            1);
  EXPECT_NE(slurp(dir.file("f")).find("is stored as int32 but the model holds it as float32"), std::string::npos)
      << slurp(dir.file("f"));

  // The checkpoint's weights poisoned: the resume is refused, naming the checkpoint.
  poison_first_tensor(model_file);
  EXPECT_EQ(run({"train", "--config", dir.file("train.yaml"), "--output", dir.file("nan"), "--set",
                 "checkpoint.load_path=" + dir.file("good") + "/checkpoints", "--set", "training.steps=4"},
                dir.file("e")),
            1);
  EXPECT_NE(slurp(dir.file("e")).find("checkpoint " + iteration + " cannot be resumed: '"), std::string::npos)
      << slurp(dir.file("e"));
  EXPECT_EQ(lines_in(dir.file("nan") + "/metrics.jsonl"), 0u) << "no step may run";
}

// A full disk under train.log or metrics.jsonl (/dev/full refuses every write) reaches stderr and
// stops the run with a non-zero exit, instead of leaving a log cut short.
TEST(TrainCli, WriteErrorsOnTheLogsStopTheRun) {
  lt::TempDir dir;
  auto data = lt::write_pattern_dataset(dir);
  lt::write_file(dir.file("train.yaml"), lt::tiny_config_yaml(data, 3, 2, 2));
  for (const char* file : {"train.log", "metrics.jsonl"}) {
    SCOPED_TRACE(file);
    const std::string run_dir = dir.file(std::string("full_") + file);
    fs::create_directories(run_dir);
    fs::create_symlink("/dev/full", run_dir + "/" + file);
    const std::string log = dir.file(std::string("log_") + file);
    EXPECT_EQ(run({"train", "--config", dir.file("train.yaml"), "--output", run_dir}, log), 1) << slurp(log);
    EXPECT_NE(slurp(log).find("cannot write"), std::string::npos) << slurp(log);
    EXPECT_NE(slurp(log).find(run_dir + "/" + file), std::string::npos) << slurp(log);
  }
}

// A negative token id in the data is reported with the file, the sequence and the sample.
TEST(TrainCli, NegativeTokenIdsNameTheFileAndSequence) {
  lt::TempDir dir;
  const std::string prefix = dir.file("signed");
  {
    loom::data::IndexedDatasetBuilder b(prefix + ".bin", loom::data::TokenDType::i32);
    for (int d = 0; d < 64; ++d) {
      std::vector<int64_t> tokens(130, 5);
      if (d == 0) tokens[3] = -5;
      const std::vector<int32_t> lengths{130};
      b.add_document(tokens, lengths);
    }
    b.finalize(prefix + ".idx");
  }
  lt::write_file(dir.file("train.yaml"), lt::tiny_config_yaml(prefix, 40, 2, 2));
  EXPECT_EQ(run({"train", "--config", dir.file("train.yaml"), "--output", dir.file("run")}, dir.file("log")), 1);
  const std::string log = slurp(dir.file("log"));
  EXPECT_NE(log.find(prefix + ".bin: token 3 of sequence 0"), std::string::npos) << log;
  EXPECT_NE(log.find("is -5; token ids must be non-negative"), std::string::npos) << log;
}
