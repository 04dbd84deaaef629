#!/usr/bin/env bash
# What saving costs the step that saves, on size B (1.5 GB of weights and AdamW state): the same
# run without saving, with synchronous saves and with async_save, in one go. The cost per save is
# (run time − run time without saves) / saves, reported against the median step time.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/find-python.sh
PY=$(loom_python)
STEPS=${STEPS:-5}
THREADS=${THREADS:-2}
scripts/build.sh --target loom >/dev/null
mkdir -p bench-data
[ -f bench-data/random_b.bin ] || $PY bench/random_dataset.py bench-data/random_b 32000 2000000

run() {  # name, extra --set...  → prints per-step "cost" = step time + gap to the next step
  local name=$1; shift
  rm -rf "bench-data/ckpt_$name"
  build/apps/loom/loom train --config configs/bench/size_b.yaml --output "bench-data/ckpt_$name" --threads "$THREADS" \
      --set "train_dataset.dataloader.config.data_path=[\"bench-data/random_b\"]" --set training.steps="$STEPS" "$@" \
      >/dev/null 2>&1
}

run none --set checkpoint.enable_save=False
run sync --set checkpoint.enable_save=True --set checkpoint.save_interleaved_steps=3 --set checkpoint.async_save=False
run async --set checkpoint.enable_save=True --set checkpoint.save_interleaved_steps=3 --set checkpoint.async_save=True
$PY - <<'PYEOF'
import json
def rows(name):
    return [json.loads(l) for l in open(f"bench-data/ckpt_{name}/metrics.jsonl")]
def cost(r, k):
    # wall time from the end of step k-1 to the end of step k: the step, plus whatever ran
    # between the steps (logging, checkpointing) before it
    return r[k]["time_s"] - r[k - 1]["time_s"]
base = rows("none")
normal = sorted(cost(base, k) for k in range(2, len(base)))
normal = normal[len(normal) // 2]
print(f"no saving: {normal:.2f} s per step (median, step 1 excluded)")
for name in ("sync", "async"):
    r = rows(name)
    # step 3 saves after it ends; its cost shows in the wall time of step 4 (the gap before it,
    # and for async the writer competing with it)
    extra = cost(r, 3) - normal
    print(f"{name:5s}: the step after a save costs {extra:+.2f} s = {100 * extra / normal:+.1f}% of a step")
PYEOF
