// The `profiler:` section: from start_step to end_step (inclusive, 1-based optimizer steps) the
// trace is on — spans per op, per backward node and per module, plus device-memory counters when
// profile_memory — and at end_step a Chrome trace JSON is written for the selected ranks
// (opens in Perfetto / chrome://tracing).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/core/trace.h"

namespace loom::nn { class Module; }

namespace loom::train {

struct ProfilerOptions {
  bool enable = false;
  int64_t start_step = 1;
  int64_t end_step = 1;
  std::string output_path;               // "" ⇒ <run dir>/profile
  std::optional<std::vector<int>> ranks;  // none ⇒ every rank
  int level = 0;                          // 0: steps+modules, 1: +ops, 2: +backward nodes
  bool profile_memory = false;
};

class Profiler {
 public:
  Profiler(ProfilerOptions options, int rank, const std::string& default_dir);
  ~Profiler();
  // Adds a span per module forward (installed once; inert unless tracing).
  void instrument(nn::Module& model);
  // Call with the step about to run (1-based) and after it finished.
  void on_step_begin(int64_t step);
  void on_step_end(int64_t step);
  bool active() const { return active_; }
  // Path of the written trace (after end_step), else "".
  const std::string& written_path() const { return written_; }

 private:
  void write(const std::vector<trace::Event>& events);
  ProfilerOptions options_;
  int rank_;
  bool selected_;
  bool active_ = false;
  int64_t step_start_ns_ = 0;
  std::string dir_;
  std::string written_;
};

// Writes events as Chrome trace JSON to `path` (atomic rename).
void write_chrome_trace(const std::vector<trace::Event>& events, int rank, const std::string& path);

}  // namespace loom::train
