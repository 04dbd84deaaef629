#include "loom/dist/comm_thread.h"

#include <pthread.h>
#include <sys/prctl.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/log.h"

namespace loom::dist {

struct CommThread::State final : WorkProgress {
  struct Task {
    WorkHandle work;
    std::function<void()> body;
  };
  struct Transfer {
    WorkHandle work;
    std::unique_ptr<PendingTransfer> transfer;
    std::vector<Tensor> keep;
  };

  std::string axis;
  mutable std::mutex mutex;
  std::condition_variable wake;     // the thread: a task, a transfer, a waiter or stop arrived
  std::condition_variable drained;  // callers of drain(): the queue ran empty
  std::deque<Task> tasks;
  bool running = false;  // a task body is executing...
  WorkHandle current;    // ...for this Work
  std::vector<Transfer> transfers;
  std::vector<WorkHandle> in_poll;  // the transfers poll() is testing, out of `transfers`
  int waiters = 0;  // callers blocked on a tracked transfer
  bool stop = false;
  std::string abandon_reason;  // set by abandon(): fail what is left instead of running it

  void waiter_arrived() override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++waiters;
    }
    wake.notify_one();
  }
  void waiter_left() override {
    std::lock_guard<std::mutex> lock(mutex);
    --waiters;
  }

  // Tests every in-flight transfer once (with the lock released: a test may take a while) and
  // completes those that finished. Called and returns with `lock` held.
  void poll(std::unique_lock<std::mutex>& lock) {
    std::vector<Transfer> mine = std::move(transfers);
    transfers.clear();
    for (const Transfer& t : mine) in_poll.push_back(t.work);
    lock.unlock();
    std::vector<Transfer> still;
    for (Transfer& t : mine) {
      std::exception_ptr error;
      bool done = false;
      try {
        done = t.transfer->test();
      } catch (...) {
        error = std::current_exception();
        done = true;
      }
      if (done) {
        t.transfer.reset();
        t.keep.clear();
        t.work->finish(error);
      } else {
        still.push_back(std::move(t));
      }
    }
    lock.lock();
    in_poll.clear();
    for (Transfer& t : still) transfers.push_back(std::move(t));  // after any tracked meanwhile
  }

  // Fails every queued task and tracked transfer with `abandon_reason`, without running or testing
  // them. Called and returns with `lock` held.
  void fail_all(std::unique_lock<std::mutex>& lock) {
    std::deque<Task> left_tasks = std::move(tasks);
    std::vector<Transfer> left_transfers = std::move(transfers);
    tasks.clear();
    transfers.clear();
    const std::string reason = abandon_reason;
    lock.unlock();
    if (!left_tasks.empty() || !left_transfers.empty())
      log::error("process group on mesh axis '", axis, "': ", left_tasks.size() + left_transfers.size(),
                 " asynchronous op(s) never completed: ", reason);
    for (Task& t : left_tasks) t.work->finish(std::make_exception_ptr(DistError(t.work->op() + (": " + reason))));
    for (Transfer& t : left_transfers) {
      t.transfer.reset();  // a PendingTransfer's destructor never calls the transport
      t.keep.clear();
      t.work->finish(std::make_exception_ptr(DistError(t.work->op() + (": " + reason))));
    }
    lock.lock();
  }

  // The ops not completed yet (call with the mutex held).
  std::vector<const char*> unfinished() const {
    std::vector<const char*> ops;
    auto note = [&ops](const WorkHandle& w) {
      if (!w->is_completed()) ops.push_back(w->op());
    };
    if (current) note(current);
    for (const Task& t : tasks) note(t.work);
    for (const WorkHandle& w : in_poll) note(w);
    for (const Transfer& t : transfers) note(t.work);
    return ops;
  }
};

namespace {
thread_local bool t_on_comm_thread = false;
}  // namespace

bool CommThread::on_this_thread() { return t_on_comm_thread; }

void CommThread::pause_between_tests(int round) {
  // A peer that is nearly there is worth a few yields; one that is far behind gets the core back
  // for the compute threads, in sleeps that grow so a long wait costs few wake-ups.
  constexpr int kYields = 16;
  if (round < kYields) {
    std::this_thread::yield();
    return;
  }
  const int doublings = std::min(round - kYields, 5);
  std::this_thread::sleep_for(std::min(std::chrono::microseconds(4 << doublings), kMaxPause));
}

CommThread::CommThread(std::string axis) : state_(std::make_shared<State>()) {
  state_->axis = std::move(axis);
  thread_ = std::thread([s = state_] { run(*s); });
  pthread_setname_np(thread_.native_handle(), "loom-comm");
}

CommThread::~CommThread() { finish(); }

void CommThread::run(State& s) {
  t_on_comm_thread = true;
  // Sleeps of a few microseconds must not be stretched by the default 50 µs timer slack.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    if (!s.abandon_reason.empty()) {
      s.fail_all(lock);
      return;
    }
    if (!s.transfers.empty()) s.poll(lock);
    if (!s.tasks.empty()) {
      State::Task task = std::move(s.tasks.front());
      s.tasks.pop_front();
      s.running = true;
      s.current = task.work;
      lock.unlock();
      std::exception_ptr error;
      try {
        task.body();
      } catch (...) {
        error = std::current_exception();
      }
      task.body = nullptr;  // drop what the body kept alive (tensors) before anyone is woken
      task.work->finish(error);
      lock.lock();
      s.running = false;
      s.current.reset();
      if (s.tasks.empty()) s.drained.notify_all();
      continue;
    }
    if (!s.transfers.empty()) {
      if (s.waiters > 0) {
        // Somebody is blocked on a transfer: keep MPI progressing, but let the compute threads in.
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      } else {
        s.wake.wait_for(lock, kPollInterval);
      }
      continue;
    }
    if (s.stop) return;
    s.wake.wait(lock);
  }
}

void CommThread::enqueue(WorkHandle work, std::function<void()> body) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    LOOM_ASSERT(!state_->stop);
    state_->tasks.push_back({std::move(work), std::move(body)});
  }
  state_->wake.notify_one();
}

void CommThread::track(WorkHandle work, std::unique_ptr<PendingTransfer> transfer, std::vector<Tensor> keep) {
  {
    std::lock_guard<std::mutex> lock(work->mutex_);
    work->progress_ = state_;
  }
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    LOOM_ASSERT(!state_->stop);
    state_->transfers.push_back({std::move(work), std::move(transfer), std::move(keep)});
  }
  state_->wake.notify_one();
}

void CommThread::drain() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->drained.wait(lock, [this] { return state_->tasks.empty() && !state_->running; });
}

int CommThread::pending() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return static_cast<int>(state_->unfinished().size());
}

void CommThread::finish() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    const std::vector<const char*> ops = state_->unfinished();
    if (!ops.empty()) {
      std::string names;
      for (const char* op : ops) names += std::string(names.empty() ? "" : ", ") + op;
      log::warn("process group on mesh axis '", state_->axis, "' is destroyed with ", ops.size(),
                " asynchronous op(s) not completed (", names,
                "); waiting for them (the collective watchdog ends the run if they never complete)");
    }
    state_->stop = true;
  }
  state_->wake.notify_one();
  thread_.join();
}

void CommThread::abandon(const std::string& reason) {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->abandon_reason = reason.empty() ? "abandoned" : reason;
    state_->stop = true;
  }
  state_->wake.notify_one();
  thread_.join();
}

}  // namespace loom::dist
