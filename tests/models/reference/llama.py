"""HF LlamaForCausalLM (and the Qwen3 variant with per-head q/k RMSNorm before RoPE) in numpy."""
import math

import numpy as np

from common import (Weights, apply_rope, causal_attention, cos_sin, default_inv_freq, rms_norm,
                    swiglu_mlp)


def llama3_inv_freq(dim, theta, rs):
    """HF _compute_llama3_parameters."""
    inv = default_inv_freq(dim, theta)
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled)


def rope_inv_freq(cfg, dim):
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        return llama3_inv_freq(dim, cfg["rope_theta"], rs)
    assert not rs, "only llama3 scaling is modelled here"
    return default_inv_freq(dim, cfg["rope_theta"])


def make_weights(cfg, seed, qk_norm):
    w = Weights(seed)
    D, H, KV, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    F, V = cfg["intermediate_size"], cfg["vocab_size"]
    w.normal("model.embed_tokens.weight", (V, D))
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        w.norm(p + "input_layernorm.weight", D)
        for name, rows in (("q_proj", H * hd), ("k_proj", KV * hd), ("v_proj", KV * hd)):
            w.normal(p + "self_attn.%s.weight" % name, (rows, D))
            if cfg.get("attention_bias"):
                w.bias(p + "self_attn.%s.bias" % name, rows)
        w.normal(p + "self_attn.o_proj.weight", (D, H * hd))
        if cfg.get("attention_bias"):
            w.bias(p + "self_attn.o_proj.bias", D)
        if qk_norm:
            w.norm(p + "self_attn.q_norm.weight", hd)
            w.norm(p + "self_attn.k_norm.weight", hd)
        w.norm(p + "post_attention_layernorm.weight", D)
        make_mlp_weights(w, cfg, i, p)
    w.norm("model.norm.weight", D)
    if not cfg["tie_word_embeddings"]:
        w.normal("lm_head.weight", (V, D))
    return w.tensors


def make_mlp_weights(w, cfg, i, p):
    D, F = cfg["hidden_size"], cfg["intermediate_size"]
    w.normal(p + "mlp.gate_proj.weight", (F, D))
    w.normal(p + "mlp.up_proj.weight", (F, D))
    w.normal(p + "mlp.down_proj.weight", (D, F))


def attention(cfg, W, p, x, positions, qk_norm):
    B, S, D = x.shape
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]

    def proj(name, heads):
        y = x @ W[p + "self_attn.%s.weight" % name].T
        if cfg.get("attention_bias"):
            y = y + W[p + "self_attn.%s.bias" % name]
        return y.reshape(B, S, heads, hd)

    q, k, v = proj("q_proj", H), proj("k_proj", KV), proj("v_proj", KV)
    if qk_norm:
        q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
        k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
    q, k, v = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    cos, sin = cos_sin(positions, rope_inv_freq(cfg, hd))
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    o = causal_attention(q, k, v, hd ** -0.5) @ W[p + "self_attn.o_proj.weight"].T
    if cfg.get("attention_bias"):
        o = o + W[p + "self_attn.o_proj.bias"]
    return o


def dense_mlp(W, p, x):
    return swiglu_mlp(x, W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"], W[p + "mlp.down_proj.weight"])


def forward(cfg, W, ids, qk_norm, mlp=None):
    """Logits [B, S, V] (float64)."""
    mlp = mlp or (lambda i, p, x: dense_mlp(W, p, x))
    eps = cfg["rms_norm_eps"]
    h = W["model.embed_tokens.weight"][ids]
    positions = np.arange(ids.shape[1])
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = h + attention(cfg, W, p, rms_norm(h, W[p + "input_layernorm.weight"], eps), positions, qk_norm)
        h = h + mlp(i, p, rms_norm(h, W[p + "post_attention_layernorm.weight"], eps))
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return rms_norm(h, W["model.norm.weight"], eps) @ head.T


LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 48, "hidden_size": 16,
    "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 4, "hidden_act": "silu", "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8},
    "attention_bias": True, "mlp_bias": False, "tie_word_embeddings": False, "initializer_range": 0.02,
    "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
}


def weights(seed):
    return make_weights(LLAMA_CONFIG, seed, qk_norm=False)


def logits(W, ids):
    return forward(LLAMA_CONFIG, W, ids, qk_norm=False)
