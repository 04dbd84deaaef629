#!/usr/bin/env bash
# `loom plan --sweep` at large world sizes: the time to enumerate, resolve (the configuration's
# own rules) and plan every layout, printed next to the candidate count. The target is under
# 10 s for N = 4096; it is a figure to read, not a test.
#   bench/plan_sweep.sh                 # N = 4096 and 16384, Llama 3 405B and DeepSeek-V3 shapes
#   SIZES="1024 4096" bench/plan_sweep.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"4096 16384"}
scripts/build.sh --target loom >/dev/null
source bench/cpu_header.sh
print_cpu_header "one process"
L=build/apps/loom/loom
for n in $SIZES; do
  # Llama 3 405B (its stage list holds for pp 16; other degrees place the layers automatically).
  $L plan --config configs/plan/llama3_405b_8k.yaml --world-size "$n" --sweep --device h100 \
    --set training.global_batch_size="$n" 2>&1 >/dev/null | sed "s/^/llama3-405b N=$n: /"
  # DeepSeek-V3 (61 layers: pipeline degrees 1 and 61), every expert-parallel degree of 256 experts.
  $L plan --config configs/plan/deepseek_v3_671b.yaml --world-size "$n" --sweep --device configs/plan/h800.yaml \
    --set training.global_batch_size="$n" 2>&1 >/dev/null | sed "s/^/deepseek-v3 N=$n: /"
done
