#!/usr/bin/env bash
# Configures (once) and builds Loom into build/ with two jobs (JOBS=N for more). Extra arguments
# are passed to `cmake --build` (e.g. --target test_core). Set LOOM_CMAKE_ARGS for extra configure
# flags, e.g. LOOM_CMAKE_ARGS="-DLOOM_SANITIZE=ON" BUILD_DIR=build-asan scripts/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-2}"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${LOOM_CMAKE_ARGS:-}
fi
exec cmake --build "$BUILD_DIR" -j"$JOBS" "$@"
