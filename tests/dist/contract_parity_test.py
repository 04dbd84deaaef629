#!/usr/bin/env python3
"""Parity under mpirun of the YAML fields whose effect spans ranks (parity_test.py's method: fp32,
training.deterministic, the same seed and data; one process is the reference):

  rampup      training.rampup_batch_size ramps the global batch from 4 by 4 to 8 over 16 samples:
              FSDP 2 (one micro-batch per rank, then two), pp 2 (1F1B over 2, then 4 micro-batches) and
              an MoE model (balance and MTP losses scaled by s / A) at FSDP 2 follow the one-process
              ramped curve (step 1 within 1e-6 relative, 20 steps within 1e-5), and every layout logs
              the ramp's global batch sizes.

  exclude_op  recompute.exclude_op [AllGather, ReduceScatter, AllToAll, AllReduce] under full
              recompute at tp 2 (Llama) and ep 2 (DeepSeek-V3 MoE): the loss curve of full recompute
              without it, bit for bit (and one process's, step 1 within 1e-6 relative, 20 steps
              within 1e-5), and --rank-report shows the layers' collectives in backward
              (calls and bytes) equal to those without any recompute: no kept operator is re-issued.

  monitoring  monitor.train_state and the MaxLogitsMonitor under FSDP 2, TP 2, PP 2 and EP 2: every
              parameter's local_norm and every layer's max_attention_logit equal the one-process
              values (step 1 within 1e-6 relative, 20 steps within 1e-4), local_loss/dp_<i> is each
              data-parallel rank's own loss (their mean the logged loss), device_norm/rank_<r> and
              device_loss/rank_<r> come from every rank (device_loss from those that form a loss).

usage: contract_parity_test.py --loom PATH --mpirun PATH --case rampup|exclude_op|monitoring [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import time

# The data writer, the config template, the model sections and the mpirun flags of the layout
# parity tests; the runs and comparisons below are this driver's own.
import parity_test as pt

RAMP = "  rampup_batch_size: [4, 4, 16]\n"


def train(args, work, name, world, parallel_extra="", model=None, sections="", edit_config=None, report=False):
    """`loom train` of the parity config at `world` processes: its metrics rows (steps only) and,
    with report, rank 0's --rank-report of the last step."""
    config, run_dir = pt.write_config(work, name, parallel_extra=parallel_extra, model=model, sections=sections)
    if edit_config:
        with open(config) as f:
            text = edit_config(f.read())
        with open(config, "w") as f:
            f.write(text)
    cmd = [args.loom, "train", "--config", config, "--output", run_dir] + (["--rank-report"] if report else [])
    if world > 1:
        cmd = [args.mpirun, "-np", str(world)] + pt.MPI_FLAGS + cmd
    t0 = time.time()
    p = subprocess.run(cmd, env=pt.ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    if p.returncode != 0:
        print(p.stdout)
        raise SystemExit("FAIL: %s exited with %d" % (name, p.returncode))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [row for row in map(json.loads, f) if "eval" not in row and "sample" not in row]
    print("%-28s %d process(es) %5.1fs  first loss %.9f  last %.9f" % (name, world, time.time() - t0, rows[0]["loss"],
                                                                         rows[-1]["loss"]))
    if not report:
        return rows
    with open(os.path.join(run_dir, "rank_report", "rank-0.json")) as f:
        return rows, json.load(f)["layer_collectives_per_step"]


def follows(name, got, ref):
    """A layout against one process: step 1's loss and grad norm within 1e-6 relative (the layout
    sums in another order), every step's loss within 1e-5 and grad norm within 1e-6 relative."""
    if len(got) != len(ref):
        raise SystemExit("FAIL: %s logged %d steps, one process %d" % (name, len(got), len(ref)))
    worst = max(abs(g["loss"] - r["loss"]) for g, r in zip(got, ref))
    worst_norm = max(abs(g["grad_norm"] - r["grad_norm"]) / r["grad_norm"] for g, r in zip(got, ref))
    if abs(got[0]["loss"] - ref[0]["loss"]) > 1e-6 * abs(ref[0]["loss"]) or worst > 1e-5 or worst_norm > 1e-6:
        raise SystemExit("FAIL: %s: loss within %.3g, grad norm within %.3g relative of one process" % (
            name, worst, worst_norm))
    print("  %-40s follows one process: loss within %.3g, grad norm within %.3g relative" % (name, worst, worst_norm))


def ramped(text):
    return text.replace("  global_batch_size: 8\n", "  global_batch_size: 8\n" + RAMP)


def logs_the_ramp(name, rows, expected):
    if [row["global_batch_size"] for row in rows] != expected:
        raise SystemExit("FAIL: %s logged global batches %s, not the ramp's %s" % (
            name, [row["global_batch_size"] for row in rows], expected))


def rampup(args, work):
    # Megatron's closed form: 16 / ((8 - 4) / 4) = 16 samples per increment, so the steps that start
    # at 0, 4, 8 and 12 consumed samples run 4 samples, and every later one 8.
    expected = [4] * 4 + [8] * (pt.STEPS - 4)
    for prefix, model, layouts in (("ramp", pt.LLAMA_PP, (("fsdp2", ""), ("pp2", "\n  pipeline_parallel: 2"))),
                                   ("ramp_moe", pt.DEEPSEEK, (("fsdp2", ""),))):
        ref = train(args, work, prefix + "_one_process", 1, model=model, edit_config=ramped)
        logs_the_ramp(prefix + "_one_process", ref, expected)
        for layout, extra in layouts:
            name = "%s_%s" % (prefix, layout)
            got = train(args, work, name, 2, extra, model, edit_config=ramped)
            logs_the_ramp(name, got, expected)
            follows(name, got, ref)
    print("  every layout logged the ramp's global batches %s" % expected)


def exclude_op(args, work):
    full = 'recompute:\n  mode: full\n  full_recompute_layer: ["0-%d"]\n'
    kept = "  exclude_op: [AllGather, ReduceScatter, AllToAll, AllReduce]\n"
    for layout, extra, model, layers in (("tp2", "\n  tensor_parallel: 2", pt.LLAMA, 3),
                                         ("ep2", "\n  expert_parallel: 2", pt.DEEPSEEK, 2)):
        ref = train(args, work, layout + "_one_process", 1, model=model)
        _, plain = train(args, work, layout + "_no_recompute", 2, extra, model, report=True)
        recomputed, again = train(args, work, layout + "_full", 2, extra, model, full % (layers - 1), report=True)
        excluded, report = train(args, work, layout + "_full_exclude", 2, extra, model, full % (layers - 1) + kept,
                                 report=True)
        for name, r in ((layout + "_no_recompute", plain), (layout + "_full", again),
                        (layout + "_full_exclude", report)):
            print("  %-40s backward %3d collectives, %8d bytes; forward %3d, %8d bytes" % (
                name, r["backward"]["calls"], r["backward"]["bytes_sent"], r["forward"]["calls"],
                r["forward"]["bytes_sent"]))
        def curve(rows):
            return [(row["loss"], row["grad_norm"]) for row in rows]
        if curve(excluded) != curve(recomputed):
            raise SystemExit("FAIL: %s: exclude_op changed the loss curve" % layout)
        follows(layout + "_full_exclude", excluded, ref)
        if again["backward"]["calls"] <= plain["backward"]["calls"]:
            raise SystemExit("FAIL: %s: full recompute re-issued no collective in backward" % layout)
        if report["backward"] != plain["backward"] or report["forward"] != plain["forward"]:
            raise SystemExit("FAIL: %s: with every collective kept, backward sent %s, not the %s of no recompute" % (
                layout, report["backward"], plain["backward"]))
        print("  %-40s kept %d collectives (%d bytes) out of backward; curve identical" % (
            layout, again["backward"]["calls"] - report["backward"]["calls"],
            again["backward"]["bytes_sent"] - report["backward"]["bytes_sent"]))


MONITOR = """monitor:
  train_state:
    local_norm: True
    local_loss: True
    device_norm: True
    device_loss: True
callbacks:
  - type: MaxLogitsMonitor
"""


def compare_figures(name, got, ref, prefix):
    """Every `prefix` figure of every step against one process's: step 1 within 1e-6 relative,
    every step within 1e-4 relative (the runs' weights part in the last bits)."""
    for step, (g, r) in enumerate(zip(got, ref), start=1):
        keys = sorted(k for k in r if k.startswith(prefix))
        if not keys or keys != sorted(k for k in g if k.startswith(prefix)):
            raise SystemExit("FAIL: %s step %d logs %s, one process %s" % (
                name, step, sorted(k for k in g if k.startswith(prefix)), keys))
        worst = max(abs(g[k] - r[k]) / max(abs(r[k]), 1e-12) for k in keys)
        if worst > (1e-6 if step == 1 else 1e-4):
            raise SystemExit("FAIL: %s step %d: a %s figure differs by %.3g relative" % (name, step, prefix, worst))
    print("  %-40s %d %s figures per step equal one process's" % (name, len(keys), prefix))


def monitoring(args, work):
    references = {}
    for layout, world, extra, model in (("fsdp2", 2, "", pt.LLAMA_PP),
                                        ("tp2", 2, "\n  tensor_parallel: 2", pt.LLAMA_PP),
                                        ("pp2", 2, "\n  pipeline_parallel: 2", pt.LLAMA_PP),
                                        ("ep2", 2, "\n  expert_parallel: 2", pt.DEEPSEEK)):
        ref_name = "monitor_one_process_" + ("moe" if model is pt.DEEPSEEK else "llama")
        if ref_name not in references:
            references[ref_name] = train(args, work, ref_name, 1, model=model, sections=MONITOR)
        ref = references[ref_name]
        got = train(args, work, "monitor_" + layout, world, extra, model, MONITOR)
        compare_figures(layout, got, ref, "local_norm/")
        compare_figures(layout, got, ref, "max_attention_logit/")
        shards = 1 if layout in ("tp2", "pp2") else 2
        for row in got:
            losses = [row["local_loss/dp_%d" % i] for i in range(shards)]
            if abs(sum(losses) / shards - row["loss"]) > 1e-6 * abs(row["loss"]):
                raise SystemExit("FAIL: %s: local losses %s do not average to the loss %s" % (layout, losses,
                                                                                            row["loss"]))
            holders = [1] if layout == "pp2" else [0, 1]
            if sorted(k for k in row if k.startswith("device_loss/")) != ["device_loss/rank_%d" % r for r in holders]:
                raise SystemExit("FAIL: %s: device losses %s" % (layout, [k for k in row if k.startswith("device_")]))
            if not all("device_norm/rank_%d" % r in row for r in range(world)):
                raise SystemExit("FAIL: %s: a rank's device_norm is missing" % layout)
        print("  %-40s local_loss of %d data-parallel rank(s), device figures of every rank" % (layout, shards))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--case", choices=["rampup", "exclude_op", "monitoring"], required=True)
    ap.add_argument("--keep", default="")
    args = ap.parse_args()
    cases = {"rampup": rampup, "exclude_op": exclude_op, "monitoring": monitoring}
    pt.in_work_dir(args.keep, "loom-contract-", lambda work: cases[args.case](args, work))


if __name__ == "__main__":
    main()
