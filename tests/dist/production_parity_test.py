#!/usr/bin/env python3
"""Parity under mpirun of the layouts production runs use (parity_test.py's method and helpers:
training.deterministic, the same seed, data and global batch; one process is the reference; the
losses and the grad norms of every step compared):

  bf16     bf16 compute under TP 2, CP 2 (ring and Ulysses), EP 2 and PP 2 against the one-process
           bf16 curve, and params_dtype bfloat16 (bf16 parameters, fp32 masters) at FSDP 4 (bit for
           bit) and TP 2; each layout also shows that it computed in bf16 (bit-for-bit steps where
           its sums keep one process's order, half the traffic of its fp32 run where they do not).
  hsdp     HSDP (replicas of a sharded group) with CP (cp 2 inside the shard group, 2 replicas), EP
           (ep 2 carved from a shard group of 2, 2 replicas) and PP (2 stages, each 2 replicas of 2
           shards: 8 ranks): step 1 within 1e-6 relative, 20-step curves within 1e-5.
  muon_resume  Muon's state resharded: a checkpoint saved at step 10 by FSDP 4 (the one-process
           curve bit for bit) resumes on one process bit for bit, and under TP 2 x FSDP 2 and EP 2
           within 1e-5 of the loss over the 10 steps left; its momentum is what carries over (a
           resume that dropped it would differ from step 11 on).

usage: production_parity_test.py --loom PATH --mpirun PATH --case bf16|hsdp|muon_resume [--keep DIR]
"""
import argparse
import os

import parity_test as pt


def bf16_compute(text):
    return text.replace("compute_dtype: float32", "compute_dtype: bfloat16")


def bf16_params(text):
    return bf16_compute(text).replace("params_dtype: float32", "params_dtype: bfloat16")


# bf16 layouts against the one-process bf16 curve. Where the layout splits a product's sum (TP's
# row-parallel linears, the ring's attention blocks) each part is rounded to bf16 before the parts
# are added, so step 1 differs from one process by about as much as fp32 and bf16 compute differ
# (measured 2e-5 relative in the loss and 1e-4 in the grad norm, against 1.4e-5 and 4e-5), and 20
# steps amplify it (measured up to 4e-4 in the loss and 3.7e-3 in the norm). The tolerances hold
# those with margin, so they catch a wrong reduction or scale but cannot tell bf16 from fp32: each
# layout shows it computed in bf16 another way (below).
BF16_STEP1_LOSS, BF16_STEP1_NORM = 5e-5, 3e-4  # relative
BF16_LOSS, BF16_NORM = 1e-3, 1e-2  # the 20-step curve: absolute loss, relative grad norm


def compare_bf16(name, got, ref):
    g, r = pt.GRAD_NORMS[(got.name, 1)], pt.GRAD_NORMS[(ref.name, 1)]
    if abs(got[1] - ref[1]) > BF16_STEP1_LOSS * abs(ref[1]) or abs(g - r) > BF16_STEP1_NORM * r:
        raise SystemExit("FAIL: %s step 1: loss %.17g grad norm %.17g, one process bf16 %.17g and %.17g" % (
            name, got[1], g, ref[1], r))
    pt.compare(name, got, ref, BF16_LOSS, norm_tol=BF16_NORM)


def bf16(args, work):
    cp_model = pt.LLAMA + "  use_attn_mask_compression: True\n"
    models = {"llama": pt.LLAMA, "llama_cp": cp_model, "llama_pp": pt.LLAMA_PP, "deepseek_v3": pt.DEEPSEEK_TP}
    refs = {key: pt.run(args, work, key + "_one_process_bf16", 1, model=model, edit_config=bf16_compute)[0]
            for key, model in models.items()}
    # How each shows bf16 engaged: Ulysses gathers whole heads and EP whole tokens, so their step 1
    # is one process's bf16 step bit for bit (fp32 compute's is not); the pipeline cuts the model
    # between layers and sends bf16 activations, so its whole curve is. TP and the ring send fewer
    # bytes than the same layout in fp32 (--rank-report, every communicator): TP's sequence
    # gathers and scatters carry bf16 activations (0.54 of fp32's bytes measured); at cp 2 FSDP
    # shards over the cp ranks and gathers the matmul weights in bf16 (docs/distributed.md,
    # "Precision"), while the ring's K/V blocks travel widened to fp32 (0.74 measured).
    layouts = [("tp2", 2, "\n  tensor_parallel: 2", "llama", "traffic"),
               ("cp2_ring", 2, "\n  context_parallel: 2", "llama_cp", "traffic"),
               ("cp2_ulysses", 2, "\n  context_parallel: 2\n  context_parallel_method: ulysses", "llama_cp", "step1"),
               ("ep2", 2, "\n  expert_parallel: 2", "deepseek_v3", "step1"),
               ("pp2", 2, "\n  pipeline_parallel: 2", "llama_pp", "identical")]
    for name, world, extra, key, engaged in layouts:
        traffic = engaged == "traffic"
        got, _ = pt.run(args, work, name + "_bf16", world, parallel_extra=extra, model=models[key],
                        edit_config=bf16_compute, report=traffic)
        if engaged == "identical":
            pt.identical(name + "_bf16", got, refs[key])
            continue
        if engaged == "step1" and got[1] != refs[key][1]:
            raise SystemExit("FAIL: %s_bf16 step-1 loss %.17g, one process bf16 %.17g: not bit for bit" % (
                name, got[1], refs[key][1]))
        compare_bf16(name + "_bf16", got, refs[key])
        if traffic:
            pt.run(args, work, name + "_fp32", world, parallel_extra=extra, model=models[key], report=True)
            for rank, (b, f) in enumerate(zip(pt.REPORTS[name + "_bf16"], pt.REPORTS[name + "_fp32"])):
                sent, sent32 = (sum(r["bytes_sent_per_step"].values()) for r in (b, f))
                if not 0 < sent < 0.8 * sent32:
                    raise SystemExit("FAIL: %s_bf16 rank %d sent %d bytes in a step, %d in fp32: nothing it sends "
                                     "became bf16" % (name, rank, sent, sent32))
            print("  %-40s %d bytes sent per step, %d in fp32" % (name + "_bf16", sent, sent32))
    # params_dtype bfloat16: the parameters themselves in bf16 (all-gathered in bf16), fp32 masters
    # in the optimizer beside the two fp32 moments: 12 optimizer bytes for each 2-byte parameter
    # element (--rank-report). FSDP 4 (one micro-batch per rank, the grads summed in rank order)
    # keeps the one-process curve bit for bit; TP 2 splits the products' sums as above.
    params_ref, _ = pt.run(args, work, "params_bf16_one_process", 1, edit_config=bf16_params)
    got, _ = pt.run(args, work, "params_bf16_fsdp4", 4, edit_config=bf16_params, report=True)
    pt.identical("params_bf16_fsdp4", got, params_ref)
    for rank, r in enumerate(pt.REPORTS["params_bf16_fsdp4"]):
        if r["optimizer_bytes"] != 6 * r["parameter_bytes"]:
            raise SystemExit("FAIL: params_bf16_fsdp4 rank %d holds %d parameter bytes and %d optimizer bytes: not "
                             "bf16 parameters with fp32 masters and moments" % (rank, r["parameter_bytes"],
                                                                                 r["optimizer_bytes"]))
    got, _ = pt.run(args, work, "params_bf16_tp2", 2, parallel_extra="\n  tensor_parallel: 2", edit_config=bf16_params)
    compare_bf16("params_bf16_tp2", got, params_ref)


