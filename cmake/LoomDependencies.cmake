# Every dependency is a Debian package installed by scripts/install-deps.sh; nothing is
# downloaded at configure or build time.
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

# OpenBLAS, OpenMP flavour: it shares libgomp's thread pool with our own kernels.
find_path(LOOM_OPENBLAS_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/openblas NO_DEFAULT_PATH)
find_library(LOOM_OPENBLAS_LIB NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
if(NOT LOOM_OPENBLAS_INCLUDE OR NOT LOOM_OPENBLAS_LIB)
  message(FATAL_ERROR "OpenBLAS (OpenMP flavour) not found: run scripts/install-deps.sh "
                      "(it installs libopenblas-openmp-dev)")
endif()
add_library(loom_openblas INTERFACE)
target_include_directories(loom_openblas INTERFACE ${LOOM_OPENBLAS_INCLUDE})
target_link_libraries(loom_openblas INTERFACE ${LOOM_OPENBLAS_LIB})

# oneDNN (Debian's libdnnl-dev, OpenMP runtime: the same libgomp pool as OpenBLAS and our
# kernels): bf16 GEMMs on AMX / AVX512-BF16, chosen at run time (kernels/cpu/cpu_isa.h). Required,
# not optional: the kernel that runs is picked from CPUID when Loom starts, so every build must
# carry every path, or a binary built on one machine would silently lose the matrix units on the
# next.
find_package(dnnl CONFIG QUIET)
if(NOT dnnl_FOUND)
  message(FATAL_ERROR "oneDNN not found: run scripts/install-deps.sh (it installs libdnnl-dev)")
endif()

pkg_check_modules(YAMLCPP REQUIRED IMPORTED_TARGET yaml-cpp)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
# Hugging Face tokenizers: PCRE2 runs the pre-tokenizer regexes (Unicode properties, JIT), ICU
# normalizes (NFC) and case-maps for chat templates.
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)
find_package(nlohmann_json REQUIRED)

if(LOOM_WITH_MPI)
  find_package(MPI COMPONENTS C)
  if(NOT MPI_C_FOUND)
    message(FATAL_ERROR "MPI not found: run scripts/install-deps.sh or configure with -DLOOM_WITH_MPI=OFF")
  endif()
endif()

if(LOOM_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(${CMAKE_CURRENT_LIST_DIR}/LoomPython.cmake)  # the python3 with numpy some tests run
endif()
if(LOOM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
