// Work: the handle an asynchronous communication op returns (ProcessGroup::iall_gather, isend,
// ...). wait() blocks until the op finished and rethrows the error it ended with; is_completed()
// never blocks. The buffers an op reads or writes must stay alive and untouched until it
// completed (as with MPI requests); the Tensor overloads keep their tensors alive themselves.
//
// The collective watchdog (watchdog.h) watches a pending Work from issue to completion, whether
// or not anybody waits on it: an op that never completes within the timeout aborts every rank,
// naming the rank, the op and the mesh axis. Every handle must complete before
// Runtime::finalize() (MPI cannot move data after it).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

namespace loom::dist {

class CommThread;

// Whoever completes Works (the group's comm thread) hears when a caller starts and stops
// blocking on one, so that it can poll its transfers without pausing meanwhile.
class WorkProgress {
 public:
  virtual ~WorkProgress() = default;
  virtual void waiter_arrived() = 0;
  virtual void waiter_left() = 0;
};

class Work {
 public:
  // An op that already ran (groups of one rank, or ops with nothing to move).
  static std::shared_ptr<Work> completed(const char* op);
  // A pending op on `axis`; the watchdog watches it from now on.
  Work(const char* op, const std::string& axis, int group_size);
  ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the op finished; rethrows its error (on every call).
  void wait();
  // Whether the op finished (successfully or not). Transfers are seen finished when the comm
  // thread last polled them.
  bool is_completed() const { return done_.load(std::memory_order_acquire); }
  const char* op() const { return op_; }

 private:
  friend class CommThread;
  Work(const char* op, bool done);
  // Called once by whoever ran the op: records the error, ends the watchdog ticket, wakes waiters.
  void finish(std::exception_ptr error);

  const char* op_;
  uint64_t ticket_ = 0;  // watchdog ticket; 0 once finished or never watched
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  std::mutex mutex_;
  std::condition_variable finished_;
  std::shared_ptr<WorkProgress> progress_;  // set for transfers the comm thread polls
};

using WorkHandle = std::shared_ptr<Work>;

// A started point-to-point transfer (the backend's MPI requests) that the comm thread polls to
// completion. test() advances the transport; it returns true once the transfer is complete and
// throws if the transfer failed (a message of the wrong size, a transport error). The destructor
// must not call the transport: it may run after MPI was finalised.
class PendingTransfer {
 public:
  virtual ~PendingTransfer() = default;
  virtual bool test() = 0;
};

}  // namespace loom::dist
