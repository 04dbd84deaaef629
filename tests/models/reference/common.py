"""Numpy building blocks of the HF reference models (float64), independent of Loom.

Follows HF transformers' modeling_llama / modeling_qwen3 / modeling_qwen3_moe /
modeling_deepseek_v3: RMSNorm w·x·rsqrt(mean(x²)+eps), rotate-half RoPE
(cos = cat(freqs, freqs)), DeepSeek's interleave permutation before rotate-half, YaRN frequencies
and attention factor, causal softmax attention with GQA, SwiGLU MLPs, top-k routers.
"""
import json
import math
import os
import struct

import numpy as np

DTYPES = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int64"): "I64",
          np.dtype("int32"): "I32"}


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: np.ndarray} as a safetensors file with Python's struct/json only."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    blobs = []
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode("utf-8"))
        for b in blobs:
            f.write(b)


def write_hf_folder(folder, config, weights, shards=1):
    """config.json + model.safetensors (or `shards` files and model.safetensors.index.json)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    weights32 = {k: v.astype(np.float32) for k, v in weights.items()}
    if shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), weights32, {"format": "pt"})
        return
    names = list(weights32)
    per = (len(names) + shards - 1) // shards
    weight_map, total = {}, 0
    for i in range(shards):
        file = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        part = {n: weights32[n] for n in names[i * per:(i + 1) * per]}
        write_safetensors(os.path.join(folder, file), part, {"format": "pt"})
        for n, v in part.items():
            weight_map[n] = file
            total += v.nbytes
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")


def f32(x):
    """Weights are stored as float32: the reference computes with exactly the stored values."""
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def rms_norm(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def default_inv_freq(dim, theta):
    return 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))


def yarn_get_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_inv_freq(dim, theta, rs):
    """HF _compute_yarn_parameters: (inv_freq, attention_factor)."""
    factor = rs["factor"]
    mscale, mscale_all_dim = rs.get("mscale"), rs.get("mscale_all_dim")
    if rs.get("attention_factor") is not None:
        attention_factor = rs["attention_factor"]
    elif mscale and mscale_all_dim:
        attention_factor = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
    else:
        attention_factor = yarn_get_mscale(factor)
    beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1
    orig = rs["original_max_position_embeddings"]

    def correction_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(theta))

    low, high = math.floor(correction_dim(beta_fast)), math.ceil(correction_dim(beta_slow))
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    pos = theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    inv = (1.0 / (factor * pos)) * (1 - extrapolation) + (1.0 / pos) * extrapolation
    return inv, attention_factor


def cos_sin(positions, inv_freq, attention_factor=1.0):
    freqs = np.outer(positions.astype(np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb) * attention_factor, np.sin(emb) * attention_factor


def apply_rope(x, cos, sin):
    """x [B, H, S, D], cos/sin [S, D]."""
    return x * cos + rotate_half(x) * sin


def interleave_to_half(x):
    """HF apply_rotary_pos_emb_interleave: (x0, x1, x2, x3, ...) → (x0, x2, ..., x1, x3, ...)."""
    b, h, s, d = x.shape
    return x.reshape(b, h, s, d // 2, 2).transpose(0, 1, 2, 4, 3).reshape(b, h, s, d)


def causal_attention(q, k, v, scale):
    """q [B, H, S, D], k [B, KV, S, D], v [B, KV, S, Dv] → [B, S, H·Dv]."""
    B, H, S, _ = q.shape
    rep = H // k.shape[1]
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    scores = np.einsum("bhsd,bhtd->bhst", q, k) * scale
    mask = np.triu(np.ones((S, S), dtype=bool), 1)
    scores = np.where(mask, -np.inf, scores)
    p = softmax(scores, -1)
    o = np.einsum("bhst,bhtd->bhsd", p, v)
    return o.transpose(0, 2, 1, 3).reshape(B, S, -1)


def swiglu_mlp(x, gate, up, down):
    return (silu(x @ gate.T) * (x @ up.T)) @ down.T


def token_mean_ce(logits, labels, mask):
    """MindFormers CrossEntropyLoss: Σ ce·mask / (Σ mask + 1e-8)."""
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    ce = -np.take_along_axis(logp, labels[..., None], -1)[..., 0]
    return float((ce * mask).sum() / (mask.sum() + 1e-8))


def roll_left(x):
    """MindFormers roll_tensor: shift left by one along the sequence, zero-filling the end."""
    out = np.zeros_like(x)
    out[:, :-1] = x[:, 1:]
    return out


class Weights:
    """Deterministic tiny random weights, kept float32-exact."""

    def __init__(self, seed, std=0.3):
        self.rng = np.random.default_rng(seed)
        self.std = std
        self.tensors = {}

    def normal(self, name, shape, std=None):
        w = f32(self.rng.normal(0.0, self.std if std is None else std, size=shape))
        self.tensors[name] = w
        return w

    def norm(self, name, dim):
        w = f32(1.0 + 0.1 * self.rng.normal(size=dim))
        self.tensors[name] = w
        return w

    def bias(self, name, dim, scale=0.1):
        w = f32(scale * self.rng.normal(size=dim))
        self.tensors[name] = w
        return w


def write_golden(folder, arrays):
    write_safetensors(os.path.join(folder, "golden.safetensors"), arrays)
