// `loom check-config FILE [--world-size N] [--set k=v]`: exit 0 valid, 1 invalid, 2 unreadable.
// The command's logic is tested in-process (run_check_config); the built `loom` program is run
// too, for the exit codes a shell sees.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "config_test_util.h"
#include "loom/config/check_config.h"
#include "testing/temp_dir.h"

using namespace loom;
using namespace loom::config;
using namespace loom::config::testing;

namespace {

std::string fixture(const std::string& name) { return std::string(LOOM_FIXTURES_DIR) + "/config/spec/" + name + ".yaml"; }

struct CommandResult {
  int code = -1;
  std::string out;
  std::string err;
};

CommandResult check(std::vector<std::string> args) {
  std::ostringstream out, err;
  CommandResult r;
  r.code = run_check_config(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// Runs the built program; returns its exit status and stdout+stderr.
CommandResult run_binary(const std::string& args) {
  const std::string binary = std::string(LOOM_BINARY_DIR) + "/apps/loom/loom";
  CommandResult r;
  if (!std::filesystem::exists(binary)) return r;
  FILE* pipe = popen((binary + " check-config " + args + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace

TEST(CheckConfig, ValidFilePrintsConfigAndLayout) {
  CommandResult r = check({fixture("parallel_training_4"), "--world-size", "8"});
  EXPECT_EQ(r.code, kCheckConfigValid) << r.err;
  for (const char* text : {"parallelism:\n  data_parallel_shard: -1\n", "---\n# Parallel layout on 8 rank(s)\n",
                           "parallel_layout:\n  world_size: 8\n  dp_replicate: 1\n  dp_shard: 4\n  cp: 1\n  tp: 2\n"
                           "  pp: 1\n  ep: 1\n  efsdp: 8\n  fsdp: 4\n  data_parallel: 4\n  sequence_parallel: true\n",
                           "  num_accumulation_steps: 1\n", "  dense_mesh: {pp: 1, dp_replicate: 1, fsdp: 4, tp: 2}\n",
                           "  sparse_mesh: {pp: 1, dp_replicate: 1, efsdp: 8, ep: 1}\n"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  EXPECT_NE(r.err.find("valid for world size 8"), std::string::npos);
}

TEST(CheckConfig, VirtualPipelineStagesWithTheirLayers) {
  CommandResult r = check({fixture("parallel_training_11"), "--world-size=8"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("  pipeline:\n    schedule: interleaved_1f1b\n    interleave_num: 2\n    num_virtual_stages: 4\n"
                       "    placement: explicit\n    virtual_stages:\n"
                       "      - {stage: 0, pp_rank: 0, chunk: 0, layers: \"0-1\", num_layers: 2}\n"
                       "      - {stage: 1, pp_rank: 1, chunk: 0, layers: \"2-3\", num_layers: 2}\n"
                       "      - {stage: 2, pp_rank: 0, chunk: 1, layers: \"4-8\", num_layers: 5}\n"
                       "      - {stage: 3, pp_rank: 1, chunk: 1, layers: \"9\", num_layers: 1}\n"),
            std::string::npos)
      << r.out;
}

TEST(CheckConfig, DefaultWorldSizeIsOne) {
  CommandResult r = check({fixture("configuration_1")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("  world_size: 1\n"), std::string::npos);
  EXPECT_NE(r.out.find("  num_accumulation_steps: 8\n"), std::string::npos);
}

TEST(CheckConfig, InvalidFileExitsOneWithEveryError) {
  loom::testing::TempDir dir;
  const std::string path = dir.file("bad.yaml");
  loom::testing::write_file(path, with_defaults("training:\n  global_batch_sise: 8\n  steps: x\n"));
  CommandResult r = check({path});
  EXPECT_EQ(r.code, kCheckConfigInvalid);
  EXPECT_NE(r.err.find("error: " + path + ":2:3: training.global_batch_sise: Unknown configuration keys for "
                                          "TrainingConfig: ['global_batch_sise']; did you mean 'global_batch_size'?\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("error: " + path + ":3:10: training.steps: expected int, got str 'x'\n"), std::string::npos);
  EXPECT_NE(r.err.find("(2 configuration errors in " + path + ")\n"), std::string::npos);
  EXPECT_TRUE(r.out.empty());
}

TEST(CheckConfig, WrongWorldSizeIsInvalid) {
  CommandResult r = check({fixture("parallel_training_10"), "--world-size", "4"});
  EXPECT_EQ(r.code, kCheckConfigInvalid);
  EXPECT_NE(r.err.find("must be less than or equal to world_size(4)"), std::string::npos);
}

TEST(CheckConfig, UnreadableFilesExitTwo) {
  loom::testing::TempDir dir;
  EXPECT_EQ(check({dir.file("missing.yaml")}).code, kCheckConfigUnreadable);
  loom::testing::write_file(dir.file("bin.yaml"), std::string("\x7f" "ELF\0\0\0", 7));
  EXPECT_EQ(check({dir.file("bin.yaml")}).code, kCheckConfigUnreadable);
  loom::testing::write_file(dir.file("syntax.yaml"), "training: [1, 2\n");
  CommandResult r = check({dir.file("syntax.yaml")});
  EXPECT_EQ(r.code, kCheckConfigUnreadable);
  EXPECT_NE(r.err.find("not valid YAML"), std::string::npos);
  loom::testing::write_file(dir.file("deep.yaml"), "a: " + std::string(1000, '[') + std::string(1000, ']') + "\n");
  EXPECT_EQ(check({dir.file("deep.yaml")}).code, kCheckConfigUnreadable);
}

TEST(CheckConfig, OverridesAndQuiet) {
  CommandResult r = check({fixture("configuration_1"), "--set", "training.steps=20", "--set=optimizer.betas=[0.9,0.99]"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("training:\n  steps: 20\n"), std::string::npos);
  EXPECT_NE(r.out.find("  betas: [0.9, 0.99]\n"), std::string::npos);
  CommandResult bad = check({fixture("configuration_1"), "--set", "training.stpes=20"});
  EXPECT_EQ(bad.code, kCheckConfigInvalid);
  EXPECT_NE(bad.err.find("error: --set training.stpes=20: training.stpes: Unknown configuration keys for TrainingConfig"),
            std::string::npos);
  CommandResult quiet = check({fixture("configuration_1"), "--quiet"});
  EXPECT_EQ(quiet.code, 0);
  EXPECT_TRUE(quiet.out.empty());
}

TEST(CheckConfig, WarningsAndNotesGoToStderr) {
  loom::testing::TempDir dir;
  loom::testing::write_file(dir.file("w.yaml"), with_defaults("training:\n  global_batch_size: 10\nmodel:\n  model_type: x\n"
                                                              "recompute:\n  mode: full\n  full_recompute_layer: ['0']\n"));
  CommandResult r = check({dir.file("w.yaml"), "--world-size", "4"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: " + dir.file("w.yaml") + ":2:22: training.global_batch_size: 10 is not a multiple"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("note: recompute/swap layer ranges not checked against the model depth"), std::string::npos);
}

TEST(CheckConfig, BadArgumentsExitTwo) {
  EXPECT_EQ(check({}).code, kCheckConfigUnreadable);
  EXPECT_EQ(check({"a.yaml", "b.yaml"}).code, kCheckConfigUnreadable);
  EXPECT_EQ(check({fixture("configuration_1"), "--world-size", "0"}).code, kCheckConfigUnreadable);
  EXPECT_EQ(check({fixture("configuration_1"), "--world-size", "eight"}).code, kCheckConfigUnreadable);
  EXPECT_EQ(check({fixture("configuration_1"), "--world-size"}).code, kCheckConfigUnreadable);
  CommandResult r = check({fixture("configuration_1"), "--frobnicate"});
  EXPECT_EQ(r.code, kCheckConfigUnreadable);
  EXPECT_NE(r.err.find("unknown option '--frobnicate'"), std::string::npos);
  CommandResult help = check({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("exit status: 0 valid, 1 invalid, 2 unreadable"), std::string::npos);
}

// The built program, as a shell sees it (tests/config/CMakeLists.txt builds it first).
TEST(CheckConfigProgram, ExitCodes) {
  const std::string binary = std::string(LOOM_BINARY_DIR) + "/apps/loom/loom";
  ASSERT_TRUE(std::filesystem::exists(binary)) << binary << " is not built";
  loom::testing::TempDir dir;
  loom::testing::write_file(dir.file("invalid.yaml"), with_defaults("training:\n  stepz: 3\n"));
  loom::testing::write_file(dir.file("garbage.yaml"), std::string("\x01\x02\x03\xff\xfe", 5));
  CommandResult ok = run_binary(fixture("parallel_training_2") + " --world-size 8");
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("  dp_shard: 8\n"), std::string::npos);
  CommandResult invalid = run_binary(dir.file("invalid.yaml"));
  EXPECT_EQ(invalid.code, 1) << invalid.out;
  EXPECT_NE(invalid.out.find("did you mean 'steps'?"), std::string::npos);
  EXPECT_EQ(run_binary(dir.file("garbage.yaml")).code, 2);
  EXPECT_EQ(run_binary(dir.file("missing.yaml")).code, 2);
  EXPECT_EQ(run_binary(fixture("configuration_1") + " --set training.steps=20").code, 0);
}
