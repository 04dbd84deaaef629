#!/usr/bin/env bash
# Peak device bytes and step time of a 12-layer model at seq 2048 under each memory policy of
# spec/memory_optimization.md, in one run. "activations" = peak minus the bytes that stay
# between steps (parameters, grads, optimizer state), i.e. what recompute and swap act on.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/find-python.sh
PY=$(loom_python)
THREADS=${THREADS:-2}
scripts/build.sh --target loom >/dev/null
mkdir -p bench-data
[ -f bench-data/random_a.bin ] || $PY bench/random_dataset.py bench-data/random_a 8192 2000000

run() {  # name, --set overrides...
  local name=$1; shift
  rm -rf "bench-data/mem_$name"
  build/apps/loom/loom train --config configs/bench/memory_12l.yaml --output "bench-data/mem_$name" \
      --threads "$THREADS" "$@" >/dev/null 2>&1 || { echo "$name: loom train failed"; return; }
  $PY - "$name" "bench-data/mem_$name/metrics.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2])]
last = rows[-1]
static = last["mem_current_bytes"]
peak = max(r["mem_peak_bytes"] for r in rows[1:])
t = sorted(r["step_time_s"] for r in rows[1:])[len(rows[1:]) // 2]
print(f"{sys.argv[1]:24s} peak {peak/2**20:8.1f} MiB   activations {(peak-static)/2**20:8.1f} MiB   step {t:6.2f} s")
PYEOF
}

run none
run select_mlp   --set recompute.mode=select --set "recompute.select_module={'.*mlp': ['0-11']}"
run full_all     --set recompute.mode=full --set "recompute.full_recompute_layer=['0-11']"
run full6_swap5  --set recompute.mode=full --set "recompute.full_recompute_layer=['0-5']" \
                 --set swap.enable=True --set "swap.layer_swap=[{layers: ['6-10']}]"
run swap_6      --set swap.enable=True --set "swap.layer_swap=[{layers: ['0-5']}]"
run swap_attn    --set swap.enable=True --set "swap.op_swap=[{op_name: '.*attention', layers: ['0-10']}]"