def hsdp(args, work):
    """HSDP beside the other axes: data_parallel_shard smaller than the data-parallel degree leaves
    replicas, whose shard grads are all-reduced (dp_replicate) after the shard group's
    reduce-scatter."""
    cp_model = pt.LLAMA + "  use_attn_mask_compression: True\n"
    cases = [("cp", cp_model, [("hsdp_2x1_cp2", 4, 1, "\n  context_parallel: 2")]),
             ("moe", pt.DEEPSEEK_TP, [("hsdp_2x2_ep2", 4, 2, "\n  expert_parallel: 2")]),
             ("pp", pt.LLAMA_PP, [("hsdp_2x2_pp2", 8, 2, "\n  pipeline_parallel: 2")])]
    for key, model, layouts in cases:
        ref_name = "hsdp_%s_one_process" % key
        ref, _ = pt.run(args, work, ref_name, 1, model=model)
        for name, world, shard, extra in layouts:
            got, run_dir = pt.run(args, work, name, world, shard, parallel_extra=extra, model=model, report=True)
            # The layout is HSDP: 2 replicas, and their grads did cross the replica axis.
            for rank, r in enumerate(pt.REPORTS[name]):
                replicas = r["layout"]["dp_replicate"]
                sent = r["bytes_sent_per_step"].get(r["mesh_groups"]["dp_replicate"], 0)
                if replicas != 2 or sent <= 0:
                    raise SystemExit("FAIL: %s rank %d: %d replicas, %d bytes sent over them in a step" % (
                        name, rank, replicas, sent))
            pt.compare_step1_and_curve(name, got, ref, ref_name)


def muon_resume(args, work):
    optimizer = pt.MUON.format(threshold=pt.MUON_FIRING_QK_CLIP, strategy="allgather")
    model = pt.DEEPSEEK_TP
    ref, _ = pt.run(args, work, "muon_one_process", 1, model=model, optimizer=optimizer)
    saved, saved_dir = pt.run(args, work, "muon_fsdp4_saving", 4, save=True, model=model, optimizer=optimizer)
    pt.identical("muon_fsdp4_saving", saved, ref)
    ckpt = os.path.join(saved_dir, "checkpoints", "iteration_00000010")
    got, _ = pt.run(args, work, "resume_muon_fsdp4_to_1", 1, load_path=ckpt, model=model, optimizer=optimizer)
    if min(got) != 11:
        raise SystemExit("FAIL: resume_muon_fsdp4_to_1 logged step %d first, not 11" % min(got))
    pt.identical("resume_muon_fsdp4_to_1", got, pt.Curve(ref.name, {s: ref[s] for s in ref if s > 10}))
    for name, world, extra in (("resume_muon_fsdp4_to_tp2_fsdp2", 4, "\n  tensor_parallel: 2"),
                               ("resume_muon_fsdp4_to_ep2", 2, "\n  expert_parallel: 2")):
        got, _ = pt.run(args, work, name, world, load_path=ckpt, parallel_extra=extra, model=model, optimizer=optimizer)
        # Ten steps from the same state: the layouts' other summation orders, amplified by bf16
        # Newton-Schulz, stay far below the muon case's 20-step 1e-4 (measured 9e-7 in the loss,
        # 3e-6 in the grad norm).
        pt.compare(name, got, ref, 1e-5, first=11, norm_tol=2e-5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--case", choices=["bf16", "hsdp", "muon_resume"], required=True)
    ap.add_argument("--keep", default="")
    args = ap.parse_args()
    cases = {"bf16": bf16, "hsdp": hsdp, "muon_resume": muon_resume}
    pt.in_work_dir(args.keep, "loom-production-", lambda work: cases[args.case](args, work))


if __name__ == "__main__":
    main()
