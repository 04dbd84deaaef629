// loom train --config FILE [--set key=value ...] [--output DIR] [--threads N] [--device D]
// Under mpirun (or `loom launch`) every process runs this: rank and world size come from MPI,
// rank 0 picks the run directory and writes the logs, and a rank that fails ends every rank.
// The run is built in three layers: the backend (the device, its world of processes), the model
// runtime (the parallel model on it) and the trainer (the loop around it).
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <thread>

#include "args.h"
#include "command.h"
#include "process_threads.h"
#include "loom/config/config.h"
#include "loom/core/log.h"
#include "loom/core/parallel.h"
#include "loom/dist/runtime.h"
#include "loom/runtime/backend.h"
#include "loom/runtime/model_runtime.h"
#include "loom/train/metrics.h"
#include "loom/train/trainer.h"

namespace {

const char* kUsage =
    "usage: loom train --config FILE [--set key=value ...] [--output DIR] [--threads N] [--device D]\n"
    "                  [--rank-report[=STEP]]\n"
    "  --config FILE    the training YAML (see docs/configuration.md)\n"
    "  --set k=v        override a field before validation, e.g. --set training.steps=20\n"
    "  --device D       the device to compute on (context.device_target): cpu\n"
    "  --output DIR     run directory (config.yaml, train.log, metrics.jsonl, checkpoints);\n"
    "                   default runs/<config name>-<date>-<time>\n"
    "  --threads N      compute threads (default: LOOM_NUM_THREADS, else every core)\n"
    "  --rank-report[=STEP]  write what each rank held and sent during step STEP (default: the\n"
    "                   last) to DIR/rank_report/rank-<r>.json, as `loom plan --json` names it\n";

std::string default_run_dir(const std::string& config_path) {
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return (std::filesystem::path("runs") / (std::filesystem::path(config_path).stem().string() + "-" + stamp)).string();
}

int train_with(const std::vector<std::string>& args, loom::dist::Runtime& rt);

int run_train(const std::vector<std::string>& args) {
  loom::dist::Runtime& rt = loom::dist::Runtime::init();
  if (rt.world_size() == 1) return train_with(args, rt);
  // Several ranks: an error on one must end all of them with its message, never leave the others
  // waiting in a collective.
  return loom::dist::run_guarded([&] { return train_with(args, rt); });
}

int train_with(const std::vector<std::string>& args, loom::dist::Runtime& rt) {
  std::string config_path, output;
  std::vector<std::string> overrides;
  int threads = 0;
  int64_t rank_report_step = -1;
  loom::app::ArgCursor cursor(args, kUsage);
  auto value = [&] { return cursor.value(); };
  while (!cursor.done()) {
    const std::string a = cursor.next();
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else if (a == "--config") {
      config_path = value();
    } else if (a == "--set") {
      overrides.push_back(value());
    } else if (a == "--output") {
      output = value();
    } else if (a == "--device") {
      overrides.push_back("context.device_target=" + value());
    } else if (a == "--rank-report") {
      rank_report_step = 0;
    } else if (a.rfind("--rank-report=", 0) == 0) {
      const std::string v = a.substr(std::string("--rank-report=").size());
      int step = 0;
      if (!loom::app::parse_positive(v, &step)) {
        std::fprintf(stderr, "error: --rank-report=%s: STEP must be a positive step number\n", v.c_str());
        return 2;
      }
      rank_report_step = step;
    } else if (a == "--threads") {
      const std::string v = value();
      if (!loom::app::parse_positive(v, &threads)) {
        std::fprintf(stderr, "error: --threads '%s' is not a positive integer\n", v.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "error: unknown option '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "error: --config FILE is required\n%s", kUsage);
    return 2;
  }
  loom::app::use_process_threads(threads, rt.world_size());

  loom::config::LoadOptions load;
  load.overrides = overrides;
  load.world_size = rt.world_size();
  // Loaded and resolved for this world once; the trainer takes the resolution as it is.
  loom::config::LoadedConfig loaded;
  try {
    loaded = loom::config::load_config(config_path, load);
  } catch (const loom::ConfigReadError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  // A valid file may still lack what a run needs (a model size, the data path): say so before a
  // run directory is made.
  loaded.resolved->require_runnable();
  if (rank_report_step > loaded.config.training.steps) {
    std::fprintf(stderr, "error: --rank-report=%lld is beyond training.steps = %lld: no step would be reported; pass a "
                 "step of this run or --rank-report for the last\n", static_cast<long long>(rank_report_step),
                 static_cast<long long>(loaded.config.training.steps));
    return 2;
  }

  // Every rank writes its checkpoint shards under the run directory: rank 0's choice for all.
  std::string run_dir = output.empty() ? default_run_dir(config_path) : output;
  if (rt.world_size() > 1) run_dir = loom::dist::broadcast_string(*rt.world(), run_dir, 0);
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  LOOM_CHECK(!ec, IOError, "cannot create the run directory '", run_dir, "': ", ec.message(),
             " (pass --output with a writable path)");
  if (rt.rank() == 0) {
    loom::log::set_file((std::filesystem::path(run_dir) / "train.log").string());
    loom::config::write_effective_config(loaded.config, (std::filesystem::path(run_dir) / "config.yaml").string());
  }
  loom::log::info("run directory: ", run_dir, rt.world_size() > 1 ? " (" + std::to_string(rt.world_size()) + " processes)" : "");

  std::unique_ptr<loom::runtime::Backend> backend = loom::runtime::make_backend(loaded.resolved->device, rt.world());
  loom::runtime::ModelRuntime model(loaded.config, *loaded.resolved, *backend);
  loom::train::TrainerOptions options;
  options.run_dir = run_dir;
  options.rank_report_step = rank_report_step;
  loom::train::Trainer trainer(std::move(loaded), model, options);
  loom::train::TrainSummary s = trainer.train();
  char line[512];
  std::snprintf(line, sizeof(line),
                "done: steps %lld→%lld, loss %.4f → %.4f, %.0f tokens/s (MFU %.1f%%), run directory %s",
                static_cast<long long>(s.first_step), static_cast<long long>(s.last_step), s.first_loss, s.last_loss,
                s.mean_tokens_per_s, s.mean_mfu * 100.0, s.run_dir.c_str());
  loom::log::info(line);
  // Every update skipped: nothing was learnt, whatever the exit of the loop says.
  if (s.steps_run > 0 && s.skipped_updates == s.steps_run) {
    loom::log::error("all ", s.steps_run, " updates of this run were skipped (non-finite loss or grad norm, or above "
                     "monitor.health_checkpoint.global_norm_skip_threshold): the weights did not change. Check the "
                     "data and lr_scheduler.learning_rate, or resume from an earlier checkpoint");
    return 1;
  }
  if (s.interrupted) {
    const auto& ck = trainer.checkpoints().options();
    loom::log::info("stopped early; to continue: loom train --config ", run_dir, "/config.yaml --set checkpoint.load_path=",
                    ck.save_path);
  }
  return 0;
}

}  // namespace

LOOM_COMMAND("train", "train a model from a YAML configuration", run_train);
