#include "loom/plan/device_profile.h"

#include <gtest/gtest.h>

#include <fstream>

#include "loom/core/error.h"
#include "loom/runtime/cpu/cpu_backend.h"
#include "testing/temp_dir.h"

namespace loom::plan {
namespace {

TEST(DeviceProfile, BuiltInHopperProfilesCarryTheirDatasheetNumbers) {
  const DeviceProfile h100 = device_profile("h100"), h200 = device_profile("h200");
  EXPECT_EQ(h100.flops_for(DType::bf16), 989e12);
  EXPECT_EQ(h100.memory_bytes, int64_t{80} * 1000 * 1000 * 1000);
  EXPECT_EQ(h200.memory_bytes, int64_t{141} * 1000 * 1000 * 1000);
  EXPECT_GT(h200.memory_bandwidth, h100.memory_bandwidth);
  EXPECT_EQ(h100.devices_per_node, 8);
}

TEST(DeviceProfile, CpuProfileComesFromThisMachine) {
  const DeviceProfile cpu = device_profile("cpu");
  EXPECT_GE(cpu.devices_per_node, 1);
  EXPECT_GT(cpu.flops_for(DType::f32), 0);
  EXPECT_GE(cpu.flops_for(DType::bf16), cpu.flops_for(DType::f32));
  // The peak the trainer's MFU uses for one core, not a second estimate.
  EXPECT_EQ(cpu.flops_for(DType::f32), runtime::CpuBackend().peak_flops(DType::f32, 1).gflops * 1e9);
  EXPECT_EQ(cpu.flops_for(DType::bf16), runtime::CpuBackend().peak_flops(DType::bf16, 1).gflops * 1e9);
}

TEST(DeviceProfile, FileProfileReadsEveryFieldAndNamesAMissingOne) {
  loom::testing::TempDir dir;
  const std::string path = dir.file("h800.yaml");
  std::ofstream(path) << "name: h800\ndevices_per_node: 8\nmemory_gib: 80\n"
                         "matrix_flops: {float32: 6.7e13, bfloat16: 9.89e14}\nmemory_bandwidth: 3.35e12\n"
                         "intra_node_bandwidth: 2.0e11\ninter_node_bandwidth: 5.0e10\n";
  const DeviceProfile d = device_profile(path);
  EXPECT_EQ(d.name, "h800");
  EXPECT_EQ(d.memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(d.intra_node_bandwidth, 2.0e11);
  EXPECT_THROW(d.flops_for(DType::f16), ConfigError);

  std::ofstream(path) << "devices_per_node: 8\nmemory_bytes: 1000\nmatrix_flops: {float32: 1}\n"
                         "memory_bandwidth: 1\nintra_node_bandwidth: 1\n";
  try {
    device_profile(path);
    FAIL() << "a profile without inter_node_bandwidth was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("inter_node_bandwidth"), std::string::npos) << e.what();
  }
  EXPECT_THROW(device_profile(dir.file("missing.yaml")), ConfigError);
}

}  // namespace
}  // namespace loom::plan
