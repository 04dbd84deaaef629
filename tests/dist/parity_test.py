#!/usr/bin/env python3
"""TorchTitan-style parity of `loom train` across data-parallel layouts (as TorchTitan's
loss_compare.py checks its layouts): fp32, training.deterministic, the same seed, data and global
batch (8 samples) at every layout; runs go through mpirun exactly as users start them. Every
curve comparison holds the logged grad norm of each step too (compare: a gradient-scale error
hides behind AdamW and clipping in the loss), a resumed run must continue at the checkpoint's
next step, and a layout flag must show its effect in --rank-report (memory, traffic, collectives).

  curves   1 process (4 micro-batches), FSDP 2 (2 micro-batches each: accumulation + DP), FSDP 4,
           HSDP 2x2, FSDP 2 with reshard_after_forward never and cpu_offload, FSDP 2 under full and
           under selective recompute, FSDP 2 with layer swap: step-1 loss identical, 20-step loss
           curves within 1e-5, the flags' effects (offloaded state, fewer collectives, lower peaks);
           bf16 compute (matmul weights all-gathered in bf16): FSDP 4 bit for bit, HSDP 2x2 and FSDP 2
           within 2e-3 (bf16 rounding of weights that differ in the last fp32 bit).
  resume   a checkpoint saved at step 10 by one layout, resumed by others (1 -> 4, 4 -> 2, 4 -> 1):
           steps 11..20 follow the uninterrupted one-process curve within 1e-5; under bf16 compute
           (bf16 gathers) FSDP 4 -> 1 follows the one-process bf16 curve bit for bit.
  moe      DeepSeek-V3 style MoE + MLA + MTP with the expert-bias update: 1 process vs FSDP 2 and 4.
  muon     the same model trained by Muon, with comm_strategy allgather and allgather_deredundency:
           FSDP 4 with QK-clip firing every step reproduces the one-process curve bit for bit; FSDP 2,
           HSDP 2x2, TP 2 and TP 2 x FSDP 2 follow it within 1e-4.
  context  context parallelism: the ring (colossal) at cp 2 and 4, cp x fsdp, cp x tp, load-balanced
           and contiguous splits, Ulysses at 2 and 4 (4 > the 2 KV heads: repeated), hybrid 4 (u = 2), plain and
           EOD-packed data (reset_position_ids/reset_attention_mask, compressed EOD mask, the
           load-balanced split per document), DeepSeek-V3 with MTP at cp 2 (ring, Ulysses): step 1 within 1e-6 relative, 20-step curves within 1e-5; a cp 2
           checkpoint resumed at cp 1 and cp 4.
  pipeline pp 2/3/4 (1F1B), an uneven layer list, interleaved v 2, overlap_p2p, pp x fsdp, pp x tp, pp x cp,
           tied embeddings, DeepSeek-V3 with MTP at pp 2: step-1 loss within 1e-6 relative, 20-step
           curves within 1e-5; checkpoints saved by pp 2 resume under one process, pp 4 and v 2, and
           one saved by pp 2 x cp 2 under one process.
  launch   `loom launch -n 2 -- train ...` trains like mpirun (its --dry-run: --mca overrides, hosts
           from a hostfile or Slurm); layout errors end every rank quickly
           with the message (parallel_training.md "Parallelism Configuration Limitations").
  expert   expert parallelism on Qwen3-MoE and DeepSeek-V3: ep 2 and 4 with FSDP, efsdp, ep x tp
           (ep <= tp and ep > tp); curves within 1e-5, an ep 4 checkpoint resumed elsewhere, Muon.
  deredundancy  moe_token_dispatcher_type alltoall_deredundancy (nodes of npu_nums_per_device ranks) on
           Qwen3-MoE and DeepSeek-V3 at 4 ranks: the one-process curve within 1e-5, step 1 within 1e-6;
           its checkpoint resumed by plain alltoall at ep 2.
  evaluation  validation during training under FSDP, HSDP, TP, CP (ring, Ulysses, hybrid, packed
           documents), PP (and interleaved), EP and TP x PP: the validation losses of one process within
           1e-6; `loom eval` under `loom launch` gives a checkpoint's logged validation loss.

  sampling  samples while training under FSDP, HSDP, TP, PP, TP x PP, CP and EP: one process's greedy
           continuations, token for token.

usage: parity_test.py --loom PATH --mpirun PATH --case curves|resume|launch|moe|tensor|muon|context|expert|deredundancy|pipeline|evaluation|sampling [--keep DIR]
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time

MPI_FLAGS = ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include",
             "lo", "--mca", "mpi_yield_when_idle", "1"]
STEPS = 20
GRAD_NORMS = {}  # (run name, step) -> logged grad norm
REPORTS = {}  # run name -> its --rank-report files, by rank (run(..., report=True))
VAL_LOSSES = {}  # (run name, step) -> the validation loss logged after that step
SAMPLES = {}  # (run name, step) -> the completions of the sample prompts logged after that step

CONFIG = """
training:
  steps: {steps}
  local_batch_size: 2
  global_batch_size: 8
  max_norm: 1.0
  seed: 1234
  deterministic: True
parallelism:
  data_parallel_shard: {shard}{parallel_extra}
optimizer:
{optimizer}lr_scheduler:
  type: CosineWithWarmUpLR
  learning_rate: 3.e-3
  warmup_steps: 3
  lr_end: 1.e-4
train_dataset:
  dataloader:
    type: BlendedMegatronDatasetDataLoader
    datasets_type: GPTDataset
    shuffle: False
    config:
      seq_length: 32
      split: "1, 0, 0"
      data_path: ["{data}"]
      create_attention_mask: False
  num_parallel_workers: 1
model:
{model}{sections}checkpoint:
  enable_save: {save}
  save_path: "{save_path}"
  save_interleaved_steps: 10
  load_path: "{load_path}"
"""


def write_indexed(prefix, tokens, lengths):
    """A Megatron indexed dataset (.bin/.idx): uint16 `tokens` as sequences of `lengths`."""
    import numpy as np
    with open(prefix + ".bin", "wb") as f:
        f.write(tokens.tobytes())
    pointers = np.concatenate([[0], np.cumsum(np.array(lengths[:-1], dtype=np.int64) * 2)]).astype(np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", 8))  # uint16
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(lengths) + 1))
        f.write(np.array(lengths, dtype=np.int32).tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())


def write_data(prefix, vocab=96, num_tokens=60000, doc_len=512):
    """A Megatron indexed dataset (.bin/.idx) of token ramps with random restarts: text with
    structure, so the loss moves."""
    import numpy as np
    rng = np.random.RandomState(7)
    tokens = []
    while len(tokens) < num_tokens:
        start, length = rng.randint(0, vocab), rng.randint(5, 40)
        tokens.extend((start + np.arange(length)) % vocab)
    tokens = np.array(tokens[:num_tokens], dtype=np.uint16)
    lengths = [doc_len] * (num_tokens // doc_len)
    tokens = tokens[:sum(lengths)]
    write_indexed(prefix, tokens, lengths)


def write_config(work, name, steps=STEPS, shard=-1, save=False, load_path="", parallel_extra="", model=None,
                 sections="", optimizer=None):
    run_dir = os.path.join(work, name)
    config = os.path.join(work, name + ".yaml")
    with open(config, "w") as f:
        f.write(CONFIG.format(steps=steps, shard=shard, data=os.path.join(work, "data"), save=save,
                              save_path=os.path.join(run_dir, "checkpoints"), load_path=load_path,
                              parallel_extra=parallel_extra, model=model or LLAMA, sections=sections,
                              optimizer=optimizer or ADAMW))
    return config, run_dir


ADAMW = """  type: AdamW
  betas: [0.9, 0.95]
  weight_decay: 0.1
"""

MUON = """  type: Muon
  weight_decay: 0.1
  qk_clip_threshold: {threshold}
  comm_strategy: {strategy}
"""


LLAMA = """  model_type: llama
  vocab_size: 96
  hidden_size: 40
  intermediate_size: 72
  num_hidden_layers: 3
  num_attention_heads: 4
  num_key_value_heads: 2
  max_position_embeddings: 32
  rms_norm_eps: 1.e-5
  tie_word_embeddings: False
  params_dtype: float32
  compute_dtype: float32
