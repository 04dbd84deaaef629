#!/usr/bin/env bash
# Expert parallelism on this machine, with bench_ep (the trainer's step through dist::parallelize)
# on a small DeepSeek-V3 (size A's file turned into MLA + 8 routed experts, top-2 over 4 groups,
# a shared expert, expert bias, sequence balance loss, MTP):
#   1. tokens/s: 1 process against 2 processes at ep 1 (FSDP 2, every expert on both ranks) and
#      at ep 2 (FSDP 2 for the dense weights), one thread each, alternating, ROUNDS times, best of
#      each (the machine is shared: compare within one run);
#   2. all-to-all bytes sent per step on the ep group against the routed volume, forward and
#      backward, the per-rank load imbalance and the routed-expert state against one process's / ep,
#      at each of EP (4 processes on 2 cores: fine for bytes, not for speed).
#   3. inter-node bytes of alltoall against alltoall_deredundancy on the same routing: 4 ranks,
#      ep 4 in nodes of npu_nums_per_device 2, one run per dispatcher (each checks its own
#      measured bytes against its count), both counts printed from each run's routing.
#   bench/ep_throughput.sh                 # everything
#   PARTS="bytes" EP="2 4" bench/ep_throughput.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS=${PARTS:-"speed bytes deredundancy"}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-6}
EP=${EP:-"2 4"}
source scripts/find-python.sh
PY=$(loom_python)
scripts/build.sh --target bench_ep loom >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LOOM_NUM_THREADS=1 OMP_NUM_THREADS=1
FLAGS="--oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca mpi_yield_when_idle 1"
source bench/cpu_header.sh
print_cpu_header "1 thread per process"

deepseek_v3=(--config configs/bench/size_a.yaml --set train_dataset.dataloader.config.seq_length=128
             --set model.model_type=deepseek_v3 --set model.architectures=DeepseekV3ForCausalLM
             --set model.num_hidden_layers=3 --set model.vocab_size=2048
             --set model.q_lora_rank=64 --set model.kv_lora_rank=32 --set model.qk_nope_head_dim=32
             --set model.qk_rope_head_dim=16 --set model.v_head_dim=32 --set model.n_routed_experts=8
             --set model.num_experts_per_tok=2 --set model.n_group=4 --set model.topk_group=2
             --set model.n_shared_experts=1 --set model.moe_intermediate_size=128 --set model.first_k_dense_replace=1
             --set model.num_nextn_predict_layers=1 --set model.moe_router_load_balancing_type=seq_aux_loss
             --set model.moe_aux_loss_coeff=0.001 --set model.moe_router_enable_expert_bias=True
             --set model.routed_scaling_factor=2.5)

bench() {  # processes, global batch, bench_ep arguments...: prints the RESULT json
  local np=$1 gbs=$2; shift 2
  mpirun -np "$np" $FLAGS build/bench/bench_ep "${deepseek_v3[@]}" --set training.local_batch_size=$((gbs / np)) \
    --set training.global_batch_size="$gbs" "$@" 2>/dev/null | grep '^RESULT ' | sed 's/^RESULT //'
}
field() { $PY -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }

if [[ " $PARTS " == *" speed "* ]]; then
  declare -A best=([1x1]=0 [2x1]=0 [2x2]=0)  # processes x ep
  for round in $(seq 1 "$ROUNDS"); do
    for run in 1x1 2x1 2x2; do
      np=${run%x*} ep=${run#*x}
      line=$(bench "$np" 8 --ep "$ep" --steps "$STEPS" --warmup 1)
      echo "speed round $round, $np process(es), ep $ep: $line"
      best[$run]=$($PY -c "import json,sys; print(max(float(sys.argv[1]), json.loads(sys.argv[2])['tokens_per_s']))" \
                   "${best[$run]}" "$line")
    done
  done
  $PY -c "import sys; a, b, c = map(float, sys.argv[1:]); print('best tokens/s, small DeepSeek-V3: 1 process %.0f; 2 processes: FSDP 2 (ep 1) %.0f (%.2fx), ep 2 %.0f (%.2fx)' % (a, b, b / a, c, c / a))" \
    "${best[1x1]}" "${best[2x1]}" "${best[2x2]}"
fi

if [[ " $PARTS " == *" bytes "* ]]; then
  for ep in $EP; do
    line=$(bench "$ep" 8 --ep "$ep" --steps 1 --warmup 1)
    echo "bytes ep $ep: $line"
    $PY - "$line" <<'PYEOF'
import json, sys
r = json.loads(sys.argv[1])
s, c, q = r["ep_bytes_sent"], r["counted_bytes"], r["bytes_ratio"]
print("  ep %d (rank 0): sent forward %d B / counted %d B (ratio %.6f), backward %d B / %d B (ratio %.6f); "
      "%d rows to other ranks; rows per rank %s, load imbalance max/mean %.3f; routed-expert state %d B, "
      "one process's / ep %d B" % (r["ep"], s["forward"], c["forward"], q["forward"], s["backward"], c["backward"],
                                   q["backward"], r["remote_rows_sent"], r["rows_per_rank"], r["load_imbalance"],
                                   r["expert_state_bytes"], r["expert_state_target_bytes"]))
PYEOF
  done
fi

if [[ " $PARTS " == *" deredundancy "* ]]; then
  for dispatcher in alltoall alltoall_deredundancy; do
    line=$(bench 4 8 --ep 4 --steps 1 --warmup 1 --set parallelism.npu_nums_per_device=2 \
           --set parallelism.moe_token_dispatcher_type=$dispatcher)
    echo "inter-node, $dispatcher: $line"
    $PY - "$line" <<'PYEOF'
import json, sys
r = json.loads(sys.argv[1])
s, c, q, i = r["ep_bytes_sent"], r["counted_bytes"], r["bytes_ratio"], r["inter_node_bytes"]
a, d = i["alltoall"], i["alltoall_deredundancy"]
print("  %s, ep %d in nodes of %d (rank 0): sent forward %d B / counted %d B (ratio %.6f), backward %d B / %d B "
      "(ratio %.6f)" % (r["dispatcher"], r["ep"], r["ranks_per_node"], s["forward"], c["forward"], q["forward"],
                        s["backward"], c["backward"], q["backward"]))
print("  inter-node bytes of the ep group on this routing: alltoall forward %d backward %d; deredundancy forward %d "
      "(%.3fx) backward %d (%.3fx); %d (token, remote node) pairs with several experts"
      % (a["forward"], a["backward"], d["forward"], d["forward"] / a["forward"], d["backward"],
         d["backward"] / a["backward"], r["token_node_pairs_with_several_experts"]))
PYEOF
  done
fi
