// The collective watchdog: a collective that does not finish within the timeout means some rank
// died, hangs or took another code path, and waiting longer only hides it. The watchdog prints
// the rank, the op and the mesh axis to stderr and aborts every rank (MPI_Abort on the world),
// so a distributed run always ends with a message instead of hanging.
//
// The timeout comes from LOOM_COLLECTIVE_TIMEOUT_S (seconds; 0 disables), else set_timeout(),
// else 600 s (the first collectives wait for every rank to start and load its data).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace loom::dist {

class Watchdog {
 public:
  static Watchdog& instance();

  void set_timeout(double seconds);  // <= 0 disables
  double timeout() const;
  // The rank printed in the message (the world rank).
  void set_world_rank(int rank);
  // What firing does after printing: MPI_Abort of the world under MPI; by default the process
  // exits with `code` at once.
  void set_abort_handler(std::function<void(int code)> handler);
  static constexpr int kExitCode = 124;

  // Marks a collective as running on the calling thread; returns a ticket for end().
  uint64_t begin(const char* op, const std::string& axis, int group_size);
  void end(uint64_t ticket);

  // Collectives that timed out so far (tests with a non-aborting handler).
  int64_t fired() const;

 private:
  Watchdog();
  struct Impl;
  Impl* impl_;
};

// Brackets one collective.
class CollectiveScope {
 public:
  CollectiveScope(const char* op, const std::string& axis, int group_size)
      : ticket_(Watchdog::instance().begin(op, axis, group_size)) {}
  ~CollectiveScope() { Watchdog::instance().end(ticket_); }
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  uint64_t ticket_;
};

}  // namespace loom::dist
