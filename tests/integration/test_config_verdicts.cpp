// `loom check-config` refuses exactly what `loom train` refuses: every YAML example and fixture of
// the repository (configs/, tests/fixtures/config/ with the spec's examples) goes through both
// programs with the same overrides (one step, no checkpoint, a small dataset of tokens below 32 in
// place of its data path), and the verdicts agree: check-config says the file is valid and
// runnable exactly when a one-step train runs. LOOM_MEMORY_LIMIT makes the start-up memory check
// (a verdict both share) the same on every machine and keeps the runnable models small.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <fstream>

#include "../train/trainer_fixture.h"

namespace fs = std::filesystem;
namespace lt = loom::testing;

namespace {

const std::string kLoom = LOOM_BINARY_DIR "/apps/loom/loom";

// Runs loom with `args`, stdout and stderr to `log`; the exit status.
int run_loom(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (!std::freopen(log.c_str(), "w", stdout)) _exit(126);
    dup2(fileno(stdout), fileno(stderr));
    std::vector<char*> argv{const_cast<char*>(kLoom.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    setenv("LOOM_NUM_THREADS", "1", 1);
    setenv("LOOM_MEMORY_LIMIT", "1G", 1);
    // As a user runs the repository's files: relative paths in them start at its root.
    if (chdir(LOOM_SOURCE_DIR) != 0) _exit(125);
    execv(kLoom.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> repository_yamls() {
  std::vector<std::string> files;
  for (const fs::path root : {fs::path(LOOM_SOURCE_DIR) / "configs", fs::path(LOOM_FIXTURES_DIR) / "config"})
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() && (e.path().extension() == ".yaml" || e.path().extension() == ".yml"))
        files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST(ConfigVerdicts, CheckConfigAndATrainStepAgreeOnEveryRepositoryYaml) {
  lt::TempDir dir;
  // 512 documents of 520 tokens below 32: enough samples for every sequence length and batch of
  // the files, valid ids for every vocabulary.
  const std::string data = lt::write_pattern_dataset(dir, 32, 512, 520);
  const std::vector<std::string> sets = {
      "--set", "training.steps=1", "--set", "checkpoint.enable_save=False",
      "--set", "train_dataset.dataloader.config.data_path=['" + data + "']",
      "--set", "train_dataset.dataloader.config.split='1,0,0'"};
  const std::vector<std::string> files = repository_yamls();
  ASSERT_GE(files.size(), 65u);  // 8 in configs/, 56 spec examples, the reference-defaults fixture
  std::vector<std::string> runnable;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& file = files[i];
    std::vector<std::string> check = {"check-config", file, "--quiet"}, train = {"train", "--config", file, "--output",
                                                                                  dir.file("run" + std::to_string(i))};
    check.insert(check.end(), sets.begin(), sets.end());
    train.insert(train.end(), sets.begin(), sets.end());
    const int check_rc = run_loom(check, dir.file("check.log"));
    const std::string check_log = slurp(dir.file("check.log"));
    const bool check_runs = check_rc == 0 && check_log.find("loom train cannot run this file") == std::string::npos;
    const int train_rc = run_loom(train, dir.file("train.log"));
    EXPECT_EQ(check_runs, train_rc == 0) << file << "\n--- check-config (exit " << check_rc << ")\n" << check_log
                                         << "--- train (exit " << train_rc << ")\n" << slurp(dir.file("train.log"));
    if (train_rc == 0) runnable.push_back(fs::path(file).filename().string());
  }
  // Small configurations do train: the agreement is not only on refusals (the demo also trains
  // where scripts/get-demo-data.sh fetched its data).
  for (const char* name : {"size_a.yaml", "reference_defaults.yaml"})
    EXPECT_NE(std::find(runnable.begin(), runnable.end(), name), runnable.end()) << name;
  std::string names;
  for (const std::string& name : runnable) names += " " + name;
  std::printf("trained one step:%s\n", names.c_str());
}
