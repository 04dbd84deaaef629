// The progress scheme of asynchronous communication: one communication thread per process group,
// started by the group's first asynchronous op.
//
// Why a thread. MPI moves a large message only while some thread of the process is inside an MPI
// call (the rendezvous handshake, then the copy, happen in MPI's progress engine). The other
// scheme, MPI_Test polling at op boundaries, leaves a transfer standing still for the whole length
// of a GEMM or attention kernel, which has no boundaries inside; and the collectives here are
// loops of MPI_Sendrecv steps (mpi_process_group.cpp: that is what keeps sums in rank order), so
// a polled all-gather over n ranks would advance one of its n-1 steps per boundary. A thread runs
// the whole loop while the caller computes, with the same code, bits and byte counts as the
// blocking call.
//
// Order. MPI requires the collectives on a communicator to be entered in the same order on every
// rank, so the thread runs the group's queued collectives one at a time in issue order, and a
// blocking call on the group first waits until the queue is empty (drain()), then runs inline on
// the caller: no thread hop, and a group nobody uses asynchronously (FSDP) never starts a thread.
// Point-to-point transfers are posted at once on the caller (MPI_Isend/MPI_Irecv on the group's
// point-to-point communicator, so messages match in issue order) and handed to the thread, which
// is the only one to test them (MPI forbids two threads completing one request): tightly while a
// caller blocks in Work::wait(), every kPollInterval otherwise. MPI_THREAD_MULTIPLE (runtime.h)
// makes the caller's and the thread's concurrent MPI calls legal.
//
// Waiting. While a collective's step waits for its peer, the thread does not spin inside MPI (as
// MPI_Sendrecv would, taking a core from the GEMM that runs meanwhile): the backend posts the step
// as MPI_Isend/MPI_Irecv and tests it with pause_between_tests() in between, a few yields and then
// sleeps of growing length up to kMaxPause. The messages, their order and the bits are those of the
// blocking call. The thread still needs a core while it copies (the receiver copies on the CPU),
// so overlap is complete only when it has one of its own (bench/bench_comm_overlap.cpp measures
// it).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/dist/work.h"

namespace loom::dist {

class CommThread {
 public:
  // How often in-flight transfers are polled while nobody waits on one.
  static constexpr std::chrono::microseconds kPollInterval{100};
  // The longest pause between two tests of a collective's step.
  static constexpr std::chrono::microseconds kMaxPause{100};

  // Whether the calling thread is a communication thread (the backend then waits politely).
  static bool on_this_thread();
  // The pause before the next test of a step that is not complete; `round` counts the tests so far.
  static void pause_between_tests(int round);

  explicit CommThread(std::string axis);
  // finish(): waits for every pending op, then joins the thread.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Runs `body` on the thread after every body enqueued before it, then completes `work` with the
  // error `body` threw, if any.
  void enqueue(WorkHandle work, std::function<void()> body);
  // Polls `transfer` on the thread until it is complete (or fails), then completes `work` and
  // drops `keep` (the tensors the transfer reads or writes).
  void track(WorkHandle work, std::unique_ptr<PendingTransfer> transfer, std::vector<Tensor> keep = {});
  // Returns once every enqueued body has run; tracked transfers may still be in flight.
  void drain();
  // Ops not completed yet (queued, running or in flight).
  int pending() const;

  // Waits for every pending op (saying on stderr what it waits for; the watchdog ends the run if
  // one never completes), then stops the thread. Called by the group's destructor.
  void finish();
  // Completes every queued collective and in-flight transfer with a DistError saying `reason`,
  // without touching the transport (it is gone: MPI was finalised), then stops the thread (after
  // the collective it may be running).
  void abandon(const std::string& reason);

 private:
  struct State;
  static void run(State& s);
  std::shared_ptr<State> state_;  // shared with the Works it polls (their WorkProgress)
  std::thread thread_;
};

}  // namespace loom::dist
