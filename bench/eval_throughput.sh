#!/usr/bin/env bash
# Evaluation next to training, sizes A and B (configs/bench/size_a.yaml, size_b.yaml) on random
# tokens with a validation share, side by side in one run:
#   train     `loom train` for STEPS steps: its median tokens/s after warm-up
#   eval      `loom eval` of the run's checkpoint, ITERS global batches of the same size: its
#             tokens/s (forward only) and the ratio to training's
#   in-loop   the same training with training.eval_interval=EVERY and eval_iters=ITERS: the time
#             it adds to the run against the time its evaluations report (no rebuild, no reload)
#   bench/eval_throughput.sh                          # sizes A and B, 2 threads
#   SIZES=a STEPS=30 EVERY=10 ITERS=10 THREADS=1 bench/eval_throughput.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"a b"}
THREADS=${THREADS:-2}
ITERS=${ITERS:-10}
source scripts/find-python.sh
PY=$(loom_python)
scripts/build.sh --target loom >/dev/null
source bench/cpu_header.sh
print_cpu_header "$THREADS threads"
LOOM=build/apps/loom/loom
mkdir -p bench-data

median_train() {  # metrics.jsonl, warm-up steps to skip -> tokens/s of the median step
  $PY - "$1" "$2" <<'PYEOF'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "eval" not in r][int(sys.argv[2]):]
rows.sort(key=lambda r: r["step_time_s"])
print(rows[len(rows) // 2]["tokens_per_s"])
PYEOF
}
step_seconds() {  # metrics.jsonl -> the training steps' time, summed
  $PY -c "import json,sys; print(sum(r['step_time_s'] for r in map(json.loads, open(sys.argv[1])) if 'eval' not in r))" "$1"
}
eval_seconds() {  # metrics.jsonl -> the evaluations' own time, summed
  $PY -c "import json,sys; print(sum(r['eval_time_s'] for r in map(json.loads, open(sys.argv[1])) if 'eval' in r))" "$1"
}

printf "%-5s %10s %12s %8s %6s %6s %8s %8s %10s %10s\n" size train_tok/s eval_tok/s ratio steps evals eval_s added_s \
  steps_s steps_s_in
for size in $SIZES; do
  upper=$(echo "$size" | tr a-z A-Z)
  if [ "$size" = a ]; then vocab=8192; warm=3; steps=${STEPS:-30}; every=${EVERY:-10};
  else vocab=32000; warm=2; steps=${STEPS:-10}; every=${EVERY:-5}; fi
  [ -f "bench-data/random_$size.bin" ] || $PY bench/random_dataset.py "bench-data/random_$size" "$vocab" 2000000
  common=(--threads "$THREADS" --set "training.steps=$steps"
          --set "train_dataset.dataloader.config.data_path=[\"bench-data/random_$size\"]"
          --set "train_dataset.dataloader.config.split=\"9, 1, 0\"")
  rm -rf "bench-data/eval_$size" "bench-data/eval_${size}_inloop"
  start=$(date +%s.%N)
  $LOOM train --config "configs/bench/size_$size.yaml" --output "bench-data/eval_$size" "${common[@]}" \
    --set checkpoint.enable_save=True --set "checkpoint.save_path=bench-data/eval_$size/ck" >/dev/null
  plain_s=$($PY -c "print($(date +%s.%N) - $start)")
  train_tps=$(median_train "bench-data/eval_$size/metrics.jsonl" "$warm")
  eval_tps=$($LOOM eval --config "configs/bench/size_$size.yaml" --load "bench-data/eval_$size/ck" --threads "$THREADS" \
             --iters "$ITERS" --json "${common[@]:2}" | $PY -c "import json,sys; print(json.load(sys.stdin)['tokens_per_s'])")
  start=$(date +%s.%N)
  $LOOM train --config "configs/bench/size_$size.yaml" --output "bench-data/eval_${size}_inloop" "${common[@]}" \
    --set checkpoint.enable_save=True --set "checkpoint.save_path=bench-data/eval_${size}_inloop/ck" \
    --set "training.eval_interval=$every" --set "training.eval_iters=$ITERS" >/dev/null
  inloop_s=$($PY -c "print($(date +%s.%N) - $start)")
  evals=$($PY -c "import json,sys; print(sum(1 for r in map(json.loads, open(sys.argv[1])) if 'eval' in r))" \
          "bench-data/eval_${size}_inloop/metrics.jsonl")
  printf "%-5s %10.0f %12.0f %7.2fx %6s %6s %8.2f %8.2f %10.2f %10.2f\n" "$upper" "$train_tps" "$eval_tps" \
    "$($PY -c "print($eval_tps / $train_tps)")" "$steps" "$evals" \
    "$(eval_seconds "bench-data/eval_${size}_inloop/metrics.jsonl")" "$($PY -c "print($inloop_s - $plain_s)")" \
    "$(step_seconds "bench-data/eval_$size/metrics.jsonl")" "$(step_seconds "bench-data/eval_${size}_inloop/metrics.jsonl")"
done
echo "added_s: the in-loop run's wall time minus the plain run's (both save their last step); eval_s: what its"
echo "evaluations report for themselves; steps_s, steps_s_in: the training steps' own time in the plain and in-loop runs"
