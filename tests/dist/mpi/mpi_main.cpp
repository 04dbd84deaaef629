// GoogleTest main for the multi-process tests: every rank runs the same tests in the same order.
// Only rank 0 prints the test listing; any rank's failure makes mpirun exit non-zero.
#include <gtest/gtest.h>

#include <cstdio>

#include "loom/dist/runtime.h"
#include "testing/test_outcome.h"

namespace {
// Other ranks print only their failures, prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  loom::dist::Runtime& rt = loom::dist::Runtime::init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (rt.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rt.rank()));
  }
  // A filter that selects no test fails; tests that skip at this world size do not make the run
  // skipped (each entry's filter holds tests for its size; the others skip by design).
  const int rc = loom::testing::test_program_exit_code(RUN_ALL_TESTS(), /*skip_code=*/false);
  // A failure on one rank only must still fail the run (its exit code reaches mpirun).
  if (rc != 0) std::fprintf(stderr, "[rank %d] some tests failed\n", rt.rank());
  rt.finalize();
  return rc;
}
