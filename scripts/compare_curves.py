#!/usr/bin/python3
"""Bit-for-bit comparison of two `loom` binaries: the same 20-step runs of every architecture, on one
process and under FSDP / HSDP, must log identical losses and grad norms. Use it around a refactor
that must not change results: build the old commit in a second build directory, then

    scripts/compare_curves.py --old ../old/build/apps/loom/loom --new build/apps/loom/loom

Kernels round differently on other CPUs, so never compare against curves recorded elsewhere: run
both binaries here, side by side. Exits 1 on the first difference (printing both values).

  --cases llama,qwen3,...   subset of the architectures (default: all)
  --layouts 1,fsdp2,hsdp    subset of the layouts (default: all three)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "dist"))
import parity_test  # noqa: E402  (the data writer, the config template, the mpirun flags)

LLAMA_BF16 = parity_test.LLAMA.replace("params_dtype: float32", "params_dtype: bfloat16").replace(
    "compute_dtype: float32", "compute_dtype: bfloat16")

CASES = {"llama": parity_test.LLAMA, "llama_bf16": LLAMA_BF16, "qwen3": parity_test.QWEN3_TP,
         "qwen3_moe": parity_test.QWEN3_MOE_TP, "deepseek_v3": parity_test.DEEPSEEK}
LAYOUTS = {"1": (1, -1), "fsdp2": (2, -1), "hsdp": (4, 2)}


def run(binary, mpirun, work, name, model, world, shard):
    config, run_dir = parity_test.write_config(work, name, shard=shard, model=model)
    cmd = [binary, "train", "--config", config, "--output", run_dir]
    if world > 1:
        cmd = [mpirun, "-np", str(world)] + parity_test.MPI_FLAGS + cmd
    p = subprocess.run(cmd, env=parity_test.ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    if p.returncode != 0:
        print(p.stdout)
        raise SystemExit("FAIL: %s exited with %d" % (name, p.returncode))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, f)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="loom-compare-")
    try:
        parity_test.write_data(os.path.join(work, "data"))
        for case in args.cases.split(","):
            for layout in args.layouts.split(","):
                world, shard = LAYOUTS[layout]
                name = "%s_%s" % (case, layout)
                old = run(args.old, args.mpirun, work, name + "_old", CASES[case], world, shard)
                new = run(args.new, args.mpirun, work, name + "_new", CASES[case], world, shard)
                if old != new:
                    for a, b in zip(old, new):
                        if a != b:
                            raise SystemExit("FAIL: %s step %d: old loss %.17g grad norm %.17g, new %.17g %.17g" %
                                             (name, a[0], a[1], a[2], b[1], b[2]))
                    raise SystemExit("FAIL: %s: %d steps old, %d new" % (name, len(old), len(new)))
                print("%-22s %d steps bit-identical (last loss %.17g)" % (name, len(new), new[-1][1]))
        print("PASS")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
