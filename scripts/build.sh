#!/usr/bin/env bash
# Configures (once) and builds Loom into build/ with two jobs. Extra arguments are passed to
# `cmake --build` (e.g. --target test_core). Set LOOM_CMAKE_ARGS for extra configure flags, e.g.
# LOOM_CMAKE_ARGS="-DLOOM_SANITIZE=ON" BUILD_DIR=build-asan scripts/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-2}"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${LOOM_CMAKE_ARGS:-}
fi
# Serialise builds started from several shells: two cores cannot take two compilers each.
exec flock /tmp/loom-build.lock cmake --build "$BUILD_DIR" -j"$JOBS" "$@"
