"""HF DeepseekV3ForCausalLM in numpy (modeling_deepseek_v3): MLA with q-LoRA, one interleaved rope key
shared by all heads, YaRN frequencies with attention factor and the mscale² softmax scale;
dense MLP below first_k_dense_replace, then sigmoid routers with correction bias, group-limited
top-k (group score = sum of its top-2), normalised and scaled weights, shared experts; and the
MindFormers MTP loss (eh_proj over [enorm(emb of the ids shifted left) ; hnorm(h)], shared head,
λ/D · token-mean CE on labels and mask shifted left)."""
import numpy as np

from common import (Weights, apply_rope, causal_attention, cos_sin, interleave_to_half, rms_norm,
                    roll_left, sigmoid, swiglu_mlp, token_mean_ce, yarn_get_mscale, yarn_inv_freq)

DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 40,
    "hidden_size": 16, "intermediate_size": 24, "moe_intermediate_size": 6, "num_hidden_layers": 3,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
    "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 3, "n_group": 4, "topk_group": 2,
    "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
    "norm_topk_prob": True, "q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 4,
    "qk_rope_head_dim": 4, "v_head_dim": 6, "hidden_act": "silu", "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "max_position_embeddings": 64,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4, "beta_fast": 32,
                     "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 1.0},
    "rope_interleave": True, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
    "attention_bias": False, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "float32",
}
MTP_LOSS_SCALING = 0.1  # Loom's default mtp_loss_scaling_factor (not an HF key)


def is_moe(cfg, i):
    return i >= cfg["first_k_dense_replace"]


def layer_weights(w, cfg, p, i):
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    ql, kvl = cfg["q_lora_rank"], cfg["kv_lora_rank"]
    w.norm(p + "input_layernorm.weight", D)
    w.normal(p + "self_attn.q_a_proj.weight", (ql, D))
    w.norm(p + "self_attn.q_a_layernorm.weight", ql)
    w.normal(p + "self_attn.q_b_proj.weight", (H * (dn + dr), ql))
    w.normal(p + "self_attn.kv_a_proj_with_mqa.weight", (kvl + dr, D))
    w.norm(p + "self_attn.kv_a_layernorm.weight", kvl)
    w.normal(p + "self_attn.kv_b_proj.weight", (H * (dn + dv), kvl))
    w.normal(p + "self_attn.o_proj.weight", (D, H * dv))
    w.norm(p + "post_attention_layernorm.weight", D)
    if not is_moe(cfg, i):
        F = cfg["intermediate_size"]
        w.normal(p + "mlp.gate_proj.weight", (F, D))
        w.normal(p + "mlp.up_proj.weight", (F, D))
        w.normal(p + "mlp.down_proj.weight", (D, F))
        return
    E, F = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    w.normal(p + "mlp.gate.weight", (E, D), std=0.5)
    w.bias(p + "mlp.gate.e_score_correction_bias", E, scale=0.05)
    for e in range(E):
        w.normal(p + "mlp.experts.%d.gate_proj.weight" % e, (F, D))
        w.normal(p + "mlp.experts.%d.up_proj.weight" % e, (F, D))
        w.normal(p + "mlp.experts.%d.down_proj.weight" % e, (D, F))
    Fs = F * cfg["n_shared_experts"]
    w.normal(p + "mlp.shared_experts.gate_proj.weight", (Fs, D))
    w.normal(p + "mlp.shared_experts.up_proj.weight", (Fs, D))
    w.normal(p + "mlp.shared_experts.down_proj.weight", (D, Fs))


def weights(seed):
    cfg = DEEPSEEK_V3_CONFIG
    w = Weights(seed)
    D, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    w.normal("model.embed_tokens.weight", (V, D))
    for i in range(L):
        layer_weights(w, cfg, "model.layers.%d." % i, i)
    w.norm("model.norm.weight", D)
    w.normal("lm_head.weight", (V, D))
    p = "model.layers.%d." % L  # the MTP module, as DeepSeek's checkpoints store it
    w.norm(p + "enorm.weight", D)
    w.norm(p + "hnorm.weight", D)
    w.normal(p + "eh_proj.weight", (D, 2 * D))
    layer_weights(w, cfg, p, L)
    w.norm(p + "shared_head.norm.weight", D)
    W = w.tensors
    W[p + "embed_tokens.weight"] = W["model.embed_tokens.weight"].copy()
    W[p + "shared_head.head.weight"] = W["lm_head.weight"].copy()
    return W


