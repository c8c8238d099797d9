"""Incremental (cached) runners for the two reference models: the sequence is fed in pieces
(piece size 1 = token-by-token decode), carrying a KV cache for attention layers and, for Gated
DeltaNet layers, the conv state (last K-1 pre-conv rows) and the recurrent state S.

This is how an engine runs a sequence (chunked prefill, then decode); self_test.py checks that it
gives the same logits as the one-shot full forward of minicpm_ref / qwen35_ref. It reuses their
primitives (norms, RoPE, delta-rule functions) but not their layer code.
Float64 only (the references' --dtype bfloat16 mode is not mirrored here).

Must not depend on cpmserve code; numpy + stdlib only.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import minicpm_ref as M  # noqa: E402
import qwen35_ref as Q  # noqa: E402


def cached_attention(q, k_cache, v_cache, start, group):
    """q [n, H, hd] at positions start..start+n-1; caches [start+n, KV, hd] -> [n, H, hd]."""
    n, H, hd = q.shape
    total = k_cache.shape[0]
    visible = np.arange(total)[None, :] <= (start + np.arange(n))[:, None]   # [n, total]
    o = np.empty((n, H, hd))
    for head in range(H):
        scores = np.where(visible, q[:, head] @ k_cache[:, head // group].T / math.sqrt(hd), -np.inf)
        o[:, head] = M.softmax(scores) @ v_cache[:, head // group]
    return o


def minicpm_pieces(c, W, ids, pieces, long_rope=None):
    d = M.dims(c)
    H, KV, hd, L = d["H"], d["KV"], d["hd"], d["L"]
    long_rope = M.default_long_rope(c) if long_rope is None else long_rope
    rs = c["scale_depth"] / math.sqrt(L)
    kc = [np.zeros((0, KV, hd)) for _ in range(L)]
    vc = [np.zeros((0, KV, hd)) for _ in range(L)]
    out, start = [], 0
    for n in pieces:
        tok = np.asarray(ids[start:start + n])
        cos, sin = M.rope_cos_sin(c, np.arange(start, start + n), long_rope)
        h = W["model.embed_tokens.weight"][tok] * c["scale_emb"]
        for l in range(L):
            p = f"model.layers.{l}."
            x = M.rms_norm(h, W[p + "input_layernorm.weight"], c["rms_norm_eps"])
            q = M.apply_rope((x @ W[p + "self_attn.q_proj.weight"].T).reshape(n, H, hd), cos, sin)
            k = M.apply_rope((x @ W[p + "self_attn.k_proj.weight"].T).reshape(n, KV, hd), cos, sin)
            kc[l] = np.concatenate([kc[l], k])
            vc[l] = np.concatenate([vc[l], (x @ W[p + "self_attn.v_proj.weight"].T).reshape(n, KV, hd)])
            o = cached_attention(q, kc[l], vc[l], start, H // KV).reshape(n, H * hd)
            h = h + rs * (o @ W[p + "self_attn.o_proj.weight"].T)
            x = M.rms_norm(h, W[p + "post_attention_layernorm.weight"], c["rms_norm_eps"])
            up = M.silu(x @ W[p + "mlp.gate_proj.weight"].T) * (x @ W[p + "mlp.up_proj.weight"].T)
            h = h + rs * (up @ W[p + "mlp.down_proj.weight"].T)
        h = M.rms_norm(h, W["model.norm.weight"], c["rms_norm_eps"]) / (d["D"] / c["dim_model_base"])
        out.append(h @ M.lm_head(c, W).T)
        start += n
    return np.concatenate(out)


def qwen_pieces(c, W, ids, pieces):
    """Pieces of 1 token use the recurrent rule, longer pieces the chunked rule (as engines do)."""
    d = Q.dims(c)
    pre = Q.prefix_of(W)
    H, KV, hd, K = d["H"], d["KV"], d["hd"], d["K"]
    Hk, Hv, dk, dv = d["Hk"], d["Hv"], d["dk"], d["dv"]
    conv_dim = 2 * Hk * dk + Hv * dv
    assert d["gate"], "attn_output_gate false is not covered here"
    state = {}
    for i, kind in enumerate(d["layer_types"]):
        state[i] = ({"k": np.zeros((0, KV, hd)), "v": np.zeros((0, KV, hd))} if kind == "full_attention" else
                    {"conv": np.zeros((K - 1, conv_dim)), "S": np.zeros((Hv, dk, dv))})
    out, start = [], 0
    for n in pieces:
        pos = np.arange(start, start + n)
        h = W[pre + "embed_tokens.weight"][np.asarray(ids[start:start + n])]
        for i, kind in enumerate(d["layer_types"]):
            p, st = f"{pre}layers.{i}.", state[i]
            x = Q.rms_norm_1p(h, W[p + "input_layernorm.weight"], d["eps"])
            if kind == "full_attention":
                a = p + "self_attn."
                qg = (x @ W[a + "q_proj.weight"].T).reshape(n, H, 2 * hd)
                q = Q.partial_rope(Q.rms_norm_1p(qg[..., :hd], W[a + "q_norm.weight"], d["eps"]), pos, d["rot"], d["theta"])
                k = (x @ W[a + "k_proj.weight"].T).reshape(n, KV, hd)
                k = Q.partial_rope(Q.rms_norm_1p(k, W[a + "k_norm.weight"], d["eps"]), pos, d["rot"], d["theta"])
                st["k"] = np.concatenate([st["k"], k])
                st["v"] = np.concatenate([st["v"], (x @ W[a + "v_proj.weight"].T).reshape(n, KV, hd)])
                o = cached_attention(q, st["k"], st["v"], start, H // KV).reshape(n, H * hd)
                o = o * Q.sigmoid(qg[..., hd:].reshape(n, H * hd))
                h = h + o @ W[a + "o_proj.weight"].T
            else:
                a = p + "linear_attn."
                m = np.concatenate([st["conv"], x @ W[a + "in_proj_qkv.weight"].T])  # [K-1+n, conv_dim]
                st["conv"] = m[-(K - 1):]
                w = W[a + "conv1d.weight"][:, 0, :]
                y = Q.silu(np.stack([(w * m[t:t + K].T).sum(-1) for t in range(n)]))  # window t..t+K-1
                qh = Q.l2norm(y[:, :Hk * dk].reshape(n, Hk, dk)) * dk ** -0.5
                kh = Q.l2norm(y[:, Hk * dk:2 * Hk * dk].reshape(n, Hk, dk))
                vh = y[:, 2 * Hk * dk:].reshape(n, Hv, dv)
                beta = Q.sigmoid(x @ W[a + "in_proj_b.weight"].T)
                g = -np.exp(W[a + "A_log"]) * Q.softplus(x @ W[a + "in_proj_a.weight"].T + W[a + "dt_bias"])
                rule = Q.gated_delta_rule_recurrent if n == 1 else Q.gated_delta_rule_chunked
                o, st["S"] = rule(np.repeat(qh, Hv // Hk, 1), np.repeat(kh, Hv // Hk, 1), vh, g, beta, st["S"])
                z = (x @ W[a + "in_proj_z.weight"].T).reshape(n, Hv, dv)
                o = Q.rms_norm(o, W[a + "norm.weight"], d["eps"]) * Q.silu(z)
                h = h + o.reshape(n, Hv * dv) @ W[a + "out_proj.weight"].T
            x = Q.rms_norm_1p(h, W[p + "post_attention_layernorm.weight"], d["eps"])
            up = Q.silu(x @ W[p + "mlp.gate_proj.weight"].T) * (x @ W[p + "mlp.up_proj.weight"].T)
            h = h + up @ W[p + "mlp.down_proj.weight"].T
        out.append(Q.rms_norm_1p(h, W[pre + "norm.weight"], d["eps"]) @ Q.lm_head(c, W).T)
        start += n
    return np.concatenate(out)
