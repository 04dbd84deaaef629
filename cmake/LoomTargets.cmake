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
# becomes its own CTest entry (gtest_add_tests scans the sources, nothing runs at build time). The
# program's main (tests/testing/gtest_main.cpp) exits 77 when every test it ran called GTEST_SKIP
# (a missing interpreter, downloaded file or CPU feature), which CTest reports as skipped, not
# passed; and 1 when its filter selects no test (a test compiled out), which fails the entry.
# SKIP_REGULAR_EXPRESSION is not used: CTest applies it regardless of the exit code, so output
# mentioning a skip would hide a failure.
function(loom_test layer)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  if(NOT srcs)
    return()
  endif()
  add_executable(test_${layer} ${srcs})
  target_link_libraries(test_${layer} PRIVATE ${ARG_DEPS} loom_testing loom_gtest_main GTest::gtest)
  target_compile_definitions(test_${layer} PRIVATE
    LOOM_SOURCE_DIR="${PROJECT_SOURCE_DIR}" LOOM_FIXTURES_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures"
    LOOM_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_add_tests(TARGET test_${layer} SOURCES ${srcs} TEST_LIST test_${layer}_list)
  set_tests_properties(${test_${layer}_list} PROPERTIES LABELS ${layer} TIMEOUT 300
                       ENVIRONMENT "LOOM_NUM_THREADS=1;OMP_NUM_THREADS=1" SKIP_RETURN_CODE 77)
endfunction()

# loom_test_variant(<layer> <suffix> FILTER <regex> [ENVIRONMENT vars...]): test_<layer>'s tests
# again under another environment (a LOOM_MAX_CPU_ISA cap), one CTest entry per test as loom_test
# makes them, named <Suite>.<Name>.<suffix>: the tests of the layer's sources whose "Suite.Name"
# matches the regex. One entry per test, so that a test that skips under the variant is reported
# as skipped on its own instead of vanishing into a passing entry that ran others.
function(loom_test_variant layer suffix)
  cmake_parse_arguments(ARG "" "FILTER" "ENVIRONMENT" ${ARGN})
  if(NOT TARGET test_${layer})
    return()
  endif()
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  set(names)
  foreach(src IN LISTS srcs)
    file(READ ${src} text)
    string(REGEX MATCHALL "TEST(_F)?\\([ \t\r\n]*[A-Za-z0-9_]+[ \t\r\n]*,[ \t\r\n]*[A-Za-z0-9_]+[ \t\r\n]*\\)"
           found "${text}")
    foreach(decl IN LISTS found)
      string(REGEX REPLACE "TEST(_F)?\\([ \t\r\n]*([A-Za-z0-9_]+)[ \t\r\n]*,[ \t\r\n]*([A-Za-z0-9_]+).*" "\\2.\\3"
             name "${decl}")
      if(name MATCHES "${ARG_FILTER}")
        list(APPEND names ${name})
      endif()
    endforeach()
  endforeach()
  if(NOT names)
    message(FATAL_ERROR "loom_test_variant(${layer} ${suffix}): no TEST of tests/${layer} matches '${ARG_FILTER}'")
  endif()
  foreach(name IN LISTS names)
    add_test(NAME ${name}.${suffix} COMMAND test_${layer} --gtest_filter=${name})
    set_tests_properties(${name}.${suffix} PROPERTIES LABELS ${layer} TIMEOUT 300 SKIP_RETURN_CODE 77
                         ENVIRONMENT "LOOM_NUM_THREADS=1;OMP_NUM_THREADS=1;${ARG_ENVIRONMENT}")
  endforeach()
endfunction()
