#!/usr/bin/env bash
# recompute.exclude_op at work (memory_optimization.md "Key Behaviors of exclude_op"): size A
# trained by 2 processes at tp 2 (Llama) and at ep 2 (size A as a DeepSeek-V3 MoE with 8 routed
# experts), every layer fully recomputed, with and without
#   exclude_op: [AllGather, ReduceScatter, AllToAll, AllReduce]
# and, for reference, without recompute. From each run's --rank-report (rank 0, last step):
#   backward   the layers' collectives issued in backward (their duals, and the forwards a
#              recompute re-issues) and the bytes they sent
#   activations  the step's peak minus the bytes live when it began
# Kept operators are not re-issued: with everything kept, backward equals no recompute's, and the
# activation peak rises by the kept outputs' bytes.
#   bench/exclude_op_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-3}
source scripts/find-python.sh
PY=$(loom_python)
scripts/build.sh --target loom >/dev/null
mkdir -p bench-data
[ -f bench-data/random_a.bin ] || $PY bench/random_dataset.py bench-data/random_a 8192 2000000
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LOOM_NUM_THREADS=1 OMP_NUM_THREADS=1
FLAGS="--oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca mpi_yield_when_idle 1"
source bench/cpu_header.sh
print_cpu_header "2 processes, 1 thread each"

tp=(--set parallelism.tensor_parallel=2)
ep=(--set parallelism.expert_parallel=2 --set training.global_batch_size=16
    --set model.model_type=deepseek_v3 --set model.architectures=DeepseekV3ForCausalLM
    --set model.q_lora_rank=64 --set model.kv_lora_rank=32 --set model.qk_nope_head_dim=32
    --set model.qk_rope_head_dim=16 --set model.v_head_dim=32 --set model.n_routed_experts=8
    --set model.num_experts_per_tok=2 --set model.n_group=4 --set model.topk_group=2
    --set model.n_shared_experts=1 --set model.moe_intermediate_size=128 --set model.first_k_dense_replace=1)
full=(--set recompute.mode=full --set "recompute.full_recompute_layer=['0-3']")
kept=(--set "recompute.exclude_op=['AllGather', 'ReduceScatter', 'AllToAll', 'AllReduce']")

run() {  # layout name, policy name, --set overrides...
  local dir="bench-data/exclude_op_$1_$2"; shift 2
  rm -rf "$dir"
  mpirun -np 2 $FLAGS build/apps/loom/loom train --config configs/bench/size_a.yaml --output "$dir" \
      --set training.steps=$STEPS --rank-report "$@" >"$dir.log" 2>&1 || { echo "loom train failed: $dir.log"; exit 1; }
}

for layout in tp ep; do
  declare -n extra=$layout
  run "$layout" none "${extra[@]}"
  run "$layout" full "${extra[@]}" "${full[@]}"
  run "$layout" full_exclude "${extra[@]}" "${full[@]}" "${kept[@]}"
  $PY - "$layout" <<'PYEOF'
import json, sys
layout = sys.argv[1]
rows = {}
for policy in ("none", "full", "full_exclude"):
    r = json.load(open(f"bench-data/exclude_op_{layout}_{policy}/rank_report/rank-0.json"))
    c = r["layer_collectives_per_step"]
    rows[policy] = (c["forward"]["calls"], c["forward"]["bytes_sent"], c["backward"]["calls"],
                    c["backward"]["bytes_sent"], r["mem_peak_bytes"] - r["mem_start_bytes"])
print(f"{layout} 2: {'policy':14s} {'fwd calls':>9s} {'fwd KiB':>9s} {'bwd calls':>9s} {'bwd KiB':>9s} "
      f"{'activations MiB':>16s}")
for policy, (fc, fb, bc, bb, act) in rows.items():
    print(f"      {policy:14s} {fc:9d} {fb/1024:9.1f} {bc:9d} {bb/1024:9.1f} {act/2**20:16.2f}")
f, e, n = rows["full"], rows["full_exclude"], rows["none"]
print(f"      exclude_op: backward {f[2] - e[2]} calls and {(f[3] - e[3])/1024:.1f} KiB fewer than full recompute "
      f"(no recompute: {f[2] - n[2]} calls, {(f[3] - n[3])/1024:.1f} KiB); activations +{(e[4] - f[4])/2**20:.2f} MiB")
PYEOF
done
