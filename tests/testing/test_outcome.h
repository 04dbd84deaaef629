// What a test program's run amounts to, for CTest. GoogleTest's own main exits 0 both when its
// filter selects no test and when every selected test called GTEST_SKIP, so a CTest entry would
// read "Passed" without having checked anything (a test compiled out under an #ifdef, a misspelt
// --gtest_filter, a missing interpreter). Every Loom test program ends through here instead.
#pragma once

namespace loom::testing {

// CTest's SKIP_RETURN_CODE for the entries of loom_test() (cmake/LoomTargets.cmake), as for the
// CTest commands that skip (LOOM_PYTHON_COMMAND without numpy).
inline constexpr int kSkippedExitCode = 77;

// The exit code for RUN_ALL_TESTS's result `rc`, read from the finished UnitTest:
//   - no test selected: 1, with a message naming the filter (an entry that runs nothing fails);
//   - every selected test skipped and none failed: kSkippedExitCode when `skip_code` (a
//     multi-process run passes false: its world-size skips are expected, and mpirun would
//     report any rank's exit code);
//   - otherwise rc.
// --gtest_list_tests runs nothing and keeps rc.
int test_program_exit_code(int rc, bool skip_code = true);

}  // namespace loom::testing
