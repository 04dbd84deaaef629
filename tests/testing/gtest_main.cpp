// The main of every single-process test program (loom_test in cmake/LoomTargets.cmake):
// GoogleTest's, ending through test_program_exit_code so that an entry whose filter selects no
// test fails and one whose tests all skipped reads as skipped.
#include <gtest/gtest.h>

#include "testing/test_outcome.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return loom::testing::test_program_exit_code(RUN_ALL_TESTS());
}
