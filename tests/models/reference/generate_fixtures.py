"""Writes tests/fixtures/models/<arch>/: an HF folder (config.json + model.safetensors, or shards with
model.safetensors.index.json for llama) with tiny random weights, and golden.safetensors holding
input_ids, labels, loss_mask and the expected logits [B, S, V] (float64) and losses of the numpy
reference implementation. Run with a python3 that imports numpy (scripts/find-python.sh finds one):
    python3 tests/models/reference/generate_fixtures.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_v3  # noqa: E402
import llama  # noqa: E402
import qwen3  # noqa: E402
import qwen3_moe  # noqa: E402
from common import token_mean_ce, write_golden, write_hf_folder  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures", "models")
B, S = 2, 7


def batch(vocab, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(B, S)).astype(np.int64)
    labels = rng.integers(0, vocab, size=(B, S)).astype(np.int64)
    mask = np.ones((B, S), dtype=np.float32)
    mask[0, 2] = 0.0
    mask[1, 5] = 0.0
    return ids, labels, mask


def main():
    models = [("llama", llama, llama.LLAMA_CONFIG, 2), ("qwen3", qwen3, qwen3.QWEN3_CONFIG, 1),
              ("qwen3_moe", qwen3_moe, qwen3_moe.QWEN3_MOE_CONFIG, 1),
              ("deepseek_v3", deepseek_v3, deepseek_v3.DEEPSEEK_V3_CONFIG, 1)]
    for seed, (name, module, cfg, shards) in enumerate(models):
        folder = os.path.join(ROOT, name)
        W = module.weights(1000 + seed)
        ids, labels, mask = batch(cfg["vocab_size"], 2000 + seed)
        golden = {"input_ids": ids, "labels": labels, "loss_mask": mask}
        if name == "deepseek_v3":
            logits, loss, mtp_loss = deepseek_v3.run(W, ids, labels, mask.astype(np.float64))
            golden["mtp_loss"] = np.array(mtp_loss)
        else:
            logits = module.logits(W, ids)
            loss = token_mean_ce(logits, labels, mask.astype(np.float64))
        golden["logits"] = logits.astype(np.float64)
        golden["loss"] = np.array(loss)
        write_hf_folder(folder, cfg, W, shards=shards)
        write_golden(folder, golden)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        assert size < 200 * 1024, (name, size)
        print("%-12s %3d tensors  %6d bytes  loss %.6f" % (name, len(W), size, loss))


if __name__ == "__main__":
    main()
