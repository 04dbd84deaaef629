#!/usr/bin/env python3
"""`loom plan` checked against the real thing: each layout is trained for a few steps under mpirun with
`loom train --rank-report` (every rank writes what it held and sent during the last step,
rank_report.h), then `loom plan --json` predicts the same config at the same world size, and for
every rank of every role:

  parameter_bytes, gradient_bytes, optimizer_bytes   predicted == measured, exactly
  transient peak   predicted peak_bytes - (parameter + gradient + optimizer bytes) within 10% of the
                   measured mem_peak_bytes - mem_start_bytes (the allocator's rise above what was live
                   when the step began: activations, gathered FSDP units, unsharded grads, logits, comm
                   buffers). Comparing the whole peak instead would let the exactly-known static bytes
                   hide a wrong activation estimate on these tiny models; the whole peak_bytes vs
                   mem_peak_bytes is checked too, within the same 10%.
  bytes sent       per communicator within 1% (a predicted 0 must be measured 0): the counters exist
                   per process group, and an axis whose group is the whole world shares the world's
                   communicator (dist/device_mesh.cpp), so predicted axes are summed by the group the
                   report's mesh_groups names for them.

Before trusting a case the comparator is shown wrong predictions (each exact field off by one byte, the
peak and the traffic off by 2x the tolerance) and must reject each: a comparison that cannot fail
fails the test.

  dense     fsdp 2 (2 micro-batches accumulated), fsdp 4, hsdp 2x2, fsdp 2 under full recompute, fsdp 2 under
            selective recompute (mlp everywhere, self_attention on two layers)
  tensor    tp 2 (+SP), tp 2 x fsdp 2, tp 2 x hsdp 2x2 (8 ranks)
  context   cp 2 ring, cp 2 Ulysses, cp 4 ring, cp 2 x fsdp 2, cp 2 x tp 2
  pipeline  pp 2 1F1B, pp 2 interleaved v 2, pp 2 x fsdp 2, pp 2 x tp 2, pp 2 x cp 2, pp 2 x fsdp 2 x tp 2,
            pp 2 v 2 x fsdp 2
  expert    Qwen3-MoE, every token to every expert: ep 2 (all-to-all), ep 4, ep 2 x efsdp 2, ep 2 x tp 2,
            cp 2 x ep 2, pp 2 x ep 2, ep 2 under selective recompute (mlp.experts, core_attention)

usage: plan_check_test.py --loom PATH --mpirun PATH --case dense|tensor|context|pipeline|expert [--keep DIR]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_test as parity  # noqa: E402  the same data, models and mpirun flags as the parity runs

STEPS = 3  # the report measures the last: every buffer allocated, the step in steady state
EXACT_FIELDS = ("parameter_bytes", "gradient_bytes", "optimizer_bytes")
PEAK_TOLERANCE = 0.10
TRAFFIC_TOLERANCE = 0.01
LLAMA = parity.LLAMA_PP  # 4 layers: pp 2 and v 2 split them evenly
LLAMA_CP = LLAMA + "  use_attn_mask_compression: True\n"  # what context parallelism requires
# The all-to-all volume depends on where the router sends each token; routing every token to every
# expert (top-k = the 4 experts) makes it the same on every step and rank, so it can be predicted.
MOE = parity.QWEN3_MOE_TP.replace("num_experts_per_tok: 2", "num_experts_per_tok: 4")
RECOMPUTE = 'recompute:\n  mode: full\n  full_recompute_layer: ["0-3"]\n'
SELECT_MOE = "recompute:\n  mode: select\n  select_module:\n    'mlp.experts': ['0-1']\n    '.*core_attention': ['0-1']\n"
SELECT = "recompute:\n  mode: select\n  select_module:\n    '.*mlp': ['0-3']\n    'self_attention': ['0-1']\n"


def par(**axes):
    names = {"tp": "tensor_parallel", "cp": "context_parallel", "pp": "pipeline_parallel", "ep": "expert_parallel",
             "v": "pipeline_parallel_interleave_num", "method": "context_parallel_method"}
    return "".join("\n  %s: %s" % (names[k], v) for k, v in axes.items())


# (name, world, model, parallelism lines, extra sections, data_parallel_shard)
CASES = {
    "dense": [("fsdp2_accumulating", 2, LLAMA, "", "", -1), ("fsdp4", 4, LLAMA, "", "", -1),
              ("hsdp2x2", 4, LLAMA, "", "", 2), ("fsdp2_full_recompute", 2, LLAMA, "", RECOMPUTE, -1),
              ("fsdp2_select_recompute", 2, LLAMA, "", SELECT, -1)],
    "tensor": [("tp2", 2, LLAMA, par(tp=2), "", -1), ("fsdp2xtp2", 4, LLAMA, par(tp=2), "", -1),
               ("hsdp2x2xtp2", 8, LLAMA, par(tp=2), "", 2)],
    "context": [("cp2_ring", 2, LLAMA_CP, par(cp=2), "", -1),
                ("cp2_ulysses", 2, LLAMA_CP, par(cp=2, method="ulysses"), "", -1),
                ("cp4_ring", 4, LLAMA_CP, par(cp=4), "", -1),
                ("fsdp2xcp2", 4, LLAMA_CP, par(cp=2), "", -1), ("cp2xtp2", 4, LLAMA_CP, par(cp=2, tp=2), "", -1)],
    "pipeline": [("pp2_1f1b", 2, LLAMA, par(pp=2), "", -1), ("pp2_v2", 2, LLAMA, par(pp=2, v=2), "", -1),
                 ("pp2xfsdp2", 4, LLAMA, par(pp=2), "", -1), ("pp2xtp2", 4, LLAMA, par(pp=2, tp=2), "", -1),
                 ("pp2xcp2", 4, LLAMA_CP, par(pp=2, cp=2), "", -1),
                 ("pp2xfsdp2xtp2", 8, LLAMA, par(pp=2, tp=2), "", -1),
                 ("pp2_v2xfsdp2", 4, LLAMA, par(pp=2, v=2), "", -1)],
    "expert": [("ep2", 2, MOE, par(ep=2), "", -1), ("ep4", 4, MOE, par(ep=4), "", -1),
               ("ep2xefsdp2", 4, MOE, par(ep=2), "", -1), ("ep2xtp2", 2, MOE, par(ep=2, tp=2), "", -1),
               ("cp2xep2", 2, MOE + "  use_attn_mask_compression: True\n", par(cp=2, ep=2), "", -1),
               ("pp2xep2", 4, MOE, par(pp=2, ep=2), "", -1),
               ("ep2_select_recompute", 2, MOE, par(ep=2), SELECT_MOE, -1)],
}


def train_and_plan(args, work, name, world, model, extra, sections, shard):
    """Trains `name` with the rank report on; returns (plan json, {rank: report})."""
    config, run_dir = parity.write_config(work, name, STEPS, shard, parallel_extra=extra, model=model,
                                          sections=sections)
    cmd = [args.loom, "train", "--config", config, "--output", run_dir, "--rank-report"]
    if world > 1:
        cmd = [args.mpirun, "-np", str(world)] + parity.MPI_FLAGS + cmd
    t0 = time.time()
    p = subprocess.run(cmd, env=parity.ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    if p.returncode != 0:
        print(p.stdout)
        raise SystemExit("FAIL: %s: loom train exited with %d" % (name, p.returncode))
    reports = {}
    for r in range(world):
        path = os.path.join(run_dir, "rank_report", "rank-%d.json" % r)
        if not os.path.exists(path):
            raise SystemExit("FAIL: %s: loom train --rank-report wrote no %s" % (name, path))
        with open(path) as f:
            reports[r] = json.load(f)
    took = time.time() - t0
    q = subprocess.run([args.loom, "plan", "--config", config, "--world-size", str(world), "--json"], env=parity.ENV,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if q.returncode != 0:
        print(q.stdout, q.stderr)
        raise SystemExit("FAIL: %s: loom plan --json exited with %d" % (name, q.returncode))
    print("%-22s %d ranks, trained in %.1fs" % (name, world, took))
    return json.loads(q.stdout), reports


def role_of(plan, rank):
    found = [role for role in plan.get("roles", []) if rank in role.get("ranks", [])]
    return found[0] if len(found) == 1 else None


def traffic_by_group(per_axis, mesh_groups):
    """Per-axis bytes summed by the communicator each axis uses; an axis the mesh does not have is
    kept under its own name so that it can never match a measurement."""
    out = {}
    for axis, v in per_axis.items():
        group = mesh_groups.get(axis, "unknown axis '%s'" % axis)
        out[group] = out.get(group, 0) + v
    return out


def compare(plan, reports):
    """Every disagreement as a line (rank, field, predicted, measured); [] when all agree."""
    bad = []
    ranks_in_roles = sorted(r for role in plan.get("roles", []) for r in role.get("ranks", []))
    if ranks_in_roles != sorted(reports):
        bad.append("roles cover ranks %s, the run had ranks %s" % (ranks_in_roles, sorted(reports)))
    for rank, m in sorted(reports.items()):
        role = role_of(plan, rank)
        if role is None:
            bad.append("rank %d: in no role (or several) of the plan" % rank)
            continue
        where = "rank %d (%s)" % (rank, role.get("name", "?"))
        for field in EXACT_FIELDS:
            if role.get(field) != m[field]:
                bad.append("%s %s: predicted %s, measured %d" % (where, field, role.get(field), m[field]))
        static = sum(role.get(f, 0) for f in EXACT_FIELDS)
        predicted_rise = role.get("peak_bytes", 0) - static
        measured_rise = m["mem_peak_bytes"] - m["mem_start_bytes"]
        if abs(predicted_rise - measured_rise) > PEAK_TOLERANCE * measured_rise:
            bad.append("%s transient peak (peak_bytes - static): predicted %d, measured mem_peak - mem_start = %d "
                       "(%+.1f%%; activation_peak_bytes %s)" % (where, predicted_rise, measured_rise,
                                                                100.0 * (predicted_rise - measured_rise) / max(1, measured_rise),
                                                                role.get("activation_peak_bytes")))
        if abs(role.get("peak_bytes", 0) - m["mem_peak_bytes"]) > PEAK_TOLERANCE * m["mem_peak_bytes"]:
            bad.append("%s peak_bytes: predicted %s, measured mem_peak_bytes %d" % (where, role.get("peak_bytes"),
                                                                                   m["mem_peak_bytes"]))
        predicted = traffic_by_group(role.get("bytes_sent_per_step", {}), m["mesh_groups"])
        for group in sorted(set(predicted) | set(m["bytes_sent_per_step"])):
            p, got = predicted.get(group, 0), m["bytes_sent_per_step"].get(group, 0)
            if abs(p - got) > TRAFFIC_TOLERANCE * got or (got == 0 and p != 0):
                axes = [a for a, g in m["mesh_groups"].items() if g == group]
                bad.append("%s bytes_sent on communicator %s (axes %s): predicted %d, measured %d" %
                           (where, group, "/".join(axes) or group, p, got))
    return bad


def wrong_predictions(reports):
    """A plan made of the measurement itself (one role per rank), then plans wrong in one field each
    by exactly the stated amount -> [(what is wrong, plan)]."""
    truth = {"roles": []}
    for rank, m in sorted(reports.items()):
        truth["roles"].append({"name": "rank %d" % rank, "ranks": [rank],
                               **{f: m[f] for f in EXACT_FIELDS},
                               "peak_bytes": m["mem_peak_bytes"] - m["mem_start_bytes"] + sum(m[f] for f in EXACT_FIELDS),
                               "bytes_sent_per_step": dict(m["bytes_sent_per_step"])})
    out = [("nothing (the measurement itself)", truth)]
    for field in EXACT_FIELDS:
        w = copy.deepcopy(truth)
        w["roles"][0][field] += 1
        out.append((field + " + 1 byte", w))
    w = copy.deepcopy(truth)
    m = reports[0]
    w["roles"][0]["peak_bytes"] += int(2 * PEAK_TOLERANCE * (m["mem_peak_bytes"] - m["mem_start_bytes"])) + 1
    out.append(("transient peak + 20%", w))
    busiest = max(m["bytes_sent_per_step"], key=m["bytes_sent_per_step"].get)
    if m["bytes_sent_per_step"][busiest] > 0:
        w = copy.deepcopy(truth)
        w["roles"][0]["bytes_sent_per_step"][busiest] = int(m["bytes_sent_per_step"][busiest] * (1 + 2 * TRAFFIC_TOLERANCE)) + 1
        out.append(("bytes sent on %s + 2%%" % busiest, w))
        w = copy.deepcopy(truth)
        del w["roles"][0]["bytes_sent_per_step"][busiest]
        out.append(("no bytes sent on %s" % busiest, w))
    return out


def check_the_comparator(name, reports):
    """The comparison must accept the measurement as a plan and reject each wrong one."""
    for what, wrong in wrong_predictions(reports):
        bad = compare(wrong, reports)
        if what.startswith("nothing") and bad:
            raise SystemExit("FAIL: %s: the comparator rejects the measurement itself: %s" % (name, bad[0]))
        if not what.startswith("nothing") and not bad:
            raise SystemExit("FAIL: %s: the comparator accepts a plan with %s" % (name, what))


def run_case(args, work, case):
    failures = []
    for name, world, model, extra, sections, shard in CASES[case]:
        plan, reports = train_and_plan(args, work, name, world, model, extra, sections, shard)
        check_the_comparator(name, reports)
        bad = compare(plan, reports)
        for role in plan.get("roles", []):
            m = reports.get(role["ranks"][0]) if role.get("ranks") else None
            if m:
                print("  %-16s params %d/%d grads %d/%d optim %d/%d rise %d/%d sent %s / %s" % (
                    role.get("name"), role.get("parameter_bytes", -1), m["parameter_bytes"], role.get("gradient_bytes", -1),
                    m["gradient_bytes"], role.get("optimizer_bytes", -1), m["optimizer_bytes"],
                    role.get("peak_bytes", 0) - sum(role.get(f, 0) for f in EXACT_FIELDS),
                    m["mem_peak_bytes"] - m["mem_start_bytes"],
                    json.dumps(traffic_by_group(role.get("bytes_sent_per_step", {}), m["mesh_groups"]), sort_keys=True),
                    json.dumps({g: v for g, v in m["bytes_sent_per_step"].items() if v}, sort_keys=True)))
        print("  %-40s %s" % (name, "plan == measured" if not bad else "%d disagreement(s)" % len(bad)))
        for line in bad:
            print("    " + line)
        failures += ["%s: %s" % (name, line) for line in bad]
    if failures:
        raise SystemExit("FAIL: %d disagreement(s) between loom plan and the runs:\n  %s" % (len(failures),
                                                                                           "\n  ".join(failures)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--case", choices=sorted(CASES), required=True)
    ap.add_argument("--keep", default="")
    args = ap.parse_args()
    parity.in_work_dir(args.keep, "loom-plan-check-", lambda work: run_case(args, work, args.case))


if __name__ == "__main__":
    main()
