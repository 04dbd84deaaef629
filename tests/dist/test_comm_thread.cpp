// The communication thread on its own (no MPI): issue order, errors reaching wait(), drain(),
// transfers polled to completion, the watchdog watching a Work from issue, and what destroying
// the thread does with pending ops. The MPI group's use of it is in tests/dist/mpi/.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "loom/core/error.h"
#include "loom/dist/comm_thread.h"
#include "loom/dist/watchdog.h"

namespace loom::dist {
namespace {

using namespace std::chrono_literals;

WorkHandle pending_work(const char* op) { return std::make_shared<Work>(op, "test", 2); }

// A transfer that completes at the first poll after `done` is set, or fails with `error` set.
class FlagTransfer final : public PendingTransfer {
 public:
  FlagTransfer(std::atomic<bool>& done, std::atomic<int>& polls, bool fail = false)
      : done_(done), polls_(polls), fail_(fail) {}
  bool test() override {
    ++polls_;
    if (!done_.load()) return false;
    if (fail_) LOOM_THROW(DistError, "irecv on mesh axis 'test': expected 8 elements, the sender sent 5");
    return true;
  }

 private:
  std::atomic<bool>& done_;
  std::atomic<int>& polls_;
  bool fail_;
};

TEST(CommThread, RunsBodiesOneAtATimeInIssueOrder) {
  CommThread thread("test");
  std::vector<int> order;  // touched by the thread only until every work completed
  std::vector<WorkHandle> works;
  for (int i = 0; i < 40; ++i) {
    works.push_back(pending_work("all_gather"));
    thread.enqueue(works.back(), [&order, i] {
      if (i % 10 == 0) std::this_thread::sleep_for(2ms);  // later bodies must still wait their turn
      order.push_back(i);
    });
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  ASSERT_EQ(order.size(), 40u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  for (const auto& w : works) EXPECT_TRUE(w->is_completed());
}

TEST(CommThread, AnErrorIsRethrownByWaitAndLaterOpsStillRun) {
  CommThread thread("test");
  auto failing = pending_work("all_to_all_v"), next = pending_work("all_reduce");
  thread.enqueue(failing, [] { LOOM_THROW(ShapeError, "all_to_all_v on mesh axis 'test': rank 0 sends itself 2"); });
  bool ran = false;
  thread.enqueue(next, [&ran] { ran = true; });
  next->wait();
  EXPECT_TRUE(ran);
  EXPECT_TRUE(failing->is_completed());
  for (int i = 0; i < 2; ++i) {  // every wait() rethrows
    try {
      failing->wait();
      FAIL() << "wait() must rethrow the body's error";
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find("sends itself 2"), std::string::npos) << e.what();
    }
  }
}

TEST(CommThread, DrainWaitsForQueuedBodiesButNotForTransfers) {
  CommThread thread("test");
  std::atomic<bool> body_done{false}, transfer_done{false};
  std::atomic<int> polls{0};
  auto transfer = pending_work("irecv");
  thread.track(transfer, std::make_unique<FlagTransfer>(transfer_done, polls));
  auto slow = pending_work("all_gather");
  thread.enqueue(slow, [&body_done] {
    std::this_thread::sleep_for(50ms);
    body_done = true;
  });
  thread.drain();
  EXPECT_TRUE(body_done.load());
  EXPECT_TRUE(slow->is_completed());
  EXPECT_FALSE(transfer->is_completed());
  EXPECT_EQ(thread.pending(), 1);
  // Polled in the background while nobody waits (every kPollInterval)...
  const int before = polls.load();
  std::this_thread::sleep_for(20ms);
  EXPECT_GT(polls.load(), before);
  // ...and completed at the first poll after the transport finished.
  transfer_done = true;
  transfer->wait();
  EXPECT_TRUE(transfer->is_completed());
  EXPECT_EQ(thread.pending(), 0);
}

TEST(CommThread, ATransferErrorReachesWait) {
  CommThread thread("test");
  std::atomic<bool> done{true};
  std::atomic<int> polls{0};
  auto work = pending_work("irecv");
  thread.track(work, std::make_unique<FlagTransfer>(done, polls, /*fail=*/true));
  try {
    work->wait();
    FAIL() << "wait() must rethrow the transfer's error";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("expected 8 elements, the sender sent 5"), std::string::npos) << e.what();
  }
}

TEST(CommThread, DestroyingItWaitsForPendingOps) {
  auto work = pending_work("all_gather");
  std::atomic<bool> ran{false};
  {
    CommThread thread("test");
    thread.enqueue(work, [&ran] {
      std::this_thread::sleep_for(100ms);
      ran = true;
    });
  }  // prints a warning naming the pending all_gather, then waits for it
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(work->is_completed());
  EXPECT_NO_THROW(work->wait());
}

TEST(CommThread, AbandonFailsWhatCanNoLongerComplete) {
  std::atomic<bool> never{false};
  std::atomic<int> polls{0};
  auto transfer = pending_work("irecv");
  CommThread thread("test");
  thread.track(transfer, std::make_unique<FlagTransfer>(never, polls));
  thread.abandon("MPI was finalised first");
  EXPECT_TRUE(transfer->is_completed());
  try {
    transfer->wait();
    FAIL() << "an abandoned op must fail";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("irecv: MPI was finalised first"), std::string::npos) << e.what();
  }
}

TEST(CommThread, TheWatchdogWatchesAWorkFromIssueToCompletion) {
  // Nobody waits on the handle: an op that never completes must still fire the watchdog.
  Watchdog& wd = Watchdog::instance();
  const double saved = wd.timeout();
  wd.set_abort_handler([](int) {});
  wd.set_timeout(0.15);
  const int64_t before = wd.fired();
  CommThread thread("test");
  std::atomic<bool> done{false};
  std::atomic<int> polls{0};
  auto quick = pending_work("isend");
  thread.enqueue(quick, [] {});
  quick->wait();
  auto stuck = pending_work("irecv");
  thread.track(stuck, std::make_unique<FlagTransfer>(done, polls));
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(wd.fired(), before + 1);  // the stuck irecv only; the completed isend ended its ticket
  done = true;
  stuck->wait();
  wd.set_abort_handler({});
  wd.set_timeout(saved);
}

}  // namespace
}  // namespace loom::dist
