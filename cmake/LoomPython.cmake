# The python3 the tests run their independent references with: the numpy readers and writers of
# the data formats, Megatron's index construction and HF's models in numpy, the TensorBoard and
# PyYAML readers, and the drivers of the multi-process parity runs. It must import numpy, and the
# first python3 on PATH need not (a pyenv or virtualenv interpreter often comes before the
# system's, which has python3-numpy from scripts/install-deps.sh), so the candidates are tried in
# order: -DLOOM_PYTHON=<path> as given; else Python3_EXECUTABLE when set; else every python3 on
# PATH. The first that imports numpy is cached as LOOM_PYTHON.
#
# Without one the tests that need it are skipped, never failed: C++ tests see LOOM_PYTHON as ""
# (loom_test_uses_python) and call GTEST_SKIP; CTest commands start with LOOM_PYTHON_COMMAND,
# which then prints why and exits 77 (give those tests SKIP_RETURN_CODE 77).
#
# Sets LOOM_PYTHON (cache), LOOM_PYTHON_FOUND and LOOM_PYTHON_COMMAND.

# find_program VALIDATOR: rejects a candidate that cannot import numpy (or does not run at all).
function(loom_python_imports_numpy result candidate)
  execute_process(COMMAND "${candidate}" -c "import numpy" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    set(${result} FALSE PARENT_SCOPE)
  endif()
endfunction()

set(_loom_python_doc "python3 that imports numpy, run by the tests (empty: search PATH)")
if(NOT LOOM_PYTHON AND Python3_EXECUTABLE)
  set(_loom_python_ok TRUE)
  loom_python_imports_numpy(_loom_python_ok "${Python3_EXECUTABLE}")
  if(_loom_python_ok)
    set(LOOM_PYTHON "${Python3_EXECUTABLE}" CACHE FILEPATH "${_loom_python_doc}" FORCE)
  endif()
endif()
# A NOTFOUND result is searched again at the next configure, so installing numpy later is enough.
find_program(LOOM_PYTHON NAMES python3 VALIDATOR loom_python_imports_numpy DOC "${_loom_python_doc}")

# A given or cached path is not searched again: check that it still works.
set(LOOM_PYTHON_FOUND FALSE)
if(LOOM_PYTHON)
  set(LOOM_PYTHON_FOUND TRUE)
  loom_python_imports_numpy(LOOM_PYTHON_FOUND "${LOOM_PYTHON}")
endif()

if(LOOM_PYTHON_FOUND)
  message(STATUS "Python for the tests: ${LOOM_PYTHON} (imports numpy)")
  set(LOOM_PYTHON_COMMAND "${LOOM_PYTHON}")
else()
  if(LOOM_PYTHON)
    set(_loom_python_why "LOOM_PYTHON=${LOOM_PYTHON} cannot import numpy")
  else()
    set(_loom_python_why "no python3 on PATH imports numpy")
  endif()
  message(WARNING "${_loom_python_why}: the tests that compare with Python references will be "
                  "skipped. Install numpy (scripts/install-deps.sh installs python3-numpy) or "
                  "configure with -DLOOM_PYTHON=/path/to/python3 (-ULOOM_PYTHON searches again).")
  # sh -c ignores the arguments that follow (the script and its flags).
  set(LOOM_PYTHON_COMMAND sh -c "echo 'skipped: ${_loom_python_why} (see cmake/LoomPython.cmake)' && exit 77")
endif()

# loom_test_uses_python(<target>): the test program gets LOOM_PYTHON, the interpreter's path as a
# string literal, "" when there is none.
function(loom_test_uses_python target)
  if(NOT TARGET ${target})
    return()
  endif()
  if(LOOM_PYTHON_FOUND)
    target_compile_definitions(${target} PRIVATE LOOM_PYTHON="${LOOM_PYTHON}")
  else()
    target_compile_definitions(${target} PRIVATE LOOM_PYTHON="")
  endif()
endfunction()
