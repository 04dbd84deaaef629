"""HF Qwen3ForCausalLM in numpy: Llama with per-head q/k RMSNorm before RoPE, tied head here."""
from llama import forward, make_weights

QWEN3_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 40, "hidden_size": 16,
    "intermediate_size": 20, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "hidden_act": "silu", "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0, "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
    "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": None,
    "max_window_layers": 2, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
}


def weights(seed):
    return make_weights(QWEN3_CONFIG, seed, qk_norm=True)


def logits(W, ids):
    return forward(QWEN3_CONFIG, W, ids, qk_norm=True)
