#!/usr/bin/env bash
# Pipeline parallelism on this machine, with bench_pipeline (the trainer's step through
# dist::parallelize and the pipeline schedule) on size A (4 layers, d 256, seq 256) with
# local_batch_size 1 and global_batch_size 8, so m = 8 micro-batches per step:
#   1 process (the plain schedule), then 2 processes (ranks <= cores) at pp 2 with v = 1 (auto:
#   2 + 2 layers), v = 1 with the uneven list '0' | '1-3', v = 2 (auto: 1 layer per chunk), and
#   v = 1 and 2 with pipeline_parallel_overlap_p2p, GPipe. For each: tokens/s, each rank's measured
#   idle time per step against the replayed schedule's (compute only, and with the measured
#   transfer, per-action bookkeeping and tail costs), rank 0's activation peak against the
#   in-flight bound, each rank's parameter + grad + optimizer bytes. Then, at 4 processes
#   (oversubscribed on 2 cores: bytes, not speed), pp 2 x fsdp 2's grad-reduce bytes per step, and
#   a 4-layer DeepSeek-V3 (MoE) at pp 2 x ep 2 with pipeline_parallel_overlap_b_f off and on.
#   bench/pipeline_throughput.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-6}
source scripts/find-python.sh
PY=$(loom_python)
scripts/build.sh --target bench_pipeline loom >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LOOM_NUM_THREADS=1 OMP_NUM_THREADS=1
FLAGS="--oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca mpi_yield_when_idle 1"
source bench/cpu_header.sh
print_cpu_header "1 thread per process"
BASE=(--config configs/bench/size_a.yaml --set training.local_batch_size=1 --set training.global_batch_size=8
      --steps "$STEPS" --warmup 1)
bench() {  # processes, name, bench_pipeline arguments...: prints the summary
  local np=$1 name=$2; shift 2
  mpirun -np "$np" $FLAGS build/bench/bench_pipeline "${BASE[@]}" "$@" 2>/dev/null | grep '^RESULT ' |
    sed 's/^RESULT //' | $PY -c '
import json, sys
name = sys.argv[1]
r = json.loads(sys.stdin.read())
print("%-22s %d process(es), m %d: %.0f tokens/s, step %.3f s, state bytes per rank %s (embedding+head %s)" % (
    name, r["processes"], r["micro_batches"], r["tokens_per_s"], r["median_step_s"], r["state_bytes"],
    r["embedding_head_bytes"]))
if r["grad_reduce_bytes_per_step"] is not None:
    print("    rank 0 FSDP grad-reduce bytes per step: %d" % r["grad_reduce_bytes_per_step"])
p = r["pipeline"]
pct = lambda got, want: 100 * (got - want) / want if want else 0
if p:
    print("    transfer %.2f ms per activation; per-action bookkeeping %s ms; tail %s ms" % (
        1e3 * p["transfer_s"], [round(1e3 * x, 2) for x in p["action_overhead_s"]],
        [round(1e3 * x, 1) for x in p["tail_s"]]))
    for rank, (got, want, costed) in enumerate(zip(p["idle_s"], p["predicted_idle_s"], p["predicted_idle_with_costs_s"])):
        print("    rank %d idle %.4f s per step; replayed: compute only %.4f s (%+.0f%%), with costs %.4f s (%+.0f%%)" % (
            rank, got, want, pct(got, want), costed, pct(got, costed)))
    print("    chunk forward s %s, backward s %s" % (
        [[round(x, 4) for x in c] for c in p["chunk_forward_s"]], [[round(x, 4) for x in c] for c in p["chunk_backward_s"]]))
    print("    rank 0 activations in flight at most %.2f MiB; in-flight bound %d chunk micro-batches x %.2f MiB = %.2f MiB; "
          "all m*v: %.2f MiB; allocator peak above the step end %.2f MiB (with the backward transients)" % (
        p["in_flight_peak_bytes"] / 2**20, p["in_flight_bound"], p["chunk_activation_bytes"] / 2**20,
        p["in_flight_bound_bytes"] / 2**20, p["all_micro_batches_bytes"] / 2**20, r["activation_peak_bytes"] / 2**20))
else:
    print("    activation peak %.2f MiB" % (r["activation_peak_bytes"] / 2**20))
' "$name"
}
bench 1 one_process
bench 2 pp2_v1_auto --set parallelism.pipeline_parallel=2
bench 2 pp2_v1_uneven --set parallelism.pipeline_parallel=2 --set "parallelism.pipeline_parallel_layers_per_stage=['0', '1-3']"
bench 2 pp2_v2_auto --set parallelism.pipeline_parallel=2 --set parallelism.pipeline_parallel_interleave_num=2
bench 2 pp2_v1_overlap_p2p --set parallelism.pipeline_parallel=2 --set parallelism.pipeline_parallel_overlap_p2p=True
bench 2 pp2_v2_overlap_p2p --set parallelism.pipeline_parallel=2 --set parallelism.pipeline_parallel_interleave_num=2 \
  --set parallelism.pipeline_parallel_overlap_p2p=True
bench 2 pp2_gpipe --set parallelism.pipeline_parallel=2 --set parallelism.pipeline_parallel_schedule=gpipe
bench 4 pp2_fsdp2 --set parallelism.pipeline_parallel=2 --set training.global_batch_size=16
MOE=(--set model.model_type=deepseek_v3 --set model.architectures=DeepseekV3ForCausalLM --set model.vocab_size=2048
     --set model.q_lora_rank=64 --set model.kv_lora_rank=32 --set model.qk_nope_head_dim=32 --set model.qk_rope_head_dim=16
     --set model.v_head_dim=32 --set model.n_routed_experts=8 --set model.num_experts_per_tok=2 --set model.n_group=4
     --set model.topk_group=2 --set model.n_shared_experts=1 --set model.moe_intermediate_size=128
     --set model.first_k_dense_replace=1 --set model.routed_scaling_factor=2.5 --set train_dataset.dataloader.config.seq_length=128
     --set parallelism.pipeline_parallel=2 --set parallelism.expert_parallel=2 --set training.global_batch_size=16)
bench 4 moe_pp2_ep2 "${MOE[@]}"
bench 4 moe_pp2_ep2_overlap_b_f "${MOE[@]}" --set parallelism.pipeline_parallel_overlap_b_f=True
