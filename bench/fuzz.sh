#!/usr/bin/env bash
# bench/fuzz.sh [mutations=10000] [seed=1]: the parsers' mutation fuzzer (tests/fuzz) for long runs
# under ASan+UBSan. Builds build-asan/ once (LOOM_SANITIZE=ON), then runs every parser; prints each
# parser's counts and exits non-zero on the first input that crashed, hung (300 s per parser) or
# ended in anything but a loom::Error (the input is kept under $TMPDIR/loom_fuzz_failure_*).
set -euo pipefail
cd "$(dirname "$0")/.."
mutations="${1:-10000}"
seed="${2:-1}"
BUILD_DIR=build-asan LOOM_CMAKE_ARGS="-DLOOM_SANITIZE=ON" scripts/build.sh --target loom_fuzz
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export LOOM_NUM_THREADS=1 OMP_NUM_THREADS=1 LOOM_MEMORY_LIMIT=off
echo "loom_fuzz: $mutations mutations per parser, seed $seed, $(uname -m), build-asan (ASan+UBSan)"
for parser in yaml safetensors idx metadata common hf_config; do
  timeout 300 build-asan/tests/fuzz/loom_fuzz "$parser" "$mutations" "$seed"
done
