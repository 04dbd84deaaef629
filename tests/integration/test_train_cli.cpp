// `loom train` as a user runs it: the run directory, Ctrl-C (SIGINT) saving and exiting cleanly,
// resuming from that checkpoint, and clear exits for bad command lines. (Issue 7 items 2-3.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../train/trainer_fixture.h"

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
