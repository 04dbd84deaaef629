// context.device_target (and --device, which sets it): the device a run computes on, resolved once
// for check-config and train. Unwritten means the CPU (the reference's default, Ascend, is
// MindSpore's); a device this build has no backend for is a start-up error naming the field.
#include <gtest/gtest.h>

#include <sstream>

#include "config_test_util.h"
#include "testing/temp_dir.h"
#include "loom/config/check_config.h"

namespace loom::config {
namespace {

using testing::errors;
using testing::load;

TEST(DeviceTarget, UnwrittenOrCpuRunsOnTheCpu) {
  EXPECT_EQ(load("", 1).resolved->device, Device::cpu());
  EXPECT_EQ(load("context:\n  mode: 1\n", 1).resolved->device, Device::cpu());
  for (const char* cpu : {"CPU", "cpu", "Cpu"})
    EXPECT_EQ(load(std::string("context:\n  device_target: ") + cpu + "\n", 1).resolved->device, Device::cpu()) << cpu;
}

TEST(DeviceTarget, OtherDevicesAreStartUpErrors) {
  EXPECT_NE(errors("context:\n  device_target: Ascend\n", 1)
                .find("context.device_target: 'Ascend': Loom has no Ascend backend; set context.device_target: CPU"),
            std::string::npos);
  EXPECT_NE(errors("context:\n  device_target: GPU\n", 1).find("'GPU': this build of Loom has no CUDA backend"),
            std::string::npos);
  EXPECT_NE(errors("context:\n  device_target: cuda:1\n", 1).find("has no CUDA backend"), std::string::npos);
  EXPECT_NE(errors("context:\n  device_target: TPU\n", 1).find("unknown device 'TPU'"), std::string::npos);
  // --device is the same field (loom train, check-config and eval turn it into this override).
  EXPECT_NE(errors("", 1, {"context.device_target=gpu"}).find("context.device_target"), std::string::npos);
}

TEST(DeviceTarget, CheckConfigTakesDeviceAndRefusesWhatTrainRefuses) {
  loom::testing::TempDir dir;
  const std::string path = dir.file("c.yaml");
  loom::testing::write_file(path, testing::with_defaults(""));
  auto check = [&](std::vector<std::string> args) {
    std::ostringstream out, err;
    args.insert(args.begin(), path);
    const int code = run_check_config(args, out, err);
    return std::make_pair(code, err.str());
  };
  EXPECT_EQ(check({"--device", "cpu", "--quiet"}).first, kCheckConfigValid);
  const auto [code, err] = check({"--device", "gpu", "--quiet"});
  EXPECT_EQ(code, kCheckConfigInvalid);
  EXPECT_NE(err.find("context.device_target: 'gpu': this build of Loom has no CUDA backend"), std::string::npos) << err;
}

}  // namespace
}  // namespace loom::config