def mla(cfg, W, p, x, positions):
    B, S, D = x.shape
    H = cfg["num_attention_heads"]
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    kvl = cfg["kv_lora_rank"]
    eps = 1e-6  # DeepseekV3RMSNorm's default: the latent norms do not read rms_norm_eps
    a = p + "self_attn."
    q = rms_norm(x @ W[a + "q_a_proj.weight"].T, W[a + "q_a_layernorm.weight"], eps) @ W[a + "q_b_proj.weight"].T
    q = q.reshape(B, S, H, dn + dr).transpose(0, 2, 1, 3)
    q_nope, q_pe = q[..., :dn], q[..., dn:]
    ckv = x @ W[a + "kv_a_proj_with_mqa.weight"].T
    c, k_pe = ckv[..., :kvl], ckv[..., kvl:]
    k_pe = k_pe.reshape(B, S, 1, dr).transpose(0, 2, 1, 3)
    kv = (rms_norm(c, W[a + "kv_a_layernorm.weight"], eps) @ W[a + "kv_b_proj.weight"].T)
    kv = kv.reshape(B, S, H, dn + dv).transpose(0, 2, 1, 3)
    k_nope, v = kv[..., :dn], kv[..., dn:]
    inv, attention_factor = yarn_inv_freq(dr, cfg["rope_theta"], cfg["rope_scaling"])
    cos, sin = cos_sin(positions, inv, attention_factor)
    q_pe = apply_rope(interleave_to_half(q_pe), cos, sin)
    k_pe = apply_rope(interleave_to_half(k_pe), cos, sin)
    query = np.concatenate([q_nope, q_pe], -1)
    key = np.concatenate([k_nope, np.broadcast_to(k_pe, (B, H, S, dr))], -1)
    rs = cfg["rope_scaling"]
    m = yarn_get_mscale(rs["factor"], rs["mscale_all_dim"])
    scale = (dn + dr) ** -0.5 * m * m
    return causal_attention(query, key, v, scale) @ W[a + "o_proj.weight"].T


def moe(cfg, W, p, x):
    B, S, D = x.shape
    t = x.reshape(-1, D)
    m = p + "mlp."
    E, K, G, TG = cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["n_group"], cfg["topk_group"]
    scores = sigmoid(t @ W[m + "gate.weight"].T)
    choice = scores + W[m + "gate.e_score_correction_bias"]
    grouped = choice.reshape(-1, G, E // G)
    group_scores = np.sort(grouped, -1)[..., -2:].sum(-1)
    keep = np.argsort(-group_scores, -1, kind="stable")[:, :TG]
    mask = np.zeros((t.shape[0], G), dtype=bool)
    np.put_along_axis(mask, keep, True, -1)
    masked = np.where(np.repeat(mask, E // G, -1), choice, -np.inf)
    idx = np.argsort(-masked, -1, kind="stable")[:, :K]
    w = np.take_along_axis(scores, idx, -1)
    if cfg["norm_topk_prob"]:
        w = w / (w.sum(-1, keepdims=True) + 1e-20)
    w = w * cfg["routed_scaling_factor"]
    out = np.zeros_like(t)
    for n in range(t.shape[0]):
        for k in range(K):
            q = m + "experts.%d." % idx[n, k]
            out[n] += w[n, k] * swiglu_mlp(t[n:n + 1], W[q + "gate_proj.weight"], W[q + "up_proj.weight"],
                                           W[q + "down_proj.weight"])[0]
    s = m + "shared_experts."
    out += swiglu_mlp(t, W[s + "gate_proj.weight"], W[s + "up_proj.weight"], W[s + "down_proj.weight"])
    return out.reshape(B, S, D)


def layer(cfg, W, p, i, h, positions):
    eps = cfg["rms_norm_eps"]
    h = h + mla(cfg, W, p, rms_norm(h, W[p + "input_layernorm.weight"], eps), positions)
    x = rms_norm(h, W[p + "post_attention_layernorm.weight"], eps)
    if is_moe(cfg, i):
        return h + moe(cfg, W, p, x)
    return h + swiglu_mlp(x, W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"], W[p + "mlp.down_proj.weight"])


def run(W, ids, labels, mask):
    """(logits, main loss, MTP loss)."""
    cfg = DEEPSEEK_V3_CONFIG
    eps, L = cfg["rms_norm_eps"], cfg["num_hidden_layers"]
    positions = np.arange(ids.shape[1])
    h = W["model.embed_tokens.weight"][ids]
    for i in range(L):
        h = layer(cfg, W, "model.layers.%d." % i, i, h, positions)
    logits = rms_norm(h, W["model.norm.weight"], eps) @ W["lm_head.weight"].T
    loss = token_mean_ce(logits, labels, mask)
    p = "model.layers.%d." % L
    ids1, labels1, mask1 = roll_left(ids), roll_left(labels), roll_left(mask)
    e = W["model.embed_tokens.weight"][ids1]
    x = np.concatenate([rms_norm(e, W[p + "enorm.weight"], eps), rms_norm(h, W[p + "hnorm.weight"], eps)], -1)
    h1 = layer(cfg, W, p, L, x @ W[p + "eh_proj.weight"].T, positions)
    logits1 = rms_norm(h1, W[p + "shared_head.norm.weight"], eps) @ W["lm_head.weight"].T
    mtp_loss = MTP_LOSS_SCALING * token_mean_ce(logits1, labels1, mask1)
    return logits, loss, mtp_loss
