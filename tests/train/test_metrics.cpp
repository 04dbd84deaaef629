// The step log line, metrics.jsonl fields, durations.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "loom/train/metrics.h"
#include "testing/temp_dir.h"

using namespace loom::train;

TEST(Metrics, LogLineHasTheReferenceFieldsAndOurs) {
  StepMetrics m;
  m.step = 3;
  m.max_steps = 100;
  m.loss = 9.1234567;
  m.lr = 1e-4;
  m.grad_norm = 1.5;
  m.consumed_samples = 24;
  m.global_batch_size = 8;
  m.step_time_s = 0.250;
  m.tokens_per_s = 8192;
  m.mfu = 0.5;
  m.mem_current_bytes = 1 << 30;
  m.mem_peak_bytes = 3 << 29;
  m.eta_s = 3725;
  EXPECT_EQ(format_log_line(m),
            "{ step:[    3/  100], consumed_samples: 24, global_batch_size: 8, loss:   9.123457, per_step_time:    250ms, "
            "lr: 1.000000e-04, grad_norm:   1.500000, throughput:   0.00T, tokens/s: 8192, mfu: 50.0%, mem: 1.00/1.50 GiB, eta: 1h02m }");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(12), "12s");
}

TEST(Metrics, JsonlHasOneObjectPerStepWithTheRequiredKeys) {
  loom::testing::TempDir dir;
  {
    MetricsWriter w(dir.file("metrics.jsonl"), "");
    for (int s = 1; s <= 2; ++s) {
      StepMetrics m;
      m.step = s;
      m.loss = s == 2 ? std::nan("") : 2.0;
      w.write(m);
    }
  }
  std::ifstream in(dir.file("metrics.jsonl"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"step", "loss", "lr", "grad_norm", "consumed_samples", "tokens_per_s", "mfu", "step_time_s",
                          "mem_current_bytes", "mem_peak_bytes"})
      EXPECT_TRUE(j.contains(k)) << k;
    ++n;
    if (n == 2) {
      EXPECT_EQ(j["loss"], "nan");  // non-finite values stay visible and the line parseable
    }
  }
  EXPECT_EQ(n, 2);
}
