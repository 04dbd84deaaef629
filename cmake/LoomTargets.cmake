# Common compile settings for every Loom target.
add_library(loom_options INTERFACE)
target_include_directories(loom_options INTERFACE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(loom_options INTERFACE -Wall -Wextra -Wno-unused-parameter
                                               -fno-math-errno)
if(LOOM_PORTABLE)
  target_compile_options(loom_options INTERFACE -march=x86-64 -mtune=generic)
else()
  target_compile_options(loom_options INTERFACE -march=x86-64-v3)
endif()
if(LOOM_SANITIZE)
  target_compile_options(loom_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                                 -fno-sanitize-recover=undefined)
  target_link_options(loom_options INTERFACE -fsanitize=address,undefined)
endif()
target_link_libraries(loom_options INTERFACE OpenMP::OpenMP_CXX Threads::Threads)

# loom_layer(<name> [DEPS libs...]): a static library from every .cpp under src/loom/<name>.
function(loom_layer name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  if(srcs)
    add_library(loom_${name} STATIC ${srcs})
    target_link_libraries(loom_${name} PUBLIC loom_options ${ARG_DEPS})
  else()  # a layer that has no sources yet still gives its dependents a target to link
    add_library(loom_${name} INTERFACE)
    target_link_libraries(loom_${name} INTERFACE loom_options ${ARG_DEPS})
  endif()
endfunction()

# loom_test(<layer> [DEPS libs...]): one GoogleTest program per test layer folder; every TEST()
# becomes its own CTest entry (gtest_add_tests scans the sources, nothing runs at build time). A
# test that calls GTEST_SKIP (a missing interpreter or downloaded file) is reported as skipped,
# not passed.
function(loom_test layer)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  if(NOT srcs)
    return()
  endif()
  add_executable(test_${layer} ${srcs})
  target_link_libraries(test_${layer} PRIVATE ${ARG_DEPS} loom_testing GTest::gtest GTest::gtest_main)
  target_compile_definitions(test_${layer} PRIVATE
    LOOM_SOURCE_DIR="${PROJECT_SOURCE_DIR}" LOOM_FIXTURES_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures"
    LOOM_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_add_tests(TARGET test_${layer} SOURCES ${srcs} TEST_LIST test_${layer}_list)
  set_tests_properties(${test_${layer}_list} PROPERTIES LABELS ${layer} TIMEOUT 300
                       ENVIRONMENT "LOOM_NUM_THREADS=1;OMP_NUM_THREADS=1"
                       SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()
