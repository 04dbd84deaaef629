#!/usr/bin/python3
"""Greedy decoding with a KV cache in PyTorch: the peer of Loom's generation bench.

Loads a Qwen3 Hugging Face folder (config.json, model.safetensors in bf16, as bench_decode
--save-hf writes it), runs the prompt through the model once (prefill, causal attention), then
one token per step against a preallocated KV cache, greedy, and prints one RESULT {json} line:
decode tokens/s, prefill seconds and the generated ids.

The model follows the reference model of ../shared/bench/torch_llama_reference.py (RMSNorm,
rotate-half RoPE, GQA, SwiGLU), with Qwen3's per-head q/k RMSNorm and tied embedding.
  --mode bf16      weights cast to bfloat16 (how PyTorch users run bf16 inference on a CPU)
  --mode autocast  fp32 weights, forward under torch.autocast("cpu", dtype=torch.bfloat16)
Usage: torch_decode_reference.py HF_DIR PROMPT.json --new N [--threads 2] [--mode bf16|autocast]
"""
import argparse, json, math, os, struct, time
import numpy as np
import torch
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] == "BF16":
            t = torch.from_numpy(np.frombuffer(raw, dtype=np.int16).copy()).view(torch.bfloat16)
        elif info["dtype"] == "F32":
            t = torch.from_numpy(np.frombuffer(raw, dtype=np.float32).copy())
        else:
            raise SystemExit(f"{path}: {name} is {info['dtype']}; this peer reads BF16 or F32")
        out[name] = t.reshape(info["shape"])
    return out


def rms_norm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rot_half(x):
    a, b = x.chunk(2, -1)
    return torch.cat([-b, a], -1)


class Qwen3:
    def __init__(s, cfg, w, dtype):
        s.c = cfg
        s.H, s.KV, s.hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        s.eps = cfg["rms_norm_eps"]
        s.w = {k: v.to(dtype) for k, v in w.items()}
        s.head = s.w.get("lm_head.weight", s.w["model.embed_tokens.weight"])
        inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, s.hd, 2).float() / s.hd))
        f = torch.outer(torch.arange(cfg["max_position_embeddings"]).float(), inv)
        emb = torch.cat([f, f], -1)
        s.cos, s.sin = emb.cos(), emb.sin()  # [T, hd]

    def forward(s, ids, pos, cache):
        """ids [B, T] at positions pos..pos+T-1; appends to cache; returns last-position logits."""
        B, T = ids.shape
        x = F.embedding(ids, s.w["model.embed_tokens.weight"])
        cos = s.cos[pos:pos + T][None, None].to(x.dtype)
        sin = s.sin[pos:pos + T][None, None].to(x.dtype)
        mask = torch.ones(T, pos + T, dtype=torch.bool).tril(pos) if T > 1 else None
        for i in range(s.c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            h = rms_norm(x, s.w[p + "input_layernorm.weight"], s.eps)
            q = F.linear(h, s.w[p + "self_attn.q_proj.weight"]).view(B, T, s.H, s.hd)
            k = F.linear(h, s.w[p + "self_attn.k_proj.weight"]).view(B, T, s.KV, s.hd)
            v = F.linear(h, s.w[p + "self_attn.v_proj.weight"]).view(B, T, s.KV, s.hd)
            q = rms_norm(q, s.w[p + "self_attn.q_norm.weight"], s.eps).transpose(1, 2)
            k = rms_norm(k, s.w[p + "self_attn.k_norm.weight"], s.eps).transpose(1, 2)
            v = v.transpose(1, 2)
            q = q * cos + rot_half(q) * sin
            k = k * cos + rot_half(k) * sin
            kc, vc = cache[i]
            kc[:, :, pos:pos + T] = k
            vc[:, :, pos:pos + T] = v
            keys = kc[:, :, :pos + T].repeat_interleave(s.H // s.KV, dim=1)
            vals = vc[:, :, :pos + T].repeat_interleave(s.H // s.KV, dim=1)
            att = (q @ keys.transpose(-2, -1)) * (1.0 / math.sqrt(s.hd))
            if mask is not None:
                att = att.masked_fill(~mask, float("-inf"))
            y = (att.float().softmax(-1).to(vals.dtype) @ vals).transpose(1, 2).reshape(B, T, s.H * s.hd)
            x = x + F.linear(y, s.w[p + "self_attn.o_proj.weight"])
            h = rms_norm(x, s.w[p + "post_attention_layernorm.weight"], s.eps)
            g = F.linear(h, s.w[p + "mlp.gate_proj.weight"])
            u = F.linear(h, s.w[p + "mlp.up_proj.weight"])
            x = x + F.linear(F.silu(g) * u, s.w[p + "mlp.down_proj.weight"])
        last = rms_norm(x[:, -1:], s.w["model.norm.weight"], s.eps)
        return F.linear(last, s.head).float()[:, -1]


def generate(m, prompt, new, dtype, autocast):
    B, L = 1, len(prompt)
    cache = [(torch.zeros(B, m.KV, L + new, m.hd, dtype=dtype), torch.zeros(B, m.KV, L + new, m.hd, dtype=dtype))
             for _ in range(m.c["num_hidden_layers"])]
    ids = []
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        t0 = time.perf_counter()
        logits = m.forward(torch.tensor([prompt]), 0, cache)
        t1 = time.perf_counter()
        for step in range(new):
            ids.append(int(logits.argmax(-1)[0]))
            if step + 1 == new:
                break
            logits = m.forward(torch.tensor([[ids[-1]]]), L + step, cache)
        t2 = time.perf_counter()
    return ids, t1 - t0, t2 - t1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir"); ap.add_argument("prompt")
    ap.add_argument("--new", type=int, default=32); ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mode", choices=["bf16", "autocast"], default="bf16")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = json.load(open(os.path.join(a.hf_dir, "config.json")))
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    weights = read_safetensors(os.path.join(a.hf_dir, "model.safetensors"))
    autocast = a.mode == "autocast"
    dtype = torch.float32 if autocast else torch.bfloat16
    m = Qwen3(cfg, weights, dtype)
    prompt = json.load(open(a.prompt))
    cache_dtype = torch.bfloat16
    generate(m, prompt, 4, cache_dtype, autocast)  # warm-up
    runs = [generate(m, prompt, a.new, cache_dtype, autocast) for _ in range(a.repeats)]
    decode = sorted(r[2] for r in runs)[len(runs) // 2]
    prefill = sorted(r[1] for r in runs)[len(runs) // 2]
    print("RESULT " + json.dumps(dict(mode=a.mode, threads=a.threads, prompt=len(prompt), decode_steps=a.new - 1,
                                      decode_tok_s=(a.new - 1) / decode, prefill_s=prefill, ids=runs[0][0],
                                      torch=torch.__version__)), flush=True)


if __name__ == "__main__":
    main()
