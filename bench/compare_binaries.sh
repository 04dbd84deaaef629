#!/usr/bin/env bash
# Throughput of two `loom` binaries side by side on sizes A and B (configs/bench), alternating
# old/new ROUNDS times in one run, so a refactor can show it costs nothing. Prints each run's
# median tokens/s after warm-up, the median over the rounds and new/old. Build the old commit in a
# second build directory first, e.g.
#   git worktree add ../old <commit> && (cd ../old && scripts/build.sh --target loom)
#   bench/compare_binaries.sh ../old/build/apps/loom/loom build/apps/loom/loom
# SIZES="a b" ROUNDS=3 THREADS=2 by default. Compare only figures taken in one run.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/compare_binaries.sh OLD_LOOM NEW_LOOM}
NEW=${2:?usage: bench/compare_binaries.sh OLD_LOOM NEW_LOOM}
SIZES=${SIZES:-"a b"}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
source scripts/find-python.sh
PY=$(loom_python)
mkdir -p bench-data
source bench/cpu_header.sh
LOOM_BIN=$NEW print_cpu_header "$THREADS threads"

median_tps() {  # metrics.jsonl, warm-up steps to skip -> median tokens/s
  $PY - "$1" "$2" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]
rows.sort(key=lambda r: r["step_time_s"])
print(rows[len(rows) // 2]["tokens_per_s"])
PYEOF
}

printf "%-5s %-4s %5s %12s\n" size bin round tokens/s
for size in $SIZES; do
  if [ "$size" = a ]; then vocab=8192; warm=3; else vocab=32000; warm=2; fi
  [ -f "bench-data/random_$size.bin" ] || $PY bench/random_dataset.py "bench-data/random_$size" "$vocab" 2000000
  declare -a old_runs=() new_runs=()
  for round in $(seq 1 "$ROUNDS"); do
    for which in old new; do
      bin=$OLD; [ "$which" = new ] && bin=$NEW
      run="bench-data/compare_${size}_$which"
      rm -rf "$run"
      "$bin" train --config "configs/bench/size_$size.yaml" --output "$run" --threads "$THREADS" \
        --set "train_dataset.dataloader.config.data_path=[\"bench-data/random_$size\"]" >/dev/null 2>&1
      tps=$(median_tps "$run/metrics.jsonl" "$warm")
      printf "%-5s %-4s %5s %12.0f\n" "$size" "$which" "$round" "$tps"
      if [ "$which" = old ]; then old_runs+=("$tps"); else new_runs+=("$tps"); fi
    done
  done
  $PY -c "
import statistics, sys
old = [float(x) for x in '${old_runs[*]}'.split()]; new = [float(x) for x in '${new_runs[*]}'.split()]
o, n = statistics.median(old), statistics.median(new)
print('size %s: median old %.0f, new %.0f tokens/s; new/old = %.3f' % ('$size'.upper(), o, n, n / o))"
  unset old_runs new_runs
done
