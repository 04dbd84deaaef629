#!/usr/bin/env bash
# Tensor parallelism on this machine, with bench_tp (the trainer's step through dist::parallelize):
#   1. tokens/s of size A: 1 process against 2 processes at tp 2, one thread each, alternating,
#      ROUNDS times, best of each (the machine is shared: compare within one run);
#   2. bytes sent per step on the tp group against the counted volume (bench/tp_volume.h), for a
#      small configuration of each architecture at each of ARCH_TP;
#   3. size B memory at tp 1, 2 and 4 (4 processes on 2 cores: fine for memory, not for speed),
#      with recompute_comm of '.*\.all_gather' on every layer at tp > 1 (and tp 2 without it):
#      per-rank parameter + grad + optimizer bytes against one process's / tp plus the replicated
#      parameters, and the activation peak against one process's.
#   bench/tp_throughput.sh                      # everything
#   PARTS="bytes" ARCH_TP="2 4" bench/tp_throughput.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS=${PARTS:-"speed bytes memory"}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-6}
ARCH_TP=${ARCH_TP:-2}
source scripts/find-python.sh
PY=$(loom_python)
scripts/build.sh --target bench_tp loom >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LOOM_NUM_THREADS=1 OMP_NUM_THREADS=1
FLAGS="--oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca mpi_yield_when_idle 1"
source bench/cpu_header.sh
print_cpu_header "1 thread per process"

bench() {  # processes, bench_tp arguments...: prints the RESULT json
  local np=$1; shift
  mpirun -np "$np" $FLAGS build/bench/bench_tp "$@" 2>/dev/null | grep '^RESULT ' | sed 's/^RESULT //'
}
field() { $PY -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }

if [[ " $PARTS " == *" speed "* ]]; then
  best1=0; best2=0
  for round in $(seq 1 "$ROUNDS"); do
    for np in 1 2; do
      line=$(bench "$np" --config configs/bench/size_a.yaml --tp "$np" --steps "$STEPS" --warmup 1)
      echo "speed round $round, $np process(es): $line"
      tps=$(field "$line" "['tokens_per_s']")
      if [ "$np" = 1 ]; then best1=$($PY -c "print(max($best1, $tps))"); else best2=$($PY -c "print(max($best2, $tps))"); fi
    done
  done
  $PY -c "import sys; a, b = map(float, sys.argv[1:]); print('best tokens/s, size A: 1 process %.0f, 2 processes at tp 2 %.0f: %.2fx' % (a, b, b / a))" "$best1" "$best2"
fi

if [[ " $PARTS " == *" bytes "* ]]; then
  # Size A's file made small (2 layers, d 128, seq 64, batch 2) and turned into each architecture.
  small=(--config configs/bench/size_a.yaml --set training.local_batch_size=2 --set training.global_batch_size=2
         --set train_dataset.dataloader.config.seq_length=64 --set model.num_hidden_layers=2
         --set model.hidden_size=128 --set model.intermediate_size=256 --set model.vocab_size=1024)
  llama=(--set model.attention_bias=True)
  qwen3=(--set model.model_type=qwen3 --set model.architectures=Qwen3ForCausalLM --set model.head_dim=32
         --set model.tie_word_embeddings=True)
  qwen3_moe=(--set model.model_type=qwen3_moe --set model.architectures=Qwen3MoeForCausalLM --set model.head_dim=32
             --set model.num_experts=4 --set model.num_experts_per_tok=2 --set model.moe_intermediate_size=64
             --set model.router_aux_loss_coef=0.01)
  deepseek_v3=(--set model.model_type=deepseek_v3 --set model.architectures=DeepseekV3ForCausalLM
               --set model.q_lora_rank=64 --set model.kv_lora_rank=32 --set model.qk_nope_head_dim=32
               --set model.qk_rope_head_dim=16 --set model.v_head_dim=32 --set model.n_routed_experts=4
               --set model.num_experts_per_tok=2 --set model.n_group=2 --set model.topk_group=1
               --set model.n_shared_experts=1 --set model.moe_intermediate_size=64 --set model.first_k_dense_replace=1
               --set model.num_nextn_predict_layers=1 --set model.moe_router_load_balancing_type=seq_aux_loss
               --set model.moe_aux_loss_coeff=0.001 --set model.moe_router_enable_expert_bias=True
               --set model.routed_scaling_factor=2.5)
  for tp in $ARCH_TP; do
    for arch in llama qwen3 qwen3_moe deepseek_v3; do
      declare -n extra=$arch
      line=$(bench "$tp" "${small[@]}" "${extra[@]}" --tp "$tp" --steps 2 --warmup 1)
      echo "bytes $arch tp $tp: $line"
      $PY - "$line" "$arch" <<'PYEOF'
import json, sys
r = json.loads(sys.argv[1])
kinds = ["sequence", "latent", "vocabulary", "grads", "moe", "scalars"]
by = {k: 0 for k in kinds}
for s in r["counted_sites"]:
    if s["group"] == "tp": by[s["kind"]] += s["forward_bytes"] + s["backward_bytes"]
kv = r["counted_bytes_per_step"]["tp_kv_not_in_stats"]
print("  %-12s tp %d: sent %d B, counted %d B, ratio %.6f (by kind: %s)%s" % (
    sys.argv[2], r["tp"], r["bytes_sent_per_step"]["tp"], r["counted_bytes_per_step"]["tp"], r["bytes_ratio"],
    ", ".join("%s %d" % (k, by[k]) for k in kinds if by[k]),
    "; +%d B counted on the KV-sharing sub-group, which no CommStats sees" % kv if kv else ""))
PYEOF
      unset -n extra
    done
  done
fi

if [[ " $PARTS " == *" memory "* ]]; then
  comm=(--set recompute_comm.enable=True --set "recompute_comm.select_module={'.*\\.all_gather': ['0-11']}")
  one=$(bench 1 --config configs/bench/size_b.yaml --steps 1 --warmup 1)
  echo "memory size B tp 1: $one"
  runs=("$one")
  for tp in 2 4; do
    line=$(bench "$tp" --config configs/bench/size_b.yaml --tp "$tp" "${comm[@]}" --steps 1 --warmup 1)
    echo "memory size B tp $tp, recompute_comm all_gather: $line"
    runs+=("$line")
  done
  line=$(bench 2 --config configs/bench/size_b.yaml --tp 2 --steps 1 --warmup 1)
  echo "memory size B tp 2, no recompute: $line"
  runs+=("$line")
  $PY - "${runs[@]}" <<'PYEOF'
import json, sys
rs = [json.loads(a) for a in sys.argv[1:]]
one = rs[0]
MiB = 2.0 ** 20
print("size B per rank:  tp  recompute_comm   state MiB (target)   replicated MiB   activation peak MiB (x one process)   bytes ratio")
for r in rs:
    s = r["state_bytes"]["total"]
    print("                  %d   %-14s %8.1f (%8.1f)   %10.2f        %8.1f (%.3f)                        %.6f" % (
        r["tp"], "all_gather" if r["recompute_comm_all_gathers"] else "-", s / MiB, r["state_target_bytes"] / MiB,
        r["replicated_state_bytes"] / MiB, r["activation_peak_bytes"] / MiB,
        r["activation_peak_bytes"] / one["activation_peak_bytes"], r["bytes_ratio"]))
PYEOF
fi
