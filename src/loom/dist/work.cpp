#include "loom/dist/work.h"

#include "loom/dist/watchdog.h"

namespace loom::dist {

std::shared_ptr<Work> Work::completed(const char* op) { return std::shared_ptr<Work>(new Work(op, true)); }

Work::Work(const char* op, bool done) : op_(op), done_(done) {}

Work::Work(const char* op, const std::string& axis, int group_size)
    : op_(op), ticket_(Watchdog::instance().begin(op, axis, group_size)) {}

Work::~Work() {
  // Only a Work nobody completed still holds its ticket (the comm thread completes every Work it
  // was given, so this is a Work that never reached it).
  if (ticket_) Watchdog::instance().end(ticket_);
}

void Work::wait() {
  if (!is_completed()) {
    std::shared_ptr<WorkProgress> progress;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      progress = progress_;
    }
    if (progress) progress->waiter_arrived();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      finished_.wait(lock, [this] { return is_completed(); });
    }
    if (progress) progress->waiter_left();
  }
  if (error_) std::rethrow_exception(error_);
}

void Work::finish(std::exception_ptr error) {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
    ticket = ticket_;
    ticket_ = 0;
    progress_.reset();
    done_.store(true, std::memory_order_release);
  }
  if (ticket) Watchdog::instance().end(ticket);
  finished_.notify_all();
}

}  // namespace loom::dist
