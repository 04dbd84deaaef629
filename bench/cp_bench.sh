#!/usr/bin/env bash
# Context parallelism on this machine, with bench_cp (one micro-batch of a small Llama through
# dist::parallelize: forward, backward, FSDP's reductions; one thread per process):
#   for each sequence length of SEQS and cp of CPS: the held activation bytes per rank (against
#   one process's / cp), the step time of the slowest rank, the bytes the ring sent per rank
#   against the analytic ring volume, and each rank's attention work (visible (query, key) pairs
#   and blocks computed / skipped), with the load-balanced split and, at the largest cp, the
#   contiguous one. Then, at PACKED_SEQ on EOD-packed documents, each rank's attention work with
#   the per-sequence cut (before) and the per-document one (the load-balanced split's); and at
#   A2A_SEQ, Ulysses (blocking and context_parallel_async) and hybrid (u = 2): the all-to-all and
#   ring bytes per rank against their analytic volumes, and the step time. cp ranks beyond the core
#   count share cores: the step times are for the record, not a speed-up.
#   bench/cp_bench.sh
#   SEQS="1024 2048" CPS="1 2" bench/cp_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SEQS=${SEQS:-"1024 2048 4096"}
CPS=${CPS:-"1 2 4"}
STEPS=${STEPS:-2}
PACKED_SEQ=${PACKED_SEQ:-2048}
A2A_SEQ=${A2A_SEQ:-2048}
source scripts/find-python.sh
PY=$(loom_python)
scripts/build.sh --target bench_cp loom >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LOOM_NUM_THREADS=1 OMP_NUM_THREADS=1
FLAGS="--oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca mpi_yield_when_idle 1"
source bench/cpu_header.sh
print_cpu_header "1 thread per process"
echo "model: llama, 2 layers, hidden 256, 8 heads (4 KV heads), ffn 512, vocab 2048, batch 1, fp32"

bench() {  # processes, bench_cp arguments...: prints the RESULT json
  local np=$1; shift
  mpirun -np "$np" $FLAGS build/bench/bench_cp "$@" --steps "$STEPS" 2>/dev/null | grep '^RESULT ' | sed 's/^RESULT //'
}

largest_cp=$(echo $CPS | tr ' ' '\n' | sort -n | tail -1)
for seq in $SEQS; do
  one=""
  for cp in $CPS; do
    splits="balanced"
    [ "$cp" = "$largest_cp" ] && [ "$cp" != 1 ] && splits="balanced contiguous"
    for split in $splits; do
      extra=""; [ "$split" = contiguous ] && extra="--contiguous"
      line=$(bench "$cp" --seq "$seq" $extra)
      [ "$cp" = 1 ] && one=$line
      $PY - "$line" "$one" <<'PYEOF'
import json, sys
r = json.loads(sys.argv[1])
one = json.loads(sys.argv[2]) if sys.argv[2] else None
c = r["cp"]
held = r["held_activation_bytes"]
ratio = " (%.3f of one process; target <= 1/%d + 10%% = %.3f)" % (held / one["held_activation_bytes"], c, 1 / c + 0.1) if one and c > 1 else ""
print("seq %5d cp %d %-13s held activations %8.1f MiB%s, step %.2f s" % (r["seq"], c, r["split"], held / 2**20, ratio, r["step_s"]))
if c > 1:
    sent = [x["ring_bytes_sent"] for x in r["ranks"]]
    print("    ring bytes sent per rank %s, analytic %d (measured / analytic %.4f)" % (sent, r["ring_bytes_analytic"], max(sent) / r["ring_bytes_analytic"]))
    pairs = [x["visible_pairs"] for x in r["ranks"]]
    mean = sum(pairs) / len(pairs)
    print("    attention work per rank (visible pairs per layer) %s: max %.1f%% from the mean; blocks computed %s, skipped %s" % (
        pairs, 100 * max(abs(p - mean) for p in pairs) / mean, [x["blocks_computed"] for x in r["ranks"]],
        [x["blocks_skipped"] for x in r["ranks"]]))
PYEOF
    done
  done
done

multi_cps=$(echo $CPS | tr ' ' '\n' | awk '$1 > 1')
report() {  # RESULT json: attention work per rank, all-to-all and ring bytes against the analytic
  $PY - "$1" <<'PYEOF'
import json, sys
r = json.loads(sys.argv[1])
name = "%s%s" % (r["method"], " async" if r["async"] else "")
docs = " %d documents" % r["documents"] if r["packed"] else ""
print("seq %5d cp %d %-13s %-13s%s step %.2f s" % (r["seq"], r["cp"], name, r["split"], docs, r["step_s"]))
pairs = [x["visible_pairs"] for x in r["ranks"]]
if r["method"] != "ulysses":
    mean = sum(pairs) / len(pairs)
    print("    attention work per rank (visible pairs per layer) %s: max %.1f%% from the mean" % (
        pairs, 100 * max(abs(p - mean) for p in pairs) / mean))
for kind in ("all_to_all", "ring"):
    analytic = r[kind + "_bytes_analytic"]
    if analytic:
        sent = [x[kind + "_bytes_sent"] for x in r["ranks"]]
        print("    %s bytes sent per rank %s, analytic %d (measured / analytic %.4f)" % (
            kind.replace("_", "-"), sent, analytic, max(sent) / analytic))
PYEOF
}
for cp in $multi_cps; do
  for split in "--per-sequence" ""; do
    report "$(bench "$cp" --seq "$PACKED_SEQ" --packed $split)"
  done
done
for cp in $multi_cps; do
  for async in "" "--async"; do
    report "$(bench "$cp" --seq "$A2A_SEQ" --method ulysses $async)"
  done
  if [ "$cp" = 4 ]; then
    for async in "" "--async"; do
      report "$(bench "$cp" --seq "$A2A_SEQ" --method hybrid $async)"
    done
  fi
done
