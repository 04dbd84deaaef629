#include "loom/core/trace.h"

#include <chrono>
#include <mutex>
#include <thread>

#include "loom/core/allocator.h"

namespace loom::trace {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {
std::mutex g_mutex;
std::vector<Event> g_events;
const auto g_epoch = std::chrono::steady_clock::now();

int thread_index() {
  static std::atomic<int> next{0};
  thread_local int id = next.fetch_add(1);
  return id;
}
}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - g_epoch).count();
}

void start() { detail::g_enabled.store(true); }
void stop() { detail::g_enabled.store(false); }

std::vector<Event> take_events() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<Event> out;
  out.swap(g_events);
  return out;
}

void record_span(const char* category, std::string name, int64_t start_ns, int64_t end_ns) {
  Event e{std::move(name), category, 'X', start_ns, end_ns - start_ns, 0, thread_index()};
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events.push_back(std::move(e));
}

void counter(const char* name, int64_t value) {
  if (!enabled()) return;
  Event e{name, "memory", 'C', now_ns(), 0, value, thread_index()};
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events.push_back(std::move(e));
}

}  // namespace loom::trace