"""

# MoE with the aux-loss-free expert bias (routing counts summed over ranks), a sequence balance
# loss and an MTP layer (injected losses scaled by sense / A), MLA.
DEEPSEEK = """  model_type: deepseek_v3
  vocab_size: 96
  hidden_size: 32
  num_hidden_layers: 2
  num_attention_heads: 2
  intermediate_size: 48
  moe_intermediate_size: 16
  n_routed_experts: 4
  num_experts_per_tok: 2
  n_group: 2
  topk_group: 1
  n_shared_experts: 1
  first_k_dense_replace: 1
  routed_scaling_factor: 2.5
  q_lora_rank: 16
  kv_lora_rank: 12
  qk_nope_head_dim: 8
  qk_pos_emb_head_dim: 4
  v_head_dim: 8
  num_nextn_predict_layers: 1
  mtp_loss_scaling_factor: 0.3
  moe_router_load_balancing_type: seq_aux_loss
  moe_aux_loss_coeff: 0.001
  max_position_embeddings: 32
  params_dtype: float32
  compute_dtype: float32
"""

# The tiny model's logits stay near 0.01-0.05: a threshold below them clips heads every step.
MUON_FIRING_QK_CLIP = 0.001
MUON_TOLERANCE = 1e-4

ENV = dict(os.environ, LOOM_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", LOOM_COLLECTIVE_TIMEOUT_S="60")


class Curve(dict):
    """A run's losses by step; `name` finds its grad norms in GRAD_NORMS (compare checks both)."""

    def __init__(self, name, losses):
        super().__init__(losses)
        self.name = name


