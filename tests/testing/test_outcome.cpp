#include "testing/test_outcome.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace loom::testing {

int test_program_exit_code(int rc, bool skip_code) {
  if (GTEST_FLAG_GET(list_tests)) return rc;
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  if (u.test_to_run_count() == 0) {
    std::fprintf(stderr,
                 "error: --gtest_filter=%s selects no test of this program (%d tests in it): the CTest entry "
                 "would pass without checking anything\n",
                 GTEST_FLAG_GET(filter).c_str(), u.total_test_count());
    return 1;
  }
  if (rc == 0 && skip_code && u.skipped_test_count() == u.test_to_run_count()) return kSkippedExitCode;
  return rc;
}

}  // namespace loom::testing
