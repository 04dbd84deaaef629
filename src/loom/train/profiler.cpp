#include "loom/train/profiler.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "loom/core/allocator.h"
#include "loom/core/log.h"
#include "loom/nn/module.h"

namespace loom::train {

Profiler::Profiler(ProfilerOptions options, int rank, const std::string& default_dir)
    : options_(std::move(options)), rank_(rank) {
  dir_ = options_.output_path.empty() ? default_dir : options_.output_path;
  selected_ = options_.enable;
  if (selected_ && options_.ranks) {
    selected_ = false;
    for (int r : *options_.ranks) selected_ = selected_ || r == rank;
  }
}

Profiler::~Profiler() {
  if (active_) trace::stop();
}

void Profiler::instrument(nn::Module& model) {
  if (!selected_) return;
  for (auto& [path, module] : model.named_modules()) {
    if (path.empty()) continue;
    std::string name = path + " (" + module->type_name() + ")";
    module->add_forward_wrapper([name](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
      LOOM_TRACE("module", name);
      return inner(in);
    });
  }
}

void Profiler::on_step_begin(int64_t step) {
  // Steps are absolute (global_step + 1): a run resumed inside the range traces the rest of it.
  const bool in_range = step >= options_.start_step && step <= options_.end_step;
  if (!selected_ || active_ || !written_.empty() || !in_range) {
    if (active_) step_start_ns_ = trace::now_ns();
    return;
  }
  trace::take_events();  // drop anything stale
  trace::start();
  active_ = true;
  step_start_ns_ = trace::now_ns();
  log::info("profiler: tracing steps ", step, "..", options_.end_step);
}

void Profiler::on_step_end(int64_t step) {
  if (!active_) return;
  trace::record_span("step", "step " + std::to_string(step), step_start_ns_, trace::now_ns());
  if (options_.profile_memory) trace::counter("device memory (bytes)", memory_stats().current_bytes);
  if (step < options_.end_step) return;
  trace::stop();
  active_ = false;
  std::vector<trace::Event> events = trace::take_events();
  // Level 0 keeps steps and modules; 1 adds ops; 2 adds backward nodes.
  std::vector<trace::Event> kept;
  for (auto& e : events) {
    std::string cat = e.category;
    if (cat == "op" && options_.level < 1) continue;
    if (cat == "backward" && options_.level < 2) continue;
    kept.push_back(std::move(e));
  }
  write(kept);
}

void Profiler::write(const std::vector<trace::Event>& events) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  LOOM_CHECK(!ec, IOError, "cannot create the profiler's folder '", dir_, "': ", ec.message(),
             " (set profiler.output_path to a writable directory)");
  written_ = (std::filesystem::path(dir_) / ("trace_rank" + std::to_string(rank_) + ".json")).string();
  write_chrome_trace(events, rank_, written_);
  log::info("profiler: wrote ", events.size(), " events to ", written_, " (open it in https://ui.perfetto.dev)");
}

void write_chrome_trace(const std::vector<trace::Event>& events, int rank, const std::string& path) {
  nlohmann::json trace_events = nlohmann::json::array();
  trace_events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  for (const auto& e : events) {
    nlohmann::json j = {{"name", e.name}, {"cat", e.category}, {"ph", std::string(1, e.phase)},
                        {"ts", static_cast<double>(e.ts_ns) / 1000.0}, {"pid", rank}, {"tid", e.tid}};
    if (e.phase == 'X') j["dur"] = static_cast<double>(e.dur_ns) / 1000.0;
    if (e.phase == 'C') j["args"] = {{"bytes", e.value}};
    trace_events.push_back(std::move(j));
  }
  nlohmann::json doc = {{"traceEvents", trace_events}, {"displayTimeUnit", "ms"}};
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    LOOM_CHECK(out.good(), IOError, "cannot write profiler trace '", tmp,
               "': set profiler.output_path to a writable directory");
    out << doc.dump();
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace loom::train
