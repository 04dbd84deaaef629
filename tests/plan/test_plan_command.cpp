#include "loom/plan/plan_command.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

namespace loom::plan {
namespace {

const std::string kDeepSeek = std::string(LOOM_SOURCE_DIR) + "/configs/plan/deepseek_v3_671b.yaml";
const std::string kH800 = std::string(LOOM_SOURCE_DIR) + "/configs/plan/h800.yaml";

int run(const std::vector<std::string>& args, std::string* out = nullptr, std::string* err = nullptr) {
  std::ostringstream o, e;
  const int rc = run_plan(args, o, e);
  if (out) *out = o.str();
  if (err) *err = e.str();
  return rc;
}

TEST(PlanCommand, JsonHasTheSchemaKeysForTheShippedDeepSeekLayout) {
  std::string out, err;
  ASSERT_EQ(run({"--config", kDeepSeek, "--world-size", "2048", "--device", kH800, "--json"}, &out, &err), 0) << err;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["world_size"], 2048);
  EXPECT_EQ(j["layout"]["pp"], 16);
  EXPECT_EQ(j["layout"]["ep"], 64);
  EXPECT_EQ(j["layout"]["efsdp"], 2);
  for (const char* key : {"step_time_s", "mfu", "fits", "device_memory_bytes"}) EXPECT_TRUE(j.contains(key)) << key;
  ASSERT_FALSE(j["roles"].empty());
  int ranks = 0;
  for (const auto& r : j["roles"]) {
    for (const char* key : {"name", "pp_stage", "ep_rank", "ranks", "parameter_bytes", "gradient_bytes",
                            "optimizer_bytes", "activation_peak_bytes", "peak_bytes", "flops_per_step",
                            "bytes_sent_per_step", "step_time_s"})
      EXPECT_TRUE(r.contains(key)) << key;
    ranks += static_cast<int>(r["ranks"].size());
  }
  EXPECT_EQ(ranks, 2048);
  // MoE stages exchange tokens over ep; the first stage (dense layers only) does not.
  EXPECT_FALSE(j["roles"][0]["bytes_sent_per_step"].contains("ep"));
  EXPECT_GT(j["roles"].back()["bytes_sent_per_step"]["ep"].get<int64_t>(), 0);
}

TEST(PlanCommand, BadArgumentsNameTheFlagAndTheFix) {
  std::string err;
  EXPECT_EQ(run({"--config", kDeepSeek}, nullptr, &err), 2);
  EXPECT_NE(err.find("--world-size N is required"), std::string::npos) << err;
  EXPECT_EQ(run({"--config", kDeepSeek, "--world-size", "x"}, nullptr, &err), 2);
  EXPECT_NE(err.find("--world-size needs a whole number"), std::string::npos) << err;
  EXPECT_EQ(run({"--config", kDeepSeek, "--world-size", "2048", "--device-memory", "lots"}, nullptr, &err), 2);
  EXPECT_NE(err.find("--device-memory 'lots' is not a size"), std::string::npos) << err;
  EXPECT_EQ(run({"--config", kDeepSeek, "--world-size", "2048", "--device", "tpu"}, nullptr, &err), 2);
  EXPECT_NE(err.find("--device tpu: not a built-in profile"), std::string::npos) << err;
}

TEST(PlanCommand, ALayoutCheckConfigRefusesIsRefusedWithItsMessage) {
  std::string err;
  // 2047 ranks: not divisible by pp 16.
  EXPECT_EQ(run({"--config", kDeepSeek, "--world-size", "2047", "--device", kH800}, nullptr, &err), 1);
  EXPECT_NE(err.find("world_size must be divisible by tensor_parallel * pipeline_parallel * context_parallel"),
            std::string::npos)
      << err;
}

// The plan prints sizes in GiB; --device-memory reads them back, as every size flag does
// (core/byte_size.h): 141GiB and 141G are the same bytes, 141GB the decimal size.
TEST(PlanCommand, DeviceMemoryTakesTheUnitsThePlanPrints) {
  auto planned_memory = [](const std::string& size) {
    std::string out, err;
    EXPECT_EQ(run({"--config", kDeepSeek, "--world-size", "2048", "--device", kH800, "--json", "--device-memory", size},
                  &out, &err),
              0)
        << size << ": " << err;
    return out.empty() ? int64_t{-1} : nlohmann::json::parse(out)["device_memory_bytes"].get<int64_t>();
  };
  EXPECT_EQ(planned_memory("141GiB"), int64_t{141} << 30);
  EXPECT_EQ(planned_memory("141G"), int64_t{141} << 30);
  EXPECT_EQ(planned_memory("141 gib"), int64_t{141} << 30);
  EXPECT_EQ(planned_memory("141GB"), int64_t{141'000'000'000});
  std::string err;
  EXPECT_EQ(run({"--config", kDeepSeek, "--world-size", "2048", "--device-memory", "141GiBs"}, nullptr, &err), 2);
  EXPECT_NE(err.find("KiB/MiB/GiB/TiB (binary) or KB/MB/GB/TB (decimal)"), std::string::npos) << err;
}

}  // namespace
}  // namespace loom::plan
