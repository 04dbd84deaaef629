#!/usr/bin/env bash
# How much of an all-gather an asynchronous start hides behind a GEMM (bench/bench_comm_overlap.cpp):
# 2 ranks x 1 compute thread, never more ranks than cores. Prints the CPU, the MPI transport, and
# per size the blocking and asynchronous times and the overlap fraction.
#   bench/comm_overlap.sh                 # 4, 16 and 64 MB, 11 reps
#   MB=16 REPS=11 GEMM_ON=rank0 bench/comm_overlap.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${MB:-4,16,64}
REPS=${REPS:-11}
GEMM_ON=${GEMM_ON:-all}  # rank0: the other rank only communicates (a core left for the comm threads)
NP=2
if [ "$(nproc)" -lt "$NP" ]; then echo "comm_overlap.sh: needs at least $NP cores, this machine has $(nproc)"; exit 1; fi
scripts/build.sh --target bench_comm_overlap >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LOOM_NUM_THREADS=1 OMP_NUM_THREADS=1
mpirun -np "$NP" --oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
  --mca mpi_yield_when_idle 1 build/bench/bench_comm_overlap --mb "$MB" --reps "$REPS" --gemm-on "$GEMM_ON"
