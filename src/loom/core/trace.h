// Lightweight tracing for the profiler: when enabled, TraceScope records a span (name, category,
// start, duration, thread) and counter() records a value (e.g. device memory). Off by default;
// a disabled scope costs one relaxed atomic load. The train layer turns it on for the configured
// steps and writes the events as a Chrome trace (opens in Perfetto).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::trace {

struct Event {
  std::string name;
  const char* category;  // "op", "backward", "module", "step", "io", ...
  char phase;            // 'X' span, 'C' counter
  int64_t ts_ns;         // since the trace epoch
  int64_t dur_ns;        // spans
  int64_t value;         // counters
  int tid;
};

namespace detail {
extern std::atomic<bool> g_enabled;
}

inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
void start();
void stop();
// Moves out everything recorded so far (all threads).
std::vector<Event> take_events();
int64_t now_ns();
void record_span(const char* category, std::string name, int64_t start_ns, int64_t end_ns);
void counter(const char* name, int64_t value);

class Scope {
 public:
  Scope(const char* category, const char* name) {
    if (enabled()) begin(category, name);
  }
  Scope(const char* category, const std::string& name) {
    if (enabled()) begin(category, name);
  }
  ~Scope() {
    if (active_) record_span(category_, std::move(name_), start_ns_, now_ns());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void begin(const char* category, std::string name) {
    active_ = true;
    category_ = category;
    name_ = std::move(name);
    start_ns_ = now_ns();
  }
  bool active_ = false;
  const char* category_ = nullptr;
  std::string name_;
  int64_t start_ns_ = 0;
};

}  // namespace loom::trace

#define LOOM_TRACE_CONCAT2(a, b) a##b
#define LOOM_TRACE_CONCAT(a, b) LOOM_TRACE_CONCAT2(a, b)
// LOOM_TRACE("op", "linear");
#define LOOM_TRACE(category, name) ::loom::trace::Scope LOOM_TRACE_CONCAT(loom_trace_scope_, __LINE__)(category, name)
