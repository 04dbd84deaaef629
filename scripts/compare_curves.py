#!/usr/bin/env python3
"""Bit-for-bit comparison of two `loom` binaries: the same 20-step runs of every architecture, on one
process and under FSDP 2, HSDP 2x2, TP 2, CP 2, PP 2 and (MoE models) EP 2, must log identical losses
and grad norms. Use it around a refactor that must not change results: build the old commit in a
second build directory, then

    scripts/compare_curves.py --old ../old/build/apps/loom/loom --new build/apps/loom/loom

It needs numpy; when the first python3 on PATH lacks it, name one that has it:

    "$(source scripts/find-python.sh && loom_python)" scripts/compare_curves.py --old ... --new ...

Kernels round differently on other CPUs, so never compare against curves recorded elsewhere: run
both binaries here, side by side. Exits 1 on the first difference (printing both values).

  --cases llama,qwen3,...   subset of the architectures (default: all)
  --layouts 1,fsdp2,hsdp,tp2,cp2,pp2,ep2   subset of the layouts (default: all; ep2 runs on MoE
                            models only)
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
MOE = ("qwen3_moe", "deepseek_v3")


def pipeline_halves(model):
    """pp 2 over the model's layers, the first ceil(L/2) on stage 0 (3 layers: 0-1 | 2)."""
    layers = int(model.split("num_hidden_layers:")[1].split()[0])
    first = (layers - 1) // 2
    stages = ['"0"' if first == 0 else '"0-%d"' % first,
              '"%d"' % (first + 1) if first + 1 == layers - 1 else '"%d-%d"' % (first + 1, layers - 1)]
    return "\n  pipeline_parallel: 2\n  pipeline_parallel_layers_per_stage: [%s]" % ", ".join(stages)


def compressed_mask(model):
    """Context parallelism takes the causal mask in its compressed form."""
    return model + "  use_attn_mask_compression: True\n"


# name -> (processes, data_parallel_shard, parallelism extras of the model, the model as it runs)
SAME = lambda m: m  # noqa: E731
LAYOUTS = {"1": (1, -1, lambda m: "", SAME), "fsdp2": (2, -1, lambda m: "", SAME), "hsdp": (4, 2, lambda m: "", SAME),
           "tp2": (2, -1, lambda m: "\n  tensor_parallel: 2", SAME),
           "cp2": (2, -1, lambda m: "\n  context_parallel: 2", compressed_mask),
           "pp2": (2, -1, pipeline_halves, SAME), "ep2": (2, -1, lambda m: "\n  expert_parallel: 2", SAME)}


def run(binary, mpirun, work, name, model, world, shard, extra):
    config, run_dir = parity_test.write_config(work, name, shard=shard, model=model, parallel_extra=extra)
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
                if layout == "ep2" and case not in MOE:
                    continue
                world, shard, extra, as_run = LAYOUTS[layout]
                name = "%s_%s" % (case, layout)
                model = as_run(CASES[case])
                old = run(args.old, args.mpirun, work, name + "_old", model, world, shard, extra(model))
                new = run(args.new, args.mpirun, work, name + "_new", model, world, shard, extra(model))
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
