// TensorBoard event files parse back with an independent reader (tests/train/tb_reader.py),
// CRCs included.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "loom/train/tensorboard.h"
#include "testing/temp_dir.h"

using namespace loom;

namespace {
std::string run(const std::string& cmd) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  char buf[4096];
  while (pipe && fgets(buf, sizeof(buf), pipe.get())) out += buf;
  return out;
}
}  // namespace

TEST(TensorBoard, Crc32cKnownValues) {
  // RFC 3720 test vector: 32 bytes of zeros → 0x8a9136aa; "123456789" → 0xe3069283.
  std::string zeros(32, '\0');
  EXPECT_EQ(train::crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(train::crc32c("123456789", 9), 0xe3069283u);
}

TEST(TensorBoard, EventsParseBackWithIndependentReader) {
  // LOOM_PYTHON: found at configure time (cmake/LoomPython.cmake), "" when there is none.
  if (LOOM_PYTHON[0] == '\0' || !std::filesystem::exists(LOOM_PYTHON)) GTEST_SKIP() << "no python3 (LOOM_PYTHON)";
  loom::testing::TempDir dir;
  std::string path;
  {
    train::TensorBoardWriter w(dir.file("tb"));
    path = w.path();
    w.add_scalar("loss", 2.5, 1);
    w.add_scalar("lr", 1e-4, 1);
    w.add_scalar("loss", 2.25, 2);
    w.flush();
  }
  std::string out = run(LOOM_PYTHON " " LOOM_SOURCE_DIR "/tests/train/tb_reader.py '" + path + "' 2>&1");
  EXPECT_EQ(out,
            "{\"file_version\": \"brain.Event:2\"}\n"
            "{\"step\": 1, \"tag\": \"loss\", \"value\": 2.5}\n"
            "{\"step\": 1, \"tag\": \"lr\", \"value\": 9.999999747378752e-05}\n"
            "{\"step\": 2, \"tag\": \"loss\", \"value\": 2.25}\n");
}

// A text summary (the samples a run prints) in the Text tab's format: a DT_STRING tensor with the
// text plugin's metadata, read back by the independent reader.
TEST(TensorBoard, TextSummariesParseBackWithIndependentReader) {
  if (LOOM_PYTHON[0] == '\0' || !std::filesystem::exists(LOOM_PYTHON)) GTEST_SKIP() << "no python3 (LOOM_PYTHON)";
  loom::testing::TempDir dir;
  std::string path;
  {
    train::TensorBoardWriter w(dir.file("tb"));
    path = w.path();
    w.add_text("samples/0", "Once upon a time → there was", 5);
    w.flush();
  }
  std::string out = run(LOOM_PYTHON " " LOOM_SOURCE_DIR "/tests/train/tb_reader.py '" + path + "' 2>&1");
  EXPECT_EQ(out,
            "{\"file_version\": \"brain.Event:2\"}\n"
            "{\"step\": 5, \"tag\": \"samples/0\", \"text\": \"Once upon a time \\u2192 there was\"}\n");
}