def run(args, work, name, world, shard=-1, steps=STEPS, save=False, load_path="", launch=False, parallel_extra="",
        model=None, sections="", optimizer=None, edit_config=None, launch_options=(), report=False):
    """Trains `name` at `world` processes and returns its losses by step (a Curve) and its run
    directory; edit_config(text) -> text rewrites the written config first (e.g. another dataset);
    launch_options (e.g. a hostfile) start it through `loom launch` with them; report: with
    --rank-report, whose files (what each rank held, sent and peaked at in the last step) land in
    REPORTS[name]."""
    config, run_dir = write_config(work, name, steps, shard, save, load_path, parallel_extra, model, sections,
                                   optimizer)
    if edit_config:
        with open(config) as f:
            text = edit_config(f.read())
        with open(config, "w") as f:
            f.write(text)
    cmd = [args.loom, "train", "--config", config, "--output", run_dir] + (["--rank-report"] if report else [])
    if launch or launch_options:
        cmd = [args.loom, "launch", "-n", str(world), "--mpirun", args.mpirun, "--threads", "1"] + list(
            launch_options) + ["--"] + cmd[1:]
    elif world > 1:
        cmd = [args.mpirun, "-np", str(world)] + MPI_FLAGS + cmd
    t0 = time.time()
    p = subprocess.run(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    if p.returncode != 0:
        print(p.stdout)
        raise SystemExit("FAIL: %s exited with %d" % (name, p.returncode))
    losses = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if "eval" in row:
                VAL_LOSSES[(name, row["step"])] = row["val_loss"]
                continue
            if "sample" in row:
                SAMPLES.setdefault((name, row["step"]), []).append(row["completion"])
                continue
            losses[row["step"]] = row["loss"]
            GRAD_NORMS[(name, row["step"])] = row["grad_norm"]
    if report:
        REPORTS[name] = []
        for rank in range(world):
            with open(os.path.join(run_dir, "rank_report", "rank-%d.json" % rank)) as f:
                REPORTS[name].append(json.load(f))
    print("%-24s %d process(es) %5.1fs  first loss %.9f  last %.9f" % (name, world, time.time() - t0, losses[min(losses)],
                                                                          losses[max(losses)]))
    return Curve(name, losses), run_dir


def grad_norm_tolerance(loss_tolerance):
    """The relative tolerance on the logged (pre-clip) grad norm that goes with a loss tolerance.
    AdamW normalises a gradient's scale away and clipping caps it, so a constant scale error (a
    replica factor, a loss divided by the wrong micro-batch count) leaves the loss curve alone: only
    the norm shows it, as a relative error equal to the scale's. Bit-for-bit losses still sum the
    norm's squares over the ranks in another order (float64): 1e-12. fp32 layouts within 1e-5 of
    the loss keep the norm within 1e-7 relative over 20 steps (measured over every case): 1e-6.
    Looser loss tolerances (Muon's bf16 Newton-Schulz, bf16 compute) move the norm about as much
    as the loss, relatively: twice the loss tolerance, relative."""
    if loss_tolerance == 0:
        return 1e-12
    return 1e-6 if loss_tolerance <= 1e-5 else 2 * loss_tolerance


def compare(name, got, ref, tol, first=1, norm_tol=None):
    """got's losses and grad norms at steps first..20 against ref's: |loss difference| <= tol and
    the grad norms' relative difference <= norm_tol (default grad_norm_tolerance(tol)). A resumed run (first > 1)
    must log step `first` as its first: one that ignored load_path and trained from step 1 would
    otherwise match the reference's later steps as well."""
    if not isinstance(got, Curve) or not isinstance(ref, Curve):
        raise SystemExit("FAIL: compare(%s) needs the curves run() returns (their grad norms)" % name)
    if first > 1 and min(got) != first:
        raise SystemExit("FAIL: %s logged step %d first: resumed from the step-%d checkpoint it must continue at "
                         "step %d (load_path not loaded?)" % (name, min(got), first - 1, first))
    worst = worst_norm = 0.0
    last = max(ref)  # STEPS, or a shorter run's last step
    for step in range(first, last + 1):
        if step not in got:
            raise SystemExit("FAIL: %s has no loss for step %d" % (name, step))
        worst = max(worst, abs(got[step] - ref[step]))
        g, r = GRAD_NORMS[(got.name, step)], GRAD_NORMS[(ref.name, step)]
        worst_norm = max(worst_norm, abs(g - r) / r)
    norm_tol = grad_norm_tolerance(tol) if norm_tol is None else norm_tol
    ok = worst <= tol and worst_norm <= norm_tol
    print("  %-40s over steps %d..%d: max |loss - one process| = %.3g (tolerance %g), grad norm %.3g relative "
          "(tolerance %g) %s" % (name, first, last, worst, tol, worst_norm, norm_tol, "ok" if ok else "FAIL"))
    if worst > tol:
        raise SystemExit("FAIL: %s diverges from the one-process curve" % name)
    if worst_norm > norm_tol:
        raise SystemExit("FAIL: %s's grad norms differ from the one-process run's" % name)


def identical(name, got, ref):
    """Bit for bit: every step's loss equals the reference's, and its grad norm within the float64
    rounding of the ranks' sum (grad_norm_tolerance(0))."""
    for step in sorted(ref):
        g, r = GRAD_NORMS.get((got.name, step), float("nan")), GRAD_NORMS[(ref.name, step)]
        if got.get(step) != ref[step] or not abs(g - r) <= grad_norm_tolerance(0) * r:
            raise SystemExit("FAIL: %s step %d loss %.17g grad norm %.17g, one process %.17g and %.17g" % (
                name, step, got.get(step, float("nan")), g, ref[step], r))
    print("  %-40s %d-step curve and grad norms identical to one process" % (name, len(ref)))


def compare_step1_and_curve(run_name, got, ref, ref_name, label=None):
    """A parallel run against one process: step 1's loss and grad norm within 1e-6 relative (the
    layout sums in another order, so not bitwise), then the 20-step curve within 1e-5."""
    rel = abs(got[1] - ref[1]) / abs(ref[1])
    if rel > 1e-6:
        raise SystemExit("FAIL: %s step-1 loss %.17g vs one process %.17g" % (run_name, got[1], ref[1]))
    g, r = GRAD_NORMS[(run_name, 1)], GRAD_NORMS[(ref_name, 1)]
    if abs(g - r) > 1e-6 * r:
        raise SystemExit("FAIL: %s step-1 grad norm %.17g vs one process %.17g" % (run_name, g, r))
    compare(label or run_name, got, ref, 1e-5)


def curves(args, work):
    ref, _ = run(args, work, "one_process", 1)
    never_offload = "\n  reshard_after_forward_policy: never\n  cpu_offload: True"
    recompute = 'recompute:\n  mode: full\n  full_recompute_layer: ["0-2"]\n'
    select = 'recompute:\n  mode: select\n  select_module:\n    ".*mlp": ["0-2"]\n'
    swap = 'swap:\n  enable: True\n  default_prefetch: 1\n  layer_swap:\n    - layers: ["0-1"]\n'
    layouts = [("fsdp2_accumulating", 2, -1, "", ""), ("fsdp4", 4, -1, "", ""), ("hsdp_2x2", 4, 2, "", ""),
               ("fsdp2_never_cpu_offload", 2, -1, never_offload, ""), ("fsdp2_full_recompute", 2, -1, "", recompute),
               ("fsdp2_select_recompute", 2, -1, "", select), ("fsdp2_layer_swap", 2, -1, "", swap)]
    for name, world, shard, extra, sections in layouts:
        got, _ = run(args, work, name, world, shard, parallel_extra=extra, sections=sections,
                     report=name.startswith("fsdp2_"))
        # Step 1 depends on the initial weights and the data only: every layout must agree exactly.
        if got[1] != ref[1]:
            raise SystemExit("FAIL: %s step-1 loss %.17g differs from one process %.17g" % (name, got[1], ref[1]))
        print("  %-40s step-1 loss identical (%.17g)" % (name, got[1]))
        compare(name, got, ref, 1e-5)
    # The same curve shows a flag harmless; what each rank held, sent and peaked at in the last step
    # (--rank-report) shows it engaged, against fsdp2_accumulating, the same layout without it.
    base = REPORTS["fsdp2_accumulating"]
    for rank, (b, o) in enumerate(zip(base, REPORTS["fsdp2_never_cpu_offload"])):
        # cpu_offload keeps the parameter shards, their grads and the optimizer state in host memory,
        # which the device allocator does not count (docs/distributed.md, "cpu_offload").
        state = o["parameter_bytes"] + o["gradient_bytes"] + o["optimizer_bytes"]
        if b["mem_start_bytes"] - o["mem_start_bytes"] < state:
            raise SystemExit("FAIL: rank %d starts its step with %d device bytes under cpu_offload, %d without: not the "
                             "%d bytes of offloaded state less" % (rank, o["mem_start_bytes"], b["mem_start_bytes"], state))
        # reshard_after_forward_policy never: a unit gathered in forward stays whole for backward, so
        # the step issues fewer collectives (TorchTitan's reshard_after_forward=False).
        calls, base_calls = sum(o["collectives_per_step"].values()), sum(b["collectives_per_step"].values())
        if calls >= base_calls:
            raise SystemExit("FAIL: rank %d issued %d collectives under reshard_after_forward never, %d without" % (
                rank, calls, base_calls))
    print("  %-40s step starts with the state offloaded; fewer collectives than resharding" % "fsdp2_never_cpu_offload")
    for name in ("fsdp2_full_recompute", "fsdp2_select_recompute", "fsdp2_layer_swap"):
        # Recompute frees the selected activations until backward; swap moves them to the host pool.
        for rank, (b, o) in enumerate(zip(base, REPORTS[name])):
            if o["mem_peak_bytes"] >= b["mem_peak_bytes"]:
                raise SystemExit("FAIL: %s rank %d peaked at %d bytes, no lower than %d without it" % (
                    name, rank, o["mem_peak_bytes"], b["mem_peak_bytes"]))
        print("  %-40s peak %d bytes, %d without" % (name, REPORTS[name][0]["mem_peak_bytes"], base[0]["mem_peak_bytes"]))
    # Mixed precision: bf16 compute on fp32 weights. FSDP all-gathers the matmul weights in bf16,
    # cast on each shard exactly as the model casts them, so FSDP 4 (one micro-batch per rank, the
    # grads summed in rank order) reproduces the one-process curve bit for bit. The accumulating
    # layouts sum their fp32 grads in another order; a last-bit difference in a weight flips the
    # rounding of its bf16 copy now and then, so their curves agree to bf16's precision (2e-3 on
    # a loss near 3.5), not fp32's.
    def bf16(text):
        return text.replace("compute_dtype: float32", "compute_dtype: bfloat16")
    ref16, _ = run(args, work, "one_process_bf16", 1, edit_config=bf16)
    for name, world, shard, tolerance in [("fsdp4_bf16", 4, -1, 0.0), ("hsdp_2x2_bf16", 4, 2, 2e-3),
                                          ("fsdp2_bf16", 2, -1, 2e-3)]:
        got, _ = run(args, work, name, world, shard, edit_config=bf16)
        if got[1] != ref16[1]:
            raise SystemExit("FAIL: %s step-1 loss %.17g differs from one process %.17g" % (name, got[1], ref16[1]))
        compare(name, got, ref16, tolerance)


def moe(args, work):
    ref, _ = run(args, work, "moe_one_process", 1, model=DEEPSEEK)
    for world in (2, 4):
        got, _ = run(args, work, "moe_fsdp%d" % world, world, model=DEEPSEEK)
        if got[1] != ref[1]:
            raise SystemExit("FAIL: MoE fsdp%d step-1 loss %.17g differs from one process %.17g" % (world, got[1], ref[1]))
        compare("MoE/MLA/MTP fsdp%d" % world, got, ref, 1e-5)


def muon(args, work):
    """Muon's Newton-Schulz needs whole matrices: FSDP, HSDP and tensor parallelism hand it the
    gathered update with either comm_strategy. With one micro-batch per rank (FSDP 4) the reduced
    grads are the one-process bits, so the curve must be too, QK-clip firing on heads whose rows
    are spread over the ranks. With accumulation (FSDP 2), a replica sum (HSDP) or split products
    (TP) the grads round differently, and Newton-Schulz, in bf16, carries that a little further
    than AdamW does: within 1e-4."""
    def optimizer(strategy, threshold):
        return MUON.format(threshold=threshold, strategy=strategy)
    strategies = ("allgather", "allgather_deredundency")
    ref, _ = run(args, work, "muon_qk_clip_one_process", 1, model=DEEPSEEK_TP,
                 optimizer=optimizer("allgather", MUON_FIRING_QK_CLIP))
    for strategy in strategies:
        name = "muon_qk_clip_fsdp4_" + strategy
        got, _ = run(args, work, name, 4, model=DEEPSEEK_TP, optimizer=optimizer(strategy, MUON_FIRING_QK_CLIP))
        identical(name, got, ref)
    ref, _ = run(args, work, "muon_one_process", 1, model=DEEPSEEK_TP, optimizer=optimizer("allgather", 100))
    layouts = [("fsdp2", 2, -1, ""), ("hsdp_2x2", 4, 2, ""), ("tp2", 2, -1, "\n  tensor_parallel: 2"),
               ("tp2_fsdp2", 4, -1, "\n  tensor_parallel: 2")]
    for layout, world, shard, extra in layouts:
        for strategy in strategies:
            name = "muon_%s_%s" % (layout, strategy)
            got, _ = run(args, work, name, world, shard, parallel_extra=extra, model=DEEPSEEK_TP,
                         optimizer=optimizer(strategy, 100))
            if got[1] != ref[1]:
                raise SystemExit("FAIL: %s step-1 loss %.17g differs from one process %.17g" % (name, got[1], ref[1]))
            compare(name, got, ref, MUON_TOLERANCE)


def resume(args, work):
    ref, one_dir = run(args, work, "one_process_saving", 1, save=True)
    # one process -> four
    got, _ = run(args, work, "resume_1_to_4", 4, load_path=os.path.join(one_dir, "checkpoints", "iteration_00000010"))
    compare("saved by 1, resumed by 4", got, ref, 1e-5, first=11)
    # four -> two and -> one (the four-process run's own curve must also match)
    four, four_dir = run(args, work, "fsdp4_saving", 4, save=True)
    compare("fsdp4 (saving)", four, ref, 1e-5)
    with open(os.path.join(four_dir, "checkpoints", "iteration_00000010", "metadata.json")) as f:
        meta = json.load(f)
    if "decoder.layers.0.mlp.linear_fc1.weight" not in meta["state_dict_metadata"]:
        raise SystemExit("FAIL: metadata.json lacks the parameters")
    for world in (2, 1):
        got, _ = run(args, work, "resume_4_to_%d" % world, world, load_path=os.path.join(four_dir, "checkpoints", "iteration_00000010"))
        compare("saved by 4, resumed by %d" % world, got, ref, 1e-5, first=11)
    # bf16 compute, where FSDP gathers the matmul weights in bf16: the checkpoint still holds the
    # fp32 masters, so FSDP 4 -> one process continues the one-process bf16 curve bit for bit.
    def bf16(text):
        return text.replace("compute_dtype: float32", "compute_dtype: bfloat16")
    ref16, _ = run(args, work, "one_process_bf16_ref", 1, edit_config=bf16)
    four16, four16_dir = run(args, work, "fsdp4_bf16_saving", 4, save=True, edit_config=bf16)
    compare("fsdp4 bf16 (saving)", four16, ref16, 0.0)
    got, _ = run(args, work, "resume_4_to_1_bf16", 1, edit_config=bf16,
                 load_path=os.path.join(four16_dir, "checkpoints", "iteration_00000010"))
    compare("bf16: saved by fsdp 4, resumed by 1", got, ref16, 0.0, first=11)


# Tensor parallelism (dist/tensor_parallel.h): sizes that tp 2 and 4 divide; 2 KV heads, so at tp 4
# every KV head is shared by 2 ranks.
QWEN3_TP = """  model_type: qwen3
  vocab_size: 96
  hidden_size: 32
  intermediate_size: 48
  num_hidden_layers: 2
  num_attention_heads: 4
  num_key_value_heads: 2
  head_dim: 8
  max_position_embeddings: 32
  tie_word_embeddings: True
  params_dtype: float32
  compute_dtype: float32
"""

QWEN3_MOE_TP = """  model_type: qwen3_moe
  vocab_size: 96
  hidden_size: 32
  intermediate_size: 48
  moe_intermediate_size: 16
  num_experts: 4
  num_experts_per_tok: 2
  norm_topk_prob: True
  router_aux_loss_coef: 0.01
  num_hidden_layers: 2
  num_attention_heads: 4
  num_key_value_heads: 4
  head_dim: 8
  max_position_embeddings: 32
  params_dtype: float32
  compute_dtype: float32
"""

DEEPSEEK_TP = DEEPSEEK.replace("num_attention_heads: 2", "num_attention_heads: 4").replace(
    "moe_router_load_balancing_type: seq_aux_loss", "moe_router_load_balancing_type: seq_aux_loss\n"
    "  moe_router_enable_expert_bias: True")


def tensor(args, work):
    """TP at 2 and 4 ranks, TP inside FSDP and inside HSDP, every architecture: 20-step curves
    within 1e-5 of one process, step 1 within 1e-6 relative (rowwise products and the vocabulary-
    split loss are sums split over ranks: not bitwise)."""
    layouts = [("tp2", 2, -1, "\n  tensor_parallel: 2"), ("tp4", 4, -1, "\n  tensor_parallel: 4"),
               ("tp2_fsdp2", 4, -1, "\n  tensor_parallel: 2"), ("tp2_hsdp2x2", 8, 1, "\n  tensor_parallel: 2")]
    for arch, model in (("llama", LLAMA), ("qwen3", QWEN3_TP), ("qwen3_moe", QWEN3_MOE_TP), ("deepseek_v3", DEEPSEEK_TP)):
        ref, _ = run(args, work, arch + "_one_process", 1, model=model)
        for name, world, shard, extra in layouts:
            if arch != "llama" and name == "tp2_hsdp2x2":
                continue  # 8 processes on 2 cores: one architecture is enough
            got, _ = run(args, work, "%s_%s" % (arch, name), world, shard, parallel_extra=extra, model=model)
            compare_step1_and_curve("%s_%s" % (arch, name), got, ref, arch + "_one_process", "%s %s" % (arch, name))
    # Checkpoints of tensor-parallel shards (fc1's gate/up blocks inside FSDP rows: chunks of
    # several pieces) resume under other layouts and continue the one-process curve.
    ref, ref_dir = run(args, work, "llama_reference", 1, save=True)
    saved, saved_dir = run(args, work, "llama_tp2_fsdp2_saving", 4, save=True, parallel_extra="\n  tensor_parallel: 2")
    compare("tp2 x fsdp2 (saving)", saved, ref, 1e-5)
    ckpt = os.path.join(saved_dir, "checkpoints", "iteration_00000010")
    one, _ = run(args, work, "resume_tp2_fsdp2_to_1", 1, load_path=ckpt)
    compare("saved by tp2 x fsdp2, resumed by 1", one, ref, 1e-5, first=11)
    got, _ = run(args, work, "resume_tp2_fsdp2_to_tp4", 4, load_path=ckpt, parallel_extra="\n  tensor_parallel: 4")
    compare("saved by tp2 x fsdp2, resumed by tp4", got, ref, 1e-5, first=11)
    got, _ = run(args, work, "resume_1_to_tp2", 2, load_path=os.path.join(ref_dir, "checkpoints", "iteration_00000010"),
                 parallel_extra="\n  tensor_parallel: 2")
    compare("saved by 1, resumed by tp2", got, ref, 1e-5, first=11)


def expert(args, work):
    """Expert parallelism (dist/expert_parallel.h) on Qwen3-MoE and DeepSeek-V3 (MLA, shared
    experts, groups, expert bias, sequence balance loss, MTP): ep 2 and 4 beside FSDP, ep 2 with
    efsdp 2, ep = tp, ep inside tp x fsdp, ep > tp, and ep 2 (alone and with tp 2 x fsdp 2) under
    full recompute (the dispatch runs again in backward), cp 2 x ep 2 and cp 2 x ep 4; 20-step
    curves within 1e-5 of one process,
    step 1 within 1e-6 relative. A checkpoint saved at ep 4 (experts under their global indices)
    resumes at one process and at tp 2 x ep 2 and continues the one-process curve. Muon (both
    comm_strategy values) at ep 4, ep 2 x efsdp 2 and ep 2 x tp 2 within the muon case's 1e-4."""
    ep = lambda e, t=1: "\n  expert_parallel: %d" % e + ("\n  tensor_parallel: %d" % t if t > 1 else "")
    recompute = 'recompute:\n  mode: full\n  full_recompute_layer: ["0-1"]\n'  # the decoder layers
    layouts = [("ep2", 2, ep(2), ""), ("ep4", 4, ep(4), ""), ("ep2_efsdp2", 4, ep(2), ""), ("ep2_tp2", 2, ep(2, 2), ""),
               ("ep2_in_tp2_fsdp2", 4, ep(2, 2), ""), ("ep4_over_tp2", 4, ep(4, 2), ""),
               ("ep2_full_recompute", 2, ep(2), recompute), ("ep2_tp2_full_recompute", 4, ep(2, 2), recompute)]
    for arch, model in (("qwen3_moe", QWEN3_MOE_TP), ("deepseek_v3", DEEPSEEK_TP)):
        ref, ref_dir = run(args, work, arch + "_one_process", 1, model=model, save=arch == "deepseek_v3")
        for name, world, extra, sections in layouts:
            if arch == "qwen3_moe" and name in ("ep2_efsdp2", "ep2_in_tp2_fsdp2", "ep2_tp2_full_recompute"):
                continue  # 2 cores: the DeepSeek-V3 runs cover these layouts
            got, _ = run(args, work, "%s_%s" % (arch, name), world, parallel_extra=extra, model=model, sections=sections)
            rel = abs(got[1] - ref[1]) / abs(ref[1])
            if rel > 1e-6:
                raise SystemExit("FAIL: %s %s step-1 loss %.17g vs one process %.17g" % (arch, name, got[1], ref[1]))
            compare("%s %s" % (arch, name), got, ref, 1e-5)
    # With context parallelism (no MTP: Qwen3-MoE with a compressed mask): ep spans cp ranks too.
    cp_model = QWEN3_MOE_TP + "  use_attn_mask_compression: True\n"
    cp_ref, _ = run(args, work, "qwen3_moe_cp_one_process", 1, model=cp_model)
    for name, world, extra in (("cp2_ep2", 2, "\n  context_parallel: 2" + ep(2)),
                               ("cp2_ep4_fsdp2", 4, "\n  context_parallel: 2" + ep(4))):
        got, _ = run(args, work, "qwen3_moe_" + name, world, parallel_extra=extra, model=cp_model)
        if abs(got[1] - cp_ref[1]) > 1e-6 * abs(cp_ref[1]):
            raise SystemExit("FAIL: qwen3_moe %s step-1 loss %.17g vs one process %.17g" % (name, got[1], cp_ref[1]))
        compare("qwen3_moe " + name, got, cp_ref, 1e-5)
    saved, saved_dir = run(args, work, "deepseek_v3_ep4_saving", 4, save=True, parallel_extra=ep(4), model=DEEPSEEK_TP)
    compare("deepseek_v3 ep4 (saving)", saved, ref, 1e-5)
    ckpt = os.path.join(saved_dir, "checkpoints", "iteration_00000010")
    with open(os.path.join(ckpt, "metadata.json")) as f:
        saved_w1 = json.load(f)["state_dict_metadata"]["decoder.layers.1.mlp.experts.weight1"]
    offsets = sorted(c["global_offset"][0] for c in saved_w1["chunk"])
    if saved_w1["global_shape"] != [4, 32, 32] or offsets != [0, 1, 2, 3]:
        raise SystemExit("FAIL: ep4 saved experts.weight1 as %s with expert offsets %s; expected the global [4, 32, 32] "
                         "in one chunk per expert" % (saved_w1["global_shape"], offsets))
    print("  experts.weight1 saved as global %s, chunks at experts %s" % (saved_w1["global_shape"], offsets))
    one, _ = run(args, work, "resume_ep4_to_1", 1, load_path=ckpt, model=DEEPSEEK_TP)
    compare("saved by ep4, resumed by 1", one, ref, 1e-5, first=11)
    got, _ = run(args, work, "resume_ep4_to_tp2_ep2", 2, load_path=ckpt, parallel_extra=ep(2, 2), model=DEEPSEEK_TP)
    compare("saved by ep4, resumed by tp2 x ep2", got, ref, 1e-5, first=11)
    got, _ = run(args, work, "resume_1_to_ep2", 2, load_path=os.path.join(ref_dir, "checkpoints", "iteration_00000010"),
                 parallel_extra=ep(2), model=DEEPSEEK_TP)
    compare("saved by 1, resumed by ep2", got, ref, 1e-5, first=11)
    # Muon on the experts: each expert matrix is whole on its rank (ep and efsdp split the experts'
    # dim), so Newton-Schulz runs where the expert lives; the sums differ in order from one
    # process's, which Newton-Schulz amplifies (the muon case's tolerance).
    for strategy in ("allgather", "allgather_deredundency"):
        optimizer = MUON.format(threshold=MUON_FIRING_QK_CLIP, strategy=strategy)
        ref, _ = run(args, work, "muon_%s_one_process" % strategy, 1, model=DEEPSEEK_TP, optimizer=optimizer)
        for name, world, extra in (("ep4", 4, ep(4)), ("ep2_efsdp2", 4, ep(2)), ("ep2_tp2", 2, ep(2, 2))):
            got, _ = run(args, work, "muon_%s_%s" % (strategy, name), world, parallel_extra=extra, model=DEEPSEEK_TP,
                         optimizer=optimizer)
            compare("deepseek_v3 Muon %s %s" % (strategy, name), got, ref, MUON_TOLERANCE)


def deredundancy(args, work):
    """The de-redundant dispatcher (dist/expert_parallel.h) on Qwen3-MoE and DeepSeek-V3 with 4
    routed experts, top 2: ep 4 in two nodes of 2 ranks (a token whose two experts are on the
    other node crosses once), ep 4 in four nodes of 1, and ep 2 in nodes of 2 beside efsdp 2;
    20-step curves within 1e-5 of one process, step 1 within 1e-6 relative."""
    dered = lambda e, npu: ("\n  expert_parallel: %d\n  npu_nums_per_device: %d\n"
                            "  moe_token_dispatcher_type: alltoall_deredundancy" % (e, npu))
    layouts = [("ep4_nodes_of_2", 4, dered(4, 2)), ("ep4_nodes_of_1", 4, dered(4, 1)),
               ("ep2_nodes_of_2_efsdp2", 4, dered(2, 2))]
    for arch, model in (("qwen3_moe", QWEN3_MOE_TP), ("deepseek_v3", DEEPSEEK_TP)):
        ref, _ = run(args, work, arch + "_one_process", 1, model=model)
        for name, world, extra in layouts:
            if arch == "qwen3_moe" and name != "ep4_nodes_of_2":
                continue  # 2 cores: the DeepSeek-V3 runs cover these layouts
            run_name = "%s_%s" % (arch, name)
            got, _ = run(args, work, run_name, world, parallel_extra=extra, model=model, report=True)
            rel = abs(got[1] - ref[1]) / abs(ref[1])
            if rel > 1e-6:
                raise SystemExit("FAIL: %s %s step-1 loss %.17g vs one process %.17g" % (arch, name, got[1], ref[1]))
            compare("%s %s" % (arch, name), got, ref, 1e-5)
            # The dispatcher engaged: per MoE layer and micro-batch, plain alltoall issues 5 collectives
            # on ep (the counts and the rows to the experts, the outputs back; the rows' two duals in
            # backward), the de-redundant one 13: across nodes the row counts, the rows, their routing
            # weights and choices, inside the node alltoall's counts and rows, then the outputs back
            # inside and across (8), and the duals of the four differentiable row exchanges and of
            # the routing weights' (5). Both models have 2 MoE layers (DeepSeek-V3's MTP layer is
            # one), every layout here 1 micro-batch per rank.
            for rank, r in enumerate(REPORTS[run_name]):
                calls = r["collectives_per_step"][r["mesh_groups"]["ep"]]
                if calls != 13 * 2:
                    raise SystemExit("FAIL: %s rank %d issued %d collectives on ep in a step; the de-redundant "
                                     "dispatcher issues 13 per MoE layer (26), plain alltoall 5 (10)" % (
                                         run_name, rank, calls))
            print("  %-40s 13 ep collectives per MoE layer: the de-redundant dispatcher" % run_name)
    # Experts saved under their global indices by the de-redundant layout resume under plain
    # alltoall at ep 2 and continue the one-process curve.
    saved, saved_dir = run(args, work, "deepseek_v3_dered_saving", 4, save=True, parallel_extra=dered(4, 2),
                           model=DEEPSEEK_TP)
    compare("deepseek_v3 ep4_nodes_of_2 (saving)", saved, ref, 1e-5)
    got, _ = run(args, work, "resume_dered_to_ep2", 2, parallel_extra="\n  expert_parallel: 2", model=DEEPSEEK_TP,
                 load_path=os.path.join(saved_dir, "checkpoints", "iteration_00000010"))
    compare("saved by ep4 nodes of 2, resumed by ep2 alltoall", got, ref, 1e-5, first=11)


def write_packed_data(prefix, vocab=96, eod=95, num_tokens=60000):
    """Documents of 3..20 tokens, each ending with the EOD token, packed into one stream: every
    sample of 32 tokens holds several (Megatron's GPTDataset packs across documents)."""
    import numpy as np
    rng = np.random.RandomState(11)
    tokens = []
    while len(tokens) < num_tokens:
        start, length = rng.randint(0, eod), rng.randint(3, 20)
        tokens.extend(list((start + np.arange(length - 1)) % eod) + [eod])
    tokens = np.array(tokens[:num_tokens], dtype=np.uint16)
    lengths = [512] * (num_tokens // 512)
    tokens = tokens[:sum(lengths)]
    write_indexed(prefix, tokens, lengths)


PACKED_DATASET = """      create_attention_mask: False
      reset_position_ids: True
      reset_attention_mask: True
      create_compressed_eod_mask: True
      eod_pad_length: 16
      eod: 95
"""


def context(args, work):
    """Context parallelism (dist/context_parallel.h): the ring at cp 2 and 4, inside FSDP and with
    TP, both splits (the load-balanced one per document on packed data), Ulysses at 2 and 4, hybrid
    at 4 (u = 2), DeepSeek-V3 with MTP at cp 2, plain data (use_attn_mask_compression) and EOD-packed
    data. The loss is a token
    sum over the cp ranks, so step 1 matches one process within 1e-6 relative (the block merge and
    the split sums round differently: not bitwise) and the curves within 1e-5."""
    write_packed_data(os.path.join(work, "packed"))
    plain_model = LLAMA + "  use_attn_mask_compression: True\n"

    def packed_dataset(text):
        text = text.replace(os.path.join(work, "data"), os.path.join(work, "packed"))
        return text.replace("      create_attention_mask: False\n", PACKED_DATASET)

    def run_cp(name, world, extra, packed, model=plain_model, **kw):
        return run(args, work, name, world, parallel_extra=extra, model=model,
                   edit_config=packed_dataset if packed else None, **kw)

    contiguous = "\n  context_parallel_load_balance: False"
    layouts = [("cp2", 2, "\n  context_parallel: 2"), ("cp4", 4, "\n  context_parallel: 4"),
               ("cp2_contiguous", 2, "\n  context_parallel: 2" + contiguous),
               ("cp4_contiguous", 4, "\n  context_parallel: 4" + contiguous),
               ("cp2_fsdp2", 4, "\n  context_parallel: 2"),
               ("cp2_tp2", 4, "\n  context_parallel: 2\n  tensor_parallel: 2"),
               ("ulysses2", 2, "\n  context_parallel: 2\n  context_parallel_method: ulysses"),
               ("ulysses4", 4, "\n  context_parallel: 4\n  context_parallel_method: ulysses"),
               ("hybrid4", 4, "\n  context_parallel: 4\n  context_parallel_method: hybrid\n  ulysses_degree_in_cp: 2")]
    for packed in (False, True):
        data = "packed" if packed else "plain"
        ref, _ = run_cp("context_%s_one_process" % data, 1, "", packed)
        for name, world, extra in layouts:
            if packed and name in ("cp4_contiguous",):
                continue  # 4 processes on 2 cores: the contiguous split is covered at cp 2
            run_name = "context_%s_%s" % (data, name)
            got, _ = run_cp(run_name, world, extra, packed)
            compare_step1_and_curve(run_name, got, ref, "context_%s_one_process" % data, "%s data %s" % (data, name))
    # DeepSeek-V3's MTP layer (shifted ids, labels, mask and positions) at cp 2, the packed data
    # cut per document.
    mtp_model = DEEPSEEK + "  use_attn_mask_compression: True\n"
    for packed in (False, True):
        data = "packed" if packed else "plain"
        ref_name = "context_mtp_%s_one_process" % data
        ref, _ = run_cp(ref_name, 1, "", packed, model=mtp_model)
        for name, world, extra in (("cp2", 2, "\n  context_parallel: 2"),
                                   ("ulysses2", 2, "\n  context_parallel: 2\n  context_parallel_method: ulysses")):
            run_name = "context_mtp_%s_%s" % (data, name)
            got, _ = run_cp(run_name, world, extra, packed, model=mtp_model)
            compare_step1_and_curve(run_name, got, ref, ref_name, "deepseek_v3 MTP %s data %s" % (data, name))
    # Parameters are sharded over dp_shard x cp: a cp 2 checkpoint reshards to cp 1 and cp 4.
    ref, _ = run_cp("context_reference", 1, "", False)
    saved, saved_dir = run_cp("context_cp2_saving", 2, "\n  context_parallel: 2", False, save=True)
    compare("cp2 (saving)", saved, ref, 1e-5)
    ckpt = os.path.join(saved_dir, "checkpoints", "iteration_00000010")
    got, _ = run_cp("resume_cp2_to_1", 1, "", False, load_path=ckpt)
    compare("saved by cp2, resumed by 1", got, ref, 1e-5, first=11)
    got, _ = run_cp("resume_cp2_to_cp4", 4, "\n  context_parallel: 4", False, load_path=ckpt)
    compare("saved by cp2, resumed by cp4", got, ref, 1e-5, first=11)


# Pipeline parallelism (dist/pipeline.h, runtime/pipeline_schedule.h): 4 layers so pp 2 and 4 split
# them evenly and pp 3 takes an explicit list.
LLAMA_PP = LLAMA.replace("num_hidden_layers: 3", "num_hidden_layers: 4")


def pipeline(args, work):
    """Every stage layout against one process: the loss comes from the last stage (every rank logs
    it), the grad norm sums the stages, the tied or MTP-shared embedding's grad sums the first and
    last stage. Step 1 within 1e-6 relative (the shared embedding's grad is a sum of two stages' parts
    in another order), 20-step curves within 1e-5; GPipe, backward/forward overlap at pp2 x ep2, and
    Muon with QK-clip firing at pp2 (bit for bit) and pp2 x fsdp2 (within the muon case's 1e-4)."""
    def pp(n, extra=""):
        return "\n  pipeline_parallel: %d%s" % (n, extra)
    def layers(*stages):
        return "\n  pipeline_parallel_layers_per_stage: [%s]" % ", ".join('"%s"' % s for s in stages)

    ref, ref_dir = run(args, work, "pp_one_process", 1, save=True, model=LLAMA_PP)
    layouts = [("pp2", 2, pp(2)), ("pp3_list", 3, pp(3, layers("0", "1-2", "3"))),
               ("pp4", 4, pp(4)), ("pp2_uneven", 2, pp(2, layers("0", "1-3"))),
               ("pp2_v2", 2, pp(2, "\n  pipeline_parallel_interleave_num: 2")),
               ("pp2_overlap_p2p", 2, pp(2, "\n  pipeline_parallel_overlap_p2p: True")),
               ("pp2_fsdp2", 4, pp(2)), ("pp2_tp2", 4, pp(2, "\n  tensor_parallel: 2"))]
    for name, world, extra in layouts:
        got, _ = run(args, work, name, world, parallel_extra=extra, model=LLAMA_PP,
                     report=name in ("pp2", "pp2_overlap_p2p"))
        compare_step1_and_curve(name, got, ref, "pp_one_process")
    # overlap_p2p engaged: the next action's receive is posted before this action computes, so its
    # buffer is held one action longer (runtime/pipeline_schedule.h); on the first stage, whose
    # receives are the grads of the boundary activation [2, 32, 40] fp32, the peak grows by it.
    boundary = 2 * 32 * 40 * 4
    grown = REPORTS["pp2_overlap_p2p"][0]["mem_peak_bytes"] - REPORTS["pp2"][0]["mem_peak_bytes"]
    if grown < boundary:
        raise SystemExit("FAIL: pp2_overlap_p2p's first stage peaked %d bytes above pp2's; a receive posted one action "
                         "early holds a %d-byte boundary grad" % (grown, boundary))
    print("  %-40s first stage holds an early receive: peak +%d bytes" % ("pp2_overlap_p2p", grown))
    # Context parallelism inside each stage: the stage's chunks run the decoder through its CP
    # wrapper (local positions), the first stage splits the inputs, the last the labels; ring at
    # v 1, Ulysses at v 2, and DeepSeek-V3 with MTP (on the last stage) over the ring.
    cp_model = LLAMA_PP + "  use_attn_mask_compression: True\n"
    cp_ref, _ = run(args, work, "pp_cp_one_process", 1, model=cp_model)
    for name, extra in (("pp2_cp2", pp(2, "\n  context_parallel: 2")),
                        ("pp2_v2_cp2_ulysses", pp(2, "\n  pipeline_parallel_interleave_num: 2\n  context_parallel: 2"
                                                    "\n  context_parallel_method: ulysses"))):
        got, _ = run(args, work, name, 4, parallel_extra=extra, model=cp_model)
        compare_step1_and_curve(name, got, cp_ref, "pp_cp_one_process")
    # A pp2 x cp2 checkpoint resumes on one process.
    saved, saved_dir = run(args, work, "pp2_cp2_saving", 4, save=True, parallel_extra=pp(2, "\n  context_parallel: 2"),
                           model=cp_model)
    compare("pp2_cp2 (saving)", saved, cp_ref, 1e-5)
    got, _ = run(args, work, "resume_pp2_cp2_to_1", 1, model=cp_model,
                 load_path=os.path.join(saved_dir, "checkpoints", "iteration_00000010"))
    compare("saved by pp2 x cp2, resumed by 1", got, cp_ref, 1e-5, first=11)
    mtp_cp = DEEPSEEK + "  use_attn_mask_compression: True\n"
    mtp_cp_ref, _ = run(args, work, "deepseek_v3_mtp_cp_one_process", 1, model=mtp_cp)
    got, _ = run(args, work, "deepseek_v3_mtp_pp2_cp2", 4, parallel_extra=pp(2, "\n  context_parallel: 2"), model=mtp_cp)
    compare_step1_and_curve("deepseek_v3_mtp_pp2_cp2", got, mtp_cp_ref, "deepseek_v3_mtp_cp_one_process")
    # GPipe (a Loom extension): the same micro-batch order as 1F1B, so the same grads.
    got, _ = run(args, work, "pp2_gpipe", 2, parallel_extra=pp(2, "\n  pipeline_parallel_schedule: gpipe"),
                 model=LLAMA_PP, report=True)
    compare_step1_and_curve("pp2_gpipe", got, ref, "pp_one_process")
    # GPipe engaged: all 4 forwards run before the first backward, so the last stage holds the
    # activations of 4 micro-batches where 1F1B's holds one (GPipe, Huang et al. 2019; 1F1B,
    # PipeDream-Flush): its step's activation peak (peak - bytes at the step's start) more than twice
    # 1F1B's.
    gpipe, one_f_one_b = REPORTS["pp2_gpipe"][1], REPORTS["pp2"][1]
    held, held_1f1b = (r["mem_peak_bytes"] - r["mem_start_bytes"] for r in (gpipe, one_f_one_b))
    if held <= 2 * held_1f1b:
        raise SystemExit("FAIL: pp2_gpipe's last stage held %d activation bytes at its peak, 1F1B's %d: not the "
                         "schedule that holds every micro-batch" % (held, held_1f1b))
    print("  %-40s last stage's activation peak %d bytes, 1F1B's %d" % ("pp2_gpipe", held, held_1f1b))
    for arch, model in (("qwen3_tied", QWEN3_TP), ("deepseek_v3_mtp", DEEPSEEK)):
        arch_ref, _ = run(args, work, arch + "_one_process", 1, model=model)
        got, _ = run(args, work, arch + "_pp2", 2, parallel_extra=pp(2), model=model)
        compare_step1_and_curve(arch + "_pp2", got, arch_ref, arch + "_one_process")
    # Backward/forward overlap on a MoE model (two layers per stage, so each stage's backward
    # alternates layer by layer with the next forward) with the experts over ep 2 in each stage.
    moe4 = DEEPSEEK.replace("num_hidden_layers: 2", "num_hidden_layers: 4")
    moe4_ref, _ = run(args, work, "deepseek_v3_4_layers_one_process", 1, model=moe4)
    got, _ = run(args, work, "pp2_ep2_overlap_b_f", 4, model=moe4,
                 parallel_extra=pp(2, "\n  expert_parallel: 2\n  pipeline_parallel_overlap_b_f: True"))
    compare_step1_and_curve("pp2_ep2_overlap_b_f", got, moe4_ref, "deepseek_v3_4_layers_one_process")
    # Muon with QK-clip firing on every head of both stages (MLA layer 0 on the first, layer 1 on
    # the last; no MTP, whose shared embedding's two-stage sum rounds differently): each stage
    # clips with its own layers' maxima, so pp 2 gives the one-process curve bit for bit, and
    # pp 2 x fsdp 2 (maxima reduced over the stage's data-parallel ranks, grads summed in another
    # order) stays within the muon case's tolerance.
    no_mtp = DEEPSEEK.replace("num_nextn_predict_layers: 1", "num_nextn_predict_layers: 0")
    muon_qk = MUON.format(threshold=MUON_FIRING_QK_CLIP, strategy="allgather")
    muon_ref, _ = run(args, work, "muon_qk_clip_pp_one_process", 1, model=no_mtp, optimizer=muon_qk)
    got, _ = run(args, work, "muon_qk_clip_pp2", 2, parallel_extra=pp(2), model=no_mtp, optimizer=muon_qk)
    identical("muon_qk_clip_pp2", got, muon_ref)
    got, _ = run(args, work, "muon_qk_clip_pp2_fsdp2", 4, parallel_extra=pp(2), model=no_mtp, optimizer=muon_qk)
    compare("muon_qk_clip_pp2_fsdp2", got, muon_ref, MUON_TOLERANCE)
    # Each stage saves its own layers under their global names; any layout resumes them.
    saved, saved_dir = run(args, work, "pp2_saving", 2, save=True, parallel_extra=pp(2), model=LLAMA_PP)
    compare("pp2 (saving)", saved, ref, 1e-5)
    ckpt = os.path.join(saved_dir, "checkpoints", "iteration_00000010")
    with open(os.path.join(ckpt, "metadata.json")) as f:
        meta = json.load(f)["state_dict_metadata"]
    for needed in ("embedding.word_embeddings.weight", "decoder.layers.0.mlp.linear_fc1.weight",
                   "decoder.layers.3.mlp.linear_fc1.weight", "output_layer.weight"):
        if needed not in meta:
            raise SystemExit("FAIL: the pp2 checkpoint's metadata.json lacks %s" % needed)
    for name, world, extra in (("resume_pp2_to_1", 1, ""), ("resume_pp2_to_pp4", 4, pp(4)),
                               ("resume_pp2_to_list", 2, pp(2, layers("0-2", "3")))):
        got, _ = run(args, work, name, world, load_path=ckpt, parallel_extra=extra, model=LLAMA_PP)
        compare(name, got, ref, 1e-5, first=11)
    got, _ = run(args, work, "resume_1_to_pp2_v2", 2,
                 load_path=os.path.join(ref_dir, "checkpoints", "iteration_00000010"),
                 parallel_extra=pp(2, "\n  pipeline_parallel_interleave_num: 2"), model=LLAMA_PP)
    compare("resume_1_to_pp2_v2", got, ref, 1e-5, first=11)


def launch(args, work):
    dry = subprocess.run([args.loom, "launch", "-n", "3", "--dry-run", "--", "train", "--config", "x.yaml"],
                         env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    for needed in ("OMPI_ALLOW_RUN_AS_ROOT=1", "-np 3", "--oversubscribe", "btl_tcp_if_include lo", "train --config x.yaml"):
        if dry.returncode != 0 or needed not in dry.stdout:
            raise SystemExit("FAIL: loom launch --dry-run printed %r; expected %r in it" % (dry.stdout, needed))
    print("  loom launch --dry-run: " + dry.stdout.strip())
    # --mca replaces loom's own value for its key; over several hosts (a hostfile, a Slurm allocation
    # of several nodes) TCP is no longer pinned to loopback. tests/dist/multihost runs such a launch.
    hosts = os.path.join(work, "hosts")
    with open(hosts, "w") as f:
        f.write("node1 slots=2\nnode2 slots=2\n")
    missing = subprocess.run([args.loom, "launch", "-n", "4", "--dry-run", "--hostfile", hosts + ".missing", "--",
                              "train"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    if missing.returncode != 2 or "--hostfile " + hosts + ".missing" not in missing.stdout:
        raise SystemExit("FAIL: loom launch with a missing hostfile printed %r (exit %d); expected an error naming "
                         "--hostfile" % (missing.stdout, missing.returncode))
    for options, env, present, absent in (
            (["--mca", "btl", "tcp,self"], {}, ["--mca btl tcp,self "], ["self,vader,tcp"]),
            (["--hostfile", hosts], {}, ["--hostfile " + hosts], ["if_include lo"]),
            ([], {"SLURM_JOB_NUM_NODES": "2"}, [], ["if_include lo"]),
            ([], {"SLURM_JOB_NUM_NODES": "1"}, ["btl_tcp_if_include lo", "oob_tcp_if_include lo"], [])):
        dry = subprocess.run([args.loom, "launch", "-n", "4", "--dry-run"] + options + ["--", "train"],
                             env=dict(ENV, **env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        if (dry.returncode != 0 or any(p not in dry.stdout for p in present)
                or any(a in dry.stdout for a in absent)):
            raise SystemExit("FAIL: loom launch %s (%s) --dry-run printed %r; expected %r in it and not %r" % (
                " ".join(options), env, dry.stdout, present, absent))
    print("  loom launch --dry-run: --mca replaces the defaults; a hostfile or Slurm nodes drop the loopback pinning")
    ref, _ = run(args, work, "one_process", 1)
    got, run_dir = run(args, work, "loom_launch_2", 2, launch=True)
    compare("loom launch -n 2", got, ref, 1e-5)
    with open(os.path.join(run_dir, "train.log")) as f:
        log = f.read()
    if "(2 processes)" not in log:
        raise SystemExit("FAIL: train.log does not show a 2-process run")
    # Layout and start-up errors: every rank exits non-zero at once, with the message naming the
    # field; updates that would make the weights non-finite are skipped on every rank at the same
    # step (the verdict is agreed), until more than global_norm_skip_time in a row stop them all.
    cases = [("batch_too_small", "local_batch_size: 2", "local_batch_size: 8", "global_batch_size", {}),
             ("pipeline_swap", "data_parallel_shard: -1", "data_parallel_shard: -1\n  pipeline_parallel: 2\n"
              "  pipeline_parallel_layers_per_stage: ['0-1', '2']\nswap:\n  enable: True\n  default_prefetch: 1\n"
              "  layer_swap:\n    - layers: ['0-1']", "swap is not supported with pipeline parallel", {}),
             ("shard_misfit", "data_parallel_shard: -1", "data_parallel_shard: 4",
              "parallelism.data_parallel_shard: is 4 but the inferred shard degree is 2", {}),
             ("memory_misfit", "data_parallel_shard: -1", "data_parallel_shard: -1", "the run needs at least",
              {"LOOM_MEMORY_LIMIT": "1K"}),
             ("non_finite_update", "learning_rate: 3.e-3", "learning_rate: 1.e+39",
              "11 updates in a row were skipped (the update would make '", {})]
    world = 2
    for name, old, new, expected, env in cases:
        config, run_dir = write_config(work, name)
        with open(config) as f:
            text = f.read().replace(old, new)
        with open(config, "w") as f:
            f.write(text)
        t0 = time.time()
        p = subprocess.run([args.mpirun, "-np", str(world)] + MPI_FLAGS + [args.loom, "train", "--config", config,
                                                                           "--output", run_dir],
                           env=dict(ENV, **env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        took = time.time() - t0
        if p.returncode == 0 or expected not in p.stdout or took > 20 or os.path.exists(
                os.path.join(run_dir, "checkpoints", "latest_checkpointed_iteration.txt")):
            print(p.stdout)
            raise SystemExit("FAIL: %s: exit %d after %.1fs; expected non-zero with '%s'" % (name, p.returncode, took,
                                                                                           expected))
        print("  %-40s every rank exited (code %d, %.1fs) with '%s'" % (name, p.returncode, took, expected))


def evaluation(args, work):
    """Validation during training (training.eval_interval) and `loom eval` under every layout: the
    token-weighted validation loss after steps 2 and 4 of each layout equals one process's within
    1e-6 relative (fp32; the layouts sum in other orders), with FSDP 2, HSDP 2x2, TP 2, CP 2 (ring
    and Ulysses on EOD-packed documents, hybrid 4), PP 2 and interleaved PP 2 x FSDP 2, EP 2 and a
    product (TP 2 x PP 2); `loom eval` of the TP 2 x FSDP 2 run's checkpoint, run by
    `loom launch -n 4` in that layout, gives its last validation loss."""
    write_packed_data(os.path.join(work, "packed"))
    validate = "\n  eval_interval: 2\n  eval_iters: 2"

    def with_validation(packed):
        def edit(text):
            text = text.replace('split: "1, 0, 0"', 'split: "9, 1, 0"').replace("  deterministic: True",
                                                                              "  deterministic: True" + validate)
            if packed:
                text = text.replace(os.path.join(work, "data"), os.path.join(work, "packed"))
                text = text.replace("      create_attention_mask: False\n", PACKED_DATASET)
            return text
        return edit

    refs = {}

    def check(name, world, extra, model, packed, ref_name, **kw):
        got, _ = run(args, work, name, world, steps=4, parallel_extra=extra, model=model,
                     edit_config=with_validation(packed), **kw)
        compare(name, got, refs[ref_name], 1e-5)  # the training steps between the validations
        for step in (2, 4):
            got, want = VAL_LOSSES[(name, step)], VAL_LOSSES[(ref_name, step)]
            if abs(got - want) > 1e-6 * abs(want):
                raise SystemExit("FAIL: %s validation after step %d: %.17g, one process %.17g" % (name, step, got, want))
        print("  %-40s validation losses = one process's within 1e-6" % name)

    plain, moe = LLAMA_PP, DEEPSEEK_TP
    cp_model = LLAMA + "  use_attn_mask_compression: True\n"
    for ref_name, model, packed in (("eval_one_process", plain, False), ("eval_moe_one_process", moe, False),
                                    ("eval_packed_one_process", cp_model, True)):
        refs[ref_name], _ = run(args, work, ref_name, 1, steps=4, model=model, edit_config=with_validation(packed))
    check("eval_fsdp2", 2, "", plain, False, "eval_one_process")
    check("eval_hsdp_2x2", 4, "", plain, False, "eval_one_process", shard=2)
    check("eval_tp2", 2, "\n  tensor_parallel: 2", plain, False, "eval_one_process")
    check("eval_pp2", 2, "\n  pipeline_parallel: 2", plain, False, "eval_one_process")
    check("eval_pp2_v2_fsdp2", 4, "\n  pipeline_parallel: 2\n  pipeline_parallel_interleave_num: 2", plain, False,
          "eval_one_process")
    check("eval_tp2_pp2", 4, "\n  tensor_parallel: 2\n  pipeline_parallel: 2", plain, False, "eval_one_process")
    check("eval_ep2", 2, "\n  expert_parallel: 2", moe, False, "eval_moe_one_process")
    check("eval_cp2_packed", 2, "\n  context_parallel: 2", cp_model, True, "eval_packed_one_process")
    check("eval_ulysses2_packed", 2, "\n  context_parallel: 2\n  context_parallel_method: ulysses", cp_model, True,
          "eval_packed_one_process")
    check("eval_hybrid4_packed", 4, "\n  context_parallel: 4\n  context_parallel_method: hybrid\n"
          "  ulysses_degree_in_cp: 2", cp_model, True, "eval_packed_one_process")
    # loom eval in a layout, on the checkpoint a run of that layout saved.
    check("eval_tp2_fsdp2_saving", 4, "\n  tensor_parallel: 2", plain, False, "eval_one_process", save=True)
    saved = os.path.join(work, "eval_tp2_fsdp2_saving")
    config = saved + ".yaml"
    cmd = [args.loom, "launch", "-n", "4", "--mpirun", args.mpirun, "--threads", "1", "--", "eval", "--config", config,
           "--load", os.path.join(saved, "checkpoints"), "--iters", "2", "--json"]
    p = subprocess.run(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=240)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        raise SystemExit("FAIL: loom eval under loom launch exited with %d" % p.returncode)
    got = json.loads(p.stdout.strip().splitlines()[-1])["loss"]
    want = VAL_LOSSES[("eval_tp2_fsdp2_saving", 4)]
    if abs(got - want) > 1e-12 * abs(want):
        raise SystemExit("FAIL: loom eval of the step-4 checkpoint gives %.17g, the run validated %.17g" % (got, want))
    print("  %-40s loom eval (4 ranks, tp 2 x fsdp 2) = the run's step-4 validation" % "eval_command")


def sampling(args, work):
    """Samples while training (training.sample_interval) under every layout: the greedy
    continuations logged after steps 2 and 3 are one process's, token for token. FSDP and HSDP
    generate with the KV cache on the gathered model; TP, CP, PP and EP re-run the layout's forward
    over the sequence for every token (runtime::generate_without_cache through Schedule::logits)."""
    tokenizer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "data", "tokenizers",
                             "byte_fallback")
    sample = ("\n  sample_interval: 2\n  sample_prompts: ['hello world', 'a-b']\n  sample_max_new_tokens: 6\n"
              "  sample_tokenizer: '%s'" % tokenizer)

    def with_samples(text):
        # The fixture tokenizer has 338 tokens: the model's vocabulary grows to hold them.
        return text.replace("  deterministic: True", "  deterministic: True" + sample).replace(
            "vocab_size: 96", "vocab_size: 384")

    plain, moe = LLAMA_PP, DEEPSEEK_TP
    cp_model = LLAMA + "  use_attn_mask_compression: True\n"
    refs = {}
    for ref_name, model in (("sample_one_process", plain), ("sample_moe_one_process", moe),
                            ("sample_cp_one_process", cp_model)):
        run(args, work, ref_name, 1, steps=3, model=model, edit_config=with_samples)
        refs[model] = ref_name
    layouts = [("sample_fsdp2", 2, -1, "", plain), ("sample_hsdp_2x2", 4, 2, "", plain),
               ("sample_tp2", 2, -1, "\n  tensor_parallel: 2", plain),
               ("sample_pp2", 2, -1, "\n  pipeline_parallel: 2", plain),
               ("sample_tp2_pp2", 4, -1, "\n  tensor_parallel: 2\n  pipeline_parallel: 2", plain),
               ("sample_cp2", 2, -1, "\n  context_parallel: 2", cp_model),
               ("sample_ep2", 2, -1, "\n  expert_parallel: 2", moe)]
    for name, world, shard, extra, model in layouts:
        run(args, work, name, world, shard, steps=3, parallel_extra=extra, model=model, edit_config=with_samples)
        for step in (2, 3):
            got, want = SAMPLES.get((name, step)), SAMPLES.get((refs[model], step))
            if not want or got != want:
                raise SystemExit("FAIL: %s samples after step %d: %r, one process %r" % (name, step, got, want))
        print("  %-40s samples = one process's: %r" % (name, SAMPLES[(name, 3)]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--case", choices=["curves", "resume", "launch", "moe", "tensor", "muon", "context", "expert",
                                       "deredundancy", "pipeline", "evaluation", "sampling"], required=True)
    ap.add_argument("--keep", default="")
    args = ap.parse_args()
    cases = {"curves": curves, "resume": resume, "launch": launch, "moe": moe, "tensor": tensor, "muon": muon,
             "context": context, "expert": expert, "deredundancy": deredundancy, "pipeline": pipeline,
             "evaluation": evaluation, "sampling": sampling}
    in_work_dir(args.keep, "loom-parity-", lambda work: cases[args.case](args, work))


def in_work_dir(keep, prefix, body):
    """Runs body(work) in a fresh directory holding the test data (or in `keep`, left behind),
    prints PASS when it returns, and removes the directory whatever happens."""
    work = keep or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(work, exist_ok=True)
    try:
        write_data(os.path.join(work, "data"))
        body(work)
        print("PASS")
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
