#include "loom/dist/watchdog.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

namespace loom::dist {

namespace {
using Clock = std::chrono::steady_clock;

double timeout_from_env() {
  const char* v = std::getenv("LOOM_COLLECTIVE_TIMEOUT_S");
  if (!v || !*v) return -1;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || (end && *end != '\0')) {
    std::fprintf(stderr, "warning: LOOM_COLLECTIVE_TIMEOUT_S='%s' is not a number of seconds; using the default\n", v);
    return -1;
  }
  return s;
}
}  // namespace

struct Watchdog::Impl {
  struct Active {
    const char* op;
    std::string axis;
    int group_size;
    Clock::time_point start;
  };
  mutable std::mutex mutex;
  std::condition_variable wake;
  std::map<uint64_t, Active> active;
  uint64_t next_ticket = 1;
  double timeout_s = 600.0;
  bool env_overrides = false;
  int world_rank = 0;
  int64_t fired = 0;
  std::function<void(int)> abort_handler;
  std::thread thread;
  bool stop = false;

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      wake.wait_for(lock, std::chrono::milliseconds(50));
      if (stop || timeout_s <= 0) continue;
      const auto now = Clock::now();
      for (auto it = active.begin(); it != active.end();) {
        const double waited = std::chrono::duration<double>(now - it->second.start).count();
        if (waited <= timeout_s) {
          ++it;
          continue;
        }
        std::fprintf(stderr,
                     "[rank %d] error: collective %s on mesh axis '%s' (group of %d ranks) did not finish within "
                     "%.1f s; some rank stopped, hangs or took another code path. Aborting every rank "
                     "(LOOM_COLLECTIVE_TIMEOUT_S sets the limit).\n",
                     world_rank, it->second.op, it->second.axis.c_str(), it->second.group_size, timeout_s);
        std::fflush(stderr);
        ++fired;
        it = active.erase(it);
        auto handler = abort_handler;
        lock.unlock();
        if (handler) handler(kExitCode);
        else std::_Exit(kExitCode);
        lock.lock();
      }
    }
  }
};

Watchdog::Watchdog() : impl_(new Impl) {
  const double env = timeout_from_env();
  if (env >= 0) {
    impl_->timeout_s = env;
    impl_->env_overrides = true;
  }
  impl_->thread = std::thread([this] { impl_->run(); });
  impl_->thread.detach();  // lives for the whole process; never joined at exit
}

Watchdog& Watchdog::instance() {
  static Watchdog* w = new Watchdog();  // leaked on purpose: the thread may outlive static destruction
  return *w;
}

void Watchdog::set_timeout(double seconds) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (!impl_->env_overrides) impl_->timeout_s = seconds;
}

double Watchdog::timeout() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->timeout_s;
}

void Watchdog::set_world_rank(int rank) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->world_rank = rank;
}

void Watchdog::set_abort_handler(std::function<void(int)> handler) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->abort_handler = std::move(handler);
}

uint64_t Watchdog::begin(const char* op, const std::string& axis, int group_size) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const uint64_t t = impl_->next_ticket++;
  impl_->active.emplace(t, Impl::Active{op, axis, group_size, Clock::now()});
  return t;
}

void Watchdog::end(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->active.erase(ticket);
}

int64_t Watchdog::fired() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->fired;
}

}  // namespace loom::dist
