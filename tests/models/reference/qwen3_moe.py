"""HF Qwen3MoeForCausalLM in numpy: Qwen3 attention, sparse blocks with a softmax top-k router
(fp32 softmax over all experts, top-k, renormalised when norm_topk_prob), dense MLP on
mlp_only_layers."""
import numpy as np

from common import Weights, softmax, swiglu_mlp
from llama import dense_mlp, forward, make_weights

QWEN3_MOE_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 40,
    "hidden_size": 16, "intermediate_size": 20, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 4, "hidden_act": "silu", "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False,
    "tie_word_embeddings": False, "num_experts": 6, "num_experts_per_tok": 2,
    "moe_intermediate_size": 8, "norm_topk_prob": True, "decoder_sparse_step": 1,
    "mlp_only_layers": [1], "router_aux_loss_coef": 0.001, "output_router_logits": False,
    "torch_dtype": "float32",
}


def is_moe(cfg, i):
    return i not in cfg["mlp_only_layers"] and (i + 1) % cfg["decoder_sparse_step"] == 0


def weights(seed):
    cfg = QWEN3_MOE_CONFIG
    W = make_weights(cfg, seed, qk_norm=True)
    w = Weights(seed + 100)
    D, E, F = cfg["hidden_size"], cfg["num_experts"], cfg["moe_intermediate_size"]
    for i in range(cfg["num_hidden_layers"]):
        if not is_moe(cfg, i):
            continue
        p = "model.layers.%d.mlp." % i
        for n in ("gate_proj", "up_proj", "down_proj"):
            del W[p + n + ".weight"]
        w.normal(p + "gate.weight", (E, D), std=0.5)
        for e in range(E):
            w.normal(p + "experts.%d.gate_proj.weight" % e, (F, D))
            w.normal(p + "experts.%d.up_proj.weight" % e, (F, D))
            w.normal(p + "experts.%d.down_proj.weight" % e, (D, F))
    W.update(w.tensors)
    return W


def sparse_block(cfg, W, p, x):
    B, S, D = x.shape
    t = x.reshape(-1, D)
    probs = softmax(t @ W[p + "mlp.gate.weight"].T, -1)
    K = cfg["num_experts_per_tok"]
    idx = np.argsort(-probs, axis=-1, kind="stable")[:, :K]
    w = np.take_along_axis(probs, idx, -1)
    if cfg["norm_topk_prob"]:
        w = w / w.sum(-1, keepdims=True)
    out = np.zeros_like(t)
    for n in range(t.shape[0]):
        for k in range(K):
            e = idx[n, k]
            q = p + "mlp.experts.%d." % e
            out[n] += w[n, k] * swiglu_mlp(t[n:n + 1], W[q + "gate_proj.weight"], W[q + "up_proj.weight"],
                                           W[q + "down_proj.weight"])[0]
    return out.reshape(B, S, D)


def logits(W, ids):
    cfg = QWEN3_MOE_CONFIG

    def mlp(i, p, x):
        return sparse_block(cfg, W, p, x) if is_moe(cfg, i) else dense_mlp(W, p, x)

    return forward(cfg, W, ids, qk_norm=True, mlp=mlp)
