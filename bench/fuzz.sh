#!/usr/bin/env bash
# bench/fuzz.sh [mutations=10000] [seed=1]: the parsers' mutation fuzzer (tests/fuzz) for long runs
# under ASan+UBSan. Builds loom_fuzz in build/ (the driver and the parsers' sources compiled with
# -fsanitize=address,undefined, tests/fuzz/CMakeLists.txt), then runs every parser; prints each
# parser's counts and exits non-zero on the first input that crashed, hung (600 s per parser),
# raised a sanitizer report or ended in anything but a loom::Error (the input is kept under
# $TMPDIR/loom_fuzz_failure_*).
set -euo pipefail
cd "$(dirname "$0")/.."
mutations="${1:-10000}"
seed="${2:-1}"
scripts/build.sh --target loom_fuzz
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export LOOM_NUM_THREADS=1 OMP_NUM_THREADS=1 LOOM_MEMORY_LIMIT=off
echo "loom_fuzz: $mutations mutations per parser, seed $seed, $(uname -m), ASan+UBSan (build/tests/fuzz/loom_fuzz)"
for parser in yaml safetensors idx metadata common hf_config; do
  timeout 600 build/tests/fuzz/loom_fuzz "$parser" "$mutations" "$seed"
done
