#!/usr/bin/env bash
# The README demo (configs/demo/llama_demo.yaml, 300 steps on the Brown corpus) in fp32 compute
# and in bf16 compute (fp32 weights), one after the other: prints both final losses and their
# relative difference (the bf16 run should end within 1% of the fp32 one) with the CPU matrix
# path the bf16 products ran on. Fetches the demo data first (scripts/get-demo-data.sh).
#   bench/bf16_convergence.sh
#   STEPS=100 bench/bf16_convergence.sh     # shorter (the schedule stays the config's)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-300}
OUT=${OUT:-bench-data/bf16_convergence}
scripts/build.sh --target loom >/dev/null
scripts/get-demo-data.sh >/dev/null
source bench/cpu_header.sh
source scripts/find-python.sh
PY=$(loom_python)
print_cpu_header "1 process, loom train's default threads"
rm -rf "$OUT" && mkdir -p "$OUT"
for compute in float32 bfloat16; do
  build/apps/loom/loom train --config configs/demo/llama_demo.yaml --output "$OUT/$compute" \
    --set training.steps="$STEPS" --set checkpoint.enable_save=False --set model.compute_dtype="$compute" \
    > "$OUT/$compute.log" 2>&1 || { echo "error: the $compute run failed; see $OUT/$compute.log" >&2; exit 1; }
  grep '^done:' "$OUT/$compute.log" | sed "s/^/$compute: /"
done
$PY - "$OUT" <<'PYEOF'
import json, sys
last = {}
for c in ("float32", "bfloat16"):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{c}/metrics.jsonl")]
    last[c] = (rows[-1]["step"], rows[-1]["loss"], rows[-1].get("cpu_matrix_path", "-"))
(s32, l32, _), (s16, l16, path) = last["float32"], last["bfloat16"]
rel = (l16 - l32) / l32
print(f"final loss at step {s32}: fp32 {l32:.6f}, bf16 {l16:.6f} (matrix path {path}); "
      f"relative difference {rel * 100:+.3f}% (target within 1%: {'yes' if abs(rel) <= 0.01 else 'NO'})")
PYEOF
