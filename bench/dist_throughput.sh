#!/usr/bin/env bash
# Data-parallel scaling on this machine (target: 2 processes x 1 thread >= 1.8x the
# tokens/s of 1 process x 1 thread on size A), and the bytes each process sends per step against
# the analytic FSDP volume. Runs bench_dist alternately at 1 and 2 processes, ROUNDS times, and
# prints every RESULT and the ratio of the best runs (this machine is shared: compare in one run).
#   bench/dist_throughput.sh            # size A, 3 rounds, 8 timed steps
#   SIZE=b ROUNDS=1 STEPS=3 bench/dist_throughput.sh
#   COMPUTE=bfloat16 [PARAMS=bfloat16] bench/dist_throughput.sh   # bf16 compute (and parameters): the
#                                        # RESULT lines count all-gather and reduce-scatter bytes apart
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${SIZE:-a}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-8}
RESHARD=${RESHARD:-default}
COMPUTE=${COMPUTE:-float32}
PARAMS=${PARAMS:-float32}
scripts/build.sh --target bench_dist >/dev/null
source scripts/find-python.sh
PY=$(loom_python)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LOOM_NUM_THREADS=1 OMP_NUM_THREADS=1
FLAGS="--oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca mpi_yield_when_idle 1"
best1=0; best2=0
for round in $(seq 1 "$ROUNDS"); do
  for np in 1 2; do
    line=$(mpirun -np "$np" $FLAGS build/bench/bench_dist --size "$SIZE" --steps "$STEPS" --reshard "$RESHARD" \
           --compute-dtype "$COMPUTE" --params-dtype "$PARAMS" 2>/dev/null \
           | grep '^RESULT ' | sed 's/^RESULT //')
    echo "round $round: $line"
    tps=$(echo "$line" | $PY -c "import json,sys; print(json.load(sys.stdin)['tokens_per_s'])")
    if [ "$np" = 1 ]; then best1=$($PY -c "print(max($best1, $tps))"); else best2=$($PY -c "print(max($best2, $tps))"); fi
  done
done
$PY - "$best1" "$best2" <<'PYEOF'
import sys
one, two = float(sys.argv[1]), float(sys.argv[2])
print("best tokens/s: 1 process %.0f, 2 processes %.0f, speed-up %.2fx (target >= 1.8x)" % (one, two, two / one))
PYEOF
