"""Self-test of the numpy reference implementations (they are test oracles, so they get tests too).

Checks: (a) RoPE rotate_half pairing, LongRoPE with unit factors == plain RoPE, magnitude factor,
short/long rule, partial RoPE; (b) causality; (c) prefix consistency; (d) Gated DeltaNet chunked ==
recurrent (incl. lengths not multiple of 64, initial states, split runs, whole model); (e) tiny
hand-computed cases (RMSNorm, softmax, silu, l2norm, one delta-rule step) and GQA head mapping vs.
an equivalent model with repeated kv heads, tied/untied heads; (f) a synthetic safetensors writer
(F32/F16/BF16, single and sharded) round-trips through safetensors_np, then the CLIs and
compare_logprobs run end to end on written tiny checkpoints (both dtypes); (g) the bfloat16
emulation: bf16_round on hand values (ties to even, signed zero, subnormal, overflow, NaN) and
against a brute-force nearest-bf16 search, hand-computed rounding points (two roundings in MiniCPM's
RMSNorm, one in Qwen3.5's), bf16 logits, weights rounded once, float64 mode unchanged, bf16 log-probs
close to but not equal to float64, top-1 kept where the logits are peaked; (h) MiniCPM-V-4.6 vision
(minicpmv46_vision_ref): the §6.1 worked examples, ensure_divide half-even, grid ties, slice_mode
off, the §6.2 placeholder text and its token ids, position buckets (HF float32 form == integer rule),
hand GELU/LayerNorm values, 2x2 grouping order, patch embedding == a conv loop, window attention ==
full attention with a block-diagonal mask, per-slice forward == an independent packed multi-slice
forward with block masks, PIL BICUBIC thumbnail/tiles, qwen35 input_embeds override, the vision CLI
end to end (rows replaced, count and layout errors, --layout, --features-out).

Run: /usr/bin/python3 tests/reference/self_test.py   (exit 0 = all passed). Takes a few seconds.
Must not depend on cpmserve code; numpy + stdlib only.
"""
import contextlib
import copy
import io
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_logprobs  # noqa: E402
import incremental_ref  # noqa: E402
import minicpm_ref as M  # noqa: E402
import minicpmv46_vision_ref as V  # noqa: E402
import precision  # noqa: E402
import qwen35_ref as Q  # noqa: E402
import ref_cli  # noqa: E402
import safetensors_np  # noqa: E402

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def close(a, b, tol):
    return np.shape(a) == np.shape(b) and float(np.max(np.abs(np.asarray(a) - np.asarray(b)), initial=0)) <= tol


# ----------------------------------------------------------------------------- tiny models

def minicpm_config(**over):
    half = 8
    c = {"architectures": ["MiniCPMForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 300,
         "rms_norm_eps": 1e-5, "max_position_embeddings": 64, "scale_emb": 12, "dim_model_base": 16,
         "scale_depth": 1.4, "hidden_act": "silu",
         "rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 16,
                          "short_factor": [1.0 + 0.5 * i for i in range(half)],
                          "long_factor": [1.0 + 2.0 * i for i in range(half)]}}
    c.update(over)
    return c


def qwen_config(**over):
    tc = {"model_type": "qwen3_5_text", "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2,
          "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 48, "vocab_size": 300,
          "rms_norm_eps": 1e-6, "full_attention_interval": 2, "linear_num_key_heads": 2,
          "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
          "linear_conv_kernel_dim": 4, "attn_output_gate": True, "max_position_embeddings": 4096,
          "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25}}
    tc.update(over)
    return {"architectures": ["MiniCPMV4_6ForConditionalGeneration"], "tie_word_embeddings": True,
            "text_config": tc}


def random_weights(shapes, seed):
    rng = np.random.default_rng(seed)
    W = {}
    for name, shape in sorted(shapes.items()):
        if name.endswith("norm.weight") and "linear_attn" not in name and name.startswith("model.layers"):
            W[name] = 1.0 + 0.1 * rng.standard_normal(shape)          # MiniCPM plain norms, near 1
        elif name.endswith(("norm.weight", "A_log", "dt_bias")):
            W[name] = 0.3 * rng.standard_normal(shape)
        else:
            fan_in = shape[-1] if len(shape) > 1 else 1
            W[name] = rng.standard_normal(shape) / math.sqrt(fan_in) * (0.5 if "embed" in name else 1.0)
    return W


def minicpm_model(seed=0, **over):
    c = minicpm_config(**over)
    return c, random_weights(M.expected_shapes(c), seed)


def qwen_model(seed=0, **over):
    c = qwen_config(**over)
    return c, random_weights(Q.expected_shapes(c, "model.language_model."), seed)


# ----------------------------------------------------------------------------- (a) RoPE

def test_rope():
    c = minicpm_config(max_position_embeddings=16)          # S = 1: magnitude factor 1
    hd, half, p = 16, 8, 5
    cos, sin = M.rope_cos_sin(c, np.array([p]), long_rope=False)
    f = np.array(c["rope_scaling"]["short_factor"])
    angle = p / (f * 10000.0 ** (np.arange(half) * 2 / hd))
    pairing_ok = True
    for i in range(half):
        for j, want in ((i, {i: math.cos(angle[i]), i + half: math.sin(angle[i])}),
                        (i + half, {i: -math.sin(angle[i]), i + half: math.cos(angle[i])})):
            x = np.zeros((1, 1, hd))
            x[0, 0, j] = 1.0
            y = M.apply_rope(x, cos, sin)[0, 0]
            expect = np.zeros(hd)
            for idx, val in want.items():
                expect[idx] = val
            pairing_ok &= close(y, expect, 1e-15)
    check(pairing_ok, "rope: rotate_half pairs (i, i+hd/2) with angle p/(f_i*theta^(2i/hd))")

    ones = minicpm_config(max_position_embeddings=16)
    ones["rope_scaling"] = dict(ones["rope_scaling"], short_factor=[1.0] * half, long_factor=[1.0] * half)
    plain = minicpm_config(max_position_embeddings=16, rope_scaling=None)
    pos = np.arange(40)
    a, b = M.rope_cos_sin(ones, pos, True), M.rope_cos_sin(plain, pos, False)
    check(close(a[0], b[0], 0) and close(a[1], b[1], 0), "rope: LongRoPE with unit factors == plain RoPE")
    W = random_weights(M.expected_shapes(plain), 1)
    ids = list(np.random.default_rng(2).integers(0, 300, 30))
    check(close(M.forward_logits(ones, W, ids, True), M.forward_logits(plain, W, ids), 0),
          "rope: model with unit-factor LongRoPE == model without rope_scaling")

    cos4, sin4 = M.rope_cos_sin(minicpm_config(max_position_embeddings=64), pos, True)  # S = 64/16 = 4
    m = math.sqrt(1 + math.log(4) / math.log(16))
    check(close(cos4 ** 2 + sin4 ** 2, np.full_like(cos4, m * m), 1e-14), "rope: magnitude factor sqrt(1+ln S/ln L0)")
    c1, _ = M.rope_cos_sin(minicpm_config(max_position_embeddings=16), pos, True)
    check(close(c1 ** 2 + M.rope_cos_sin(minicpm_config(max_position_embeddings=16), pos, True)[1] ** 2,
                np.ones_like(c1), 1e-14), "rope: magnitude factor 1 when S <= 1")
    c = minicpm_config()
    check(M.default_long_rope(c) is True and M.default_long_rope(c, 16) is False and M.default_long_rope(c, 17),
          "rope: long iff max_model_len > original_max_position_embeddings")
    c, W = minicpm_model()
    check(not close(M.forward_logits(c, W, ids, True), M.forward_logits(c, W, ids, False), 1e-6),
          "rope: long and short factor lists give different logits")

    x = np.random.default_rng(3).standard_normal((3, 2, 16))
    y = Q.partial_rope(x, np.arange(3), 4, 1e7)
    ang = 2 * 1.0 / 1e7 ** (np.arange(2) * 2 / 4)                          # position 2
    want = np.concatenate([x[2, :, :2] * np.cos(ang) - x[2, :, 2:4] * np.sin(ang),
                           x[2, :, 2:4] * np.cos(ang) + x[2, :, :2] * np.sin(ang)], axis=-1)
    check(close(y[..., 4:], x[..., 4:], 0) and close(y[0], x[0], 0) and close(y[2, :, :4], want, 1e-15),
          "rope: qwen partial RoPE rotates only the first rot dims, pairs (i, i+rot/2)")


# ----------------------------------------------------------------------------- (b), (c)

def test_causality_and_prefix():
    rng = np.random.default_rng(4)
    ids = list(rng.integers(0, 300, 40))
    other = ids[:25] + list(rng.integers(0, 300, 15))
    for name, (c, W), fwd in (("minicpm", minicpm_model(), M.forward_logprobs),
                              ("qwen35", qwen_model(), Q.forward_logprobs)):
        a, b = fwd(c, W, ids), fwd(c, W, other)
        check(close(a[:25], b[:25], 1e-12) and not close(a[25:], b[25:], 1e-6),
              f"{name}: causality (rows before a changed token are unchanged)")
        ok = all(close(fwd(c, W, ids[:L]), fwd(c, W, ids[:L + 1])[:L], 1e-12) for L in (1, 7, 16, 17, 39))
        check(ok, f"{name}: prefix consistency (length L == first L rows of length L+1)")
        check(close(np.exp(a).sum(-1), np.ones(40), 1e-12), f"{name}: log-probs normalised")


def test_incremental():
    """Cached runs fed in pieces (chunked prefill, decode) == the one-shot full forward."""
    ids = list(np.random.default_rng(13).integers(0, 300, 70))
    plans = {"decode": [1] * 70, "prefill+decode": [20] + [1] * 50, "chunks": [5, 64, 1], "odd": [33, 7, 1, 29]}
    c, W = minicpm_model(14)
    full = M.forward_logits(c, W, ids)
    for name, pieces in plans.items():
        check(close(incremental_ref.minicpm_pieces(c, W, ids, pieces), full, 1e-10),
              f"minicpm: cached run ({name}) == full forward")
    c, W = qwen_model(15)
    full = Q.forward_logits(c, W, ids)
    for name, pieces in plans.items():
        check(close(incremental_ref.qwen_pieces(c, W, ids, pieces), full, 1e-10),
              f"qwen35: cached run with conv/recurrent state ({name}) == full forward")


# ----------------------------------------------------------------------------- (d)

def random_gdn_inputs(rng, T, H, dk, dv):
    q = Q.l2norm(rng.standard_normal((T, H, dk))) * dk ** -0.5
    k = Q.l2norm(rng.standard_normal((T, H, dk)))
    v = rng.standard_normal((T, H, dv))
    g = -np.exp(rng.standard_normal((T, H))) * Q.softplus(rng.standard_normal((T, H)))
    beta = Q.sigmoid(rng.standard_normal((T, H)))
    return q, k, v, g, beta


def test_gdn_forms():
    rng = np.random.default_rng(5)
    worst = 0.0
    for T in (1, 2, 17, 63, 64, 65, 128, 130, 200):
        for with_state in (False, True):
            q, k, v, g, beta = random_gdn_inputs(rng, T, 3, 8, 6)
            S0 = rng.standard_normal((3, 8, 6)) if with_state else None
            o1, S1 = Q.gated_delta_rule_recurrent(q, k, v, g, beta, S0)
            o2, S2 = Q.gated_delta_rule_chunked(q, k, v, g, beta, S0)
            worst = max(worst, np.abs(o1 - o2).max(), np.abs(S1 - S2).max())
    check(worst <= 1e-10, f"gdn: chunked == recurrent (outputs and final states), max diff {worst:.1e}")
    q, k, v, g, beta = random_gdn_inputs(rng, 150, 2, 8, 8)
    o_full, S_full = Q.gated_delta_rule_recurrent(q, k, v, g, beta)
    oa, Sa = Q.gated_delta_rule_chunked(q[:70], k[:70], v[:70], g[:70], beta[:70])
    ob, Sb = Q.gated_delta_rule_chunked(q[70:], k[70:], v[70:], g[70:], beta[70:], initial_state=Sa)
    check(close(np.concatenate([oa, ob]), o_full, 1e-10) and close(Sb, S_full, 1e-10),
          "gdn: chunked run split at 70 with carried state == one recurrent run")
    c, W = qwen_model()
    ids = list(rng.integers(0, 300, 70))
    check(close(Q.forward_logits(c, W, ids, "chunked"), Q.forward_logits(c, W, ids, "recurrent"), 1e-10),
          "gdn: whole qwen35 model, chunked == recurrent (70 tokens)")
    # one step by hand from a zero state: S = beta k v^T, o = S^T q = beta (k.q) v
    q, k, v, g, beta = random_gdn_inputs(rng, 1, 1, 4, 3)
    o, S = Q.gated_delta_rule_recurrent(q, k, v, g, beta)
    check(close(o[0, 0], beta[0, 0] * (k[0, 0] @ q[0, 0]) * v[0, 0], 1e-15)
          and close(S[0], beta[0, 0] * np.outer(k[0, 0], v[0, 0]), 1e-15), "gdn: one hand-computed step")


# ----------------------------------------------------------------------------- (e)

def test_hand_cases():
    y = M.rms_norm(np.array([3.0, 4.0]), np.array([1.0, 2.0]), 0.0)
    check(close(y, [3 / math.sqrt(12.5), 8 / math.sqrt(12.5)], 1e-15) and close(y, [0.848528137423857, 2.262741699796952], 1e-14),
          "hand: RMSNorm([3,4], w=[1,2]) = [0.8485, 2.2627]")
    check(close(Q.rms_norm_1p(np.array([3.0, 4.0]), np.array([0.0, 1.0]), 0.0), y, 1e-15), "hand: zero-centred RMSNorm uses 1+w")
    check(close(M.rms_norm(np.array([1.0, 1.0]), np.ones(2), 1.0), [1 / math.sqrt(2)] * 2, 1e-15), "hand: RMSNorm eps inside sqrt")
    lp = ref_cli.log_softmax(np.log(np.array([[1.0, 2.0, 3.0]])) + 7.0)
    check(close(lp, np.log([[1 / 6, 2 / 6, 3 / 6]]), 1e-15), "hand: log_softmax(log[1,2,3]+7) = log[1/6,1/3,1/2]")
    check(close(M.softmax(np.array([0.0, -np.inf, 0.0])), [0.5, 0.0, 0.5], 0), "hand: softmax with a masked entry")
    # Attention values: float64 mode is plain softmax @ v over spans and partitions (2500 keys,
    # causal rows); bf16 mode rounds each exp against the running max, not its sum.
    rng = np.random.default_rng(3)
    causal = np.tril(np.ones((2500, 2500), dtype=bool))[-40:]
    sc = np.where(causal, rng.normal(0, 3, (40, 2500)), -np.inf)
    vv = rng.normal(size=(2500, 8))
    check(close(precision.attention_values(sc, vv, precision.identity), M.softmax(sc) @ vv, 1e-12),
          "attention: float64 online softmax over spans and partitions = softmax @ v")
    third = precision.attention_values(np.array([[0.0, math.log(1 / 3)]]), np.array([[1.0], [0.0]]),
                                       precision.bf16_round)
    check(close(third, [[0.75]], 1e-16), "hand: P=1, 1/3 (exact sum): value of key 0 is 1/(4/3)")
    third = precision.attention_values(np.array([[math.log(1 / 3), 0.0]]), np.array([[1.0], [0.0]]),
                                       precision.bf16_round)
    check(close(third, [[0.333984375 * 0.75]], 1e-15), "hand: P=1/3 rounds to bf16 0.333984375")
    check(close(M.silu(np.array([0.0, 1.0, -1000.0, 1000.0])), [0.0, 1 / (1 + math.exp(-1)), 0.0, 1000.0], 1e-15), "hand: silu")
    check(close(Q.softplus(np.array([0.0])), [math.log(2)], 1e-16) and close(Q.sigmoid(np.array([0.0])), [0.5], 0), "hand: softplus, sigmoid")
    check(close(Q.l2norm(np.array([3.0, 4.0])), [3 / math.sqrt(25 + 1e-6), 4 / math.sqrt(25 + 1e-6)], 1e-16), "hand: l2norm eps inside sqrt")

    # GQA mapping: query head h reads kv head h // group; equals a model whose kv heads are repeated
    c, W = minicpm_model(7)
    c_mha, W_mha = copy.deepcopy(c), dict(W)
    c_mha["num_key_value_heads"] = 4
    for l in range(2):
        for t in ("k_proj", "v_proj"):
            n = f"model.layers.{l}.self_attn.{t}.weight"
            W_mha[n] = np.repeat(W[n].reshape(2, 16, 64), 2, axis=0).reshape(64, 64)
    ids = list(range(5, 40))
    check(close(M.forward_logits(c, W, ids), M.forward_logits(c_mha, W_mha, ids), 1e-12), "gqa: minicpm kv head = h // group")
    c, W = qwen_model(8)
    tc2 = dict(c["text_config"], num_key_value_heads=2, linear_num_key_heads=4)
    c2, W2 = dict(c, text_config=tc2), dict(W)
    for l in range(4):
        p = f"model.language_model.layers.{l}."
        if l % 2 == 1:
            for t in ("k_proj", "v_proj"):
                W2[p + f"self_attn.{t}.weight"] = np.repeat(W[p + f"self_attn.{t}.weight"].reshape(1, 16, 32), 2, 0).reshape(32, 32)
        else:  # q and k blocks of in_proj_qkv / conv1d: 2 key heads -> 4 (each repeated for its 2 value heads)
            for t, rows in (("in_proj_qkv.weight", None), ("conv1d.weight", None)):
                w = W[p + "linear_attn." + t]
                qk = [np.repeat(w[s:s + 16].reshape((2, 8) + w.shape[1:]), 2, 0).reshape((32,) + w.shape[1:]) for s in (0, 16)]
                W2[p + "linear_attn." + t] = np.concatenate(qk + [w[32:]], axis=0)
    check(close(Q.forward_logits(c, W, ids), Q.forward_logits(c2, W2, ids), 1e-12),
          "gqa: qwen35 kv head = h // group; GDN key head j serves value heads j*r..j*r+r-1")

    c, W = minicpm_model(9)
    W["lm_head.weight"] = np.random.default_rng(1).standard_normal((300, 64))
    tied = M.forward_logits(c, W, ids)
    untied = M.forward_logits(dict(c, tie_word_embeddings=False), W, ids)
    h_emb = M.lm_head(c, W) is W["model.embed_tokens.weight"]
    check(h_emb and not close(tied, untied, 1e-6), "head: tied by default, lm_head when tie_word_embeddings false")


# ----------------------------------------------------------------------------- (f)

def to_bf16_bits(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)   # round to nearest even


def write_safetensors(path, tensors, dtypes):
    """tensors: name -> float64 array; dtypes: name -> F32|F16|BF16. Returns the stored values."""
    header, blobs, stored, offset = {"__metadata__": {"format": "pt"}}, [], {}, 0
    for name in sorted(tensors):
        x, dt = tensors[name], dtypes[name]
        if dt == "F32":
            raw = x.astype("<f4").tobytes()
            stored[name] = x.astype(np.float32).astype(np.float64)
        elif dt == "F16":
            raw = x.astype("<f2").tobytes()
            stored[name] = x.astype(np.float16).astype(np.float64)
        else:
            bits = to_bf16_bits(x)
            raw = bits.astype("<u2").tobytes()
            stored[name] = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64).reshape(x.shape)
        header[name] = {"dtype": dt, "shape": list(x.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    hjson = json.dumps(header).encode()
    hjson += b" " * ((-len(hjson)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)) + hjson + b"".join(blobs))
    return stored


def write_checkpoint(model_dir, config, W, dtype_of, shards=1):
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f)
    names = sorted(W)
    if shards == 1:
        return write_safetensors(os.path.join(model_dir, "model.safetensors"), W, {n: dtype_of(n) for n in names})
    stored, weight_map = {}, {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: W[n] for n in names[s::shards]}
        stored.update(write_safetensors(os.path.join(model_dir, fname), part, {n: dtype_of(n) for n in part}))
        weight_map.update({n: fname for n in part})
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    return stored


def test_safetensors_and_cli(tmp):
    bits = np.array([0x3F80, 0xC000, 0x4049, 0x0000, 0x8000, 0x7F80], dtype="<u2")
    p = os.path.join(tmp, "bits.safetensors")
    hdr = json.dumps({"x": {"dtype": "BF16", "shape": [6], "data_offsets": [0, 12]}}).encode()
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr + bits.tobytes())
    got = safetensors_np.read_safetensors(p)["x"]
    check(close(got[:5], [1.0, -2.0, 3.140625, 0.0, -0.0], 0) and got[5] == np.inf and np.signbit(got[4]),
          "safetensors: bf16 bit patterns decode (u16 << 16 viewed as f32)")
    rng = np.random.default_rng(10)
    T = {"a": rng.standard_normal((3, 5)), "b": rng.standard_normal(7), "c": rng.standard_normal((2, 2, 2))}
    kinds = {"a": "F32", "b": "F16", "c": "BF16"}
    for shards in (1, 2):
        d = os.path.join(tmp, f"st{shards}")
        stored = write_checkpoint(d, {}, T, kinds.get, shards)
        back = safetensors_np.load_weights(d)
        ok = set(back) == set(T) and all(back[n].dtype == np.float64 and close(back[n], stored[n], 0) for n in T)
        check(ok and close(back["c"], T["c"], 1e-2 * np.abs(T["c"]).max()),
              f"safetensors: F32/F16/BF16 round trip, {'single file' if shards == 1 else 'sharded index'}")
        some = safetensors_np.load_weights(d, skip_prefixes=("a", "c"))
        check(set(some) == {"b"} and close(some["b"], stored["b"], 0),
              f"safetensors: skip_prefixes leaves those tensors unread, {'single file' if shards == 1 else 'sharded index'}")
    with open(os.path.join(tmp, "st1", "model.safetensors"), "r+b") as f:
        f.truncate(os.path.getsize(f.name) - 4)
    try:
        safetensors_np.load_weights(os.path.join(tmp, "st1"))
        check(False, "safetensors: truncated file rejected")
    except ValueError:
        check(True, "safetensors: truncated file rejected")

    # end to end: write tiny checkpoints, run the CLIs, compare with a direct forward
    c, W = minicpm_model(11)
    mdir = os.path.join(tmp, "minicpm")
    Wst = write_checkpoint(mdir, c, W, lambda n: "BF16")
    out = os.path.join(tmp, "minicpm.json")
    M.main(["--model", mdir, "--prompt-ids", "1,2,3,4,5", "--prompt-ids", "7", "--generate", "4",
            "--max-model-len", "16", "--out", out])
    cli_ok(out, lambda ids: M.forward_logprobs(c, Wst, ids, long_rope=False), "minicpm")
    bout = os.path.join(tmp, "minicpm_bf16.json")
    M.main(["--model", mdir, "--prompt-ids", "1,2,3,4,5", "--generate", "3", "--dtype", "bfloat16", "--out", bout])
    cli_ok(bout, lambda ids: M.forward_logprobs(c, Wst, ids, dtype="bfloat16"), "minicpm --dtype bfloat16")
    with open(out) as f1, open(bout) as f2:
        opts = json.load(f1)["options"]["dtype"], json.load(f2)["options"]["dtype"]
    check(opts == ("float64", "bfloat16"), f"minicpm: options.dtype recorded {opts}")
    c, W = qwen_model(12)
    W["mtp.fc.weight"] = np.zeros((2, 2))
    W["model.vision_tower.embeddings.patch_embedding.weight"] = np.zeros((2, 2))
    qdir = os.path.join(tmp, "qwen")
    Wst = write_checkpoint(qdir, c, W, lambda n: "F32" if "A_log" in n else "BF16", shards=3)
    qout = os.path.join(tmp, "qwen.json")
    Q.main(["--model", qdir, "--prompt-ids", "3,1,4,1,5,9,2,6", "--generate", "3", "--gdn-mode", "chunked", "--out", qout])
    cli_ok(qout, lambda ids: Q.forward_logprobs(c, Wst, ids), "qwen35")
    # A_log is stored F32 here: the bf16 mode rounds it (and every other tensor) to bf16
    qbout = os.path.join(tmp, "qwen_bf16.json")
    Q.main(["--model", qdir, "--prompt-ids", "3,1,4,1,5", "--generate", "2", "--dtype", "bfloat16", "--out", qbout])
    cli_ok(qbout, lambda ids: Q.forward_logprobs(c, Wst, ids, dtype="bfloat16"), "qwen35 --dtype bfloat16")
    with open(qout) as f1, open(qbout) as f2:
        opts = json.load(f1)["options"]["dtype"], json.load(f2)["options"]["dtype"]
    check(opts == ("float64", "bfloat16"), f"qwen35: options.dtype recorded {opts}")
    test_compare(out, tmp)


def cli_ok(path, fwd, name):
    with open(path) as f:
        dump = json.load(f)
    ok = True
    for s in dump["sequences"]:
        P, G, rows = len(s["prompt_ids"]), s["generated_ids"], np.array(s["logprobs"])
        ok &= rows.shape[0] == P + len(G) - 1
        ok &= all(int(np.argmax(rows[P - 1 + i])) == G[i] for i in range(len(G) - 1))
        ok &= close(rows, fwd(s["prompt_ids"] + G[:-1]), 1e-12)
        ok &= int(np.argmax(fwd(s["prompt_ids"] + G[:-1])[-1])) == G[-1]
    check(ok, f"{name}: CLI dump = greedy tokens + direct forward log-probs, rows = P + N - 1")


def test_compare(ref_path, tmp):
    with open(ref_path) as f:
        ref = json.load(f)
    m = compare_logprobs.compare(ref, ref)
    check(not compare_logprobs.check_bounds(m, {}) and m["overall"]["max_abs_full"] == 0, "compare: reference vs itself passes")
    eng = copy.deepcopy(ref)
    for s in eng["sequences"]:                      # float32 rows, last prompt position + generated only
        P = len(s["prompt_ids"])
        s["logprobs"] = [[float(np.float32(x)) for x in row] for row in s["logprobs"][P - 1:]]
        s["logprob_positions"] = [P - 1]
    m = compare_logprobs.compare(eng, ref)
    check(not compare_logprobs.check_bounds(m, {}) and m["overall"]["rows"] == 2 + 2 * 3,
          "compare: float32 engine dump with logprob_positions passes, rows aligned")
    bad = copy.deepcopy(eng)
    row = np.array(bad["sequences"][0]["logprobs"][1])
    top = np.argsort(-row)
    row[top[0]], row[top[1]] = row[top[1]], row[top[0]]        # swap the two best tokens
    bad["sequences"][0]["logprobs"][1] = row.tolist()
    fails = compare_logprobs.check_bounds(compare_logprobs.compare(bad, ref), {})
    check(any(f.startswith("require_top1") for f in fails) and any(f.startswith("max_abs_logprob") for f in fails),
          "compare: swapped top-1 fails require_top1 and max_abs_logprob")
    bad["sequences"][1]["generated_ids"][1] += 1
    m = compare_logprobs.compare(bad, ref)
    check(m["sequences"][1]["first_divergence"] == 1 and m["sequences"][1]["rows"] == 2,
          "compare: generated divergence found, later rows not compared")
    path = os.path.join(tmp, "bad.json")
    with open(path, "w") as f:
        json.dump(bad, f)
    with contextlib.redirect_stdout(io.StringIO()):
        codes = compare_logprobs.main([path, ref_path]), compare_logprobs.main([ref_path, ref_path])
    check(codes == (1, 0),
          "compare: CLI exit codes (1 on a failed bound, 0 on pass)")


# ----------------------------------------------------------------------------- (g) bfloat16 mode

def nearest_bf16_brute(x):
    """Independent nearest-bf16 search for finite float32 values: of the two bf16 neighbours
    (truncation and the next one away from zero) take the nearer, on a tie the one with an even
    last mantissa bit. Differences are exact in float64."""
    f = np.asarray(x, dtype=np.float32)
    lo_bits = f.view(np.uint32) & np.uint32(0xFFFF0000)
    hi_bits = lo_bits + np.uint32(0x10000)
    lo = lo_bits.view(np.float32).astype(np.float64)
    hi = hi_bits.view(np.float32).astype(np.float64)
    d_lo, d_hi = np.abs(f.astype(np.float64) - lo), np.abs(hi - f.astype(np.float64))
    even_lo = ((lo_bits >> np.uint32(16)) & np.uint32(1)) == 0
    return np.where((d_lo < d_hi) | ((d_lo == d_hi) & even_lo), lo, hi)


def test_bf16_round():
    r = precision.bf16_round
    e = 2.0 ** -8                                   # half a bf16 ulp at 1 (ulp = 2^-7)
    cases = [(1.0, 1.0), (1 + e, 1.0),              # tie, 1.0 is even -> down
             (1 + 3 * e, 1 + 2 ** -6),              # tie between 1+2^-7 (odd) and 1+2^-6 (even) -> up
             (1 + e + 2 ** -20, 1 + 2 ** -7),       # just above the tie -> up
             (1 + e - 2 ** -20, 1.0),               # just below the tie -> down
             (-(1 + 3 * e), -(1 + 2 ** -6)),        # symmetric for negatives
             (math.pi, 3.140625),                   # 0x4049
             (0.1, 0.10009765625),                  # 0x3DCD
             (2.0 ** -130, 2.0 ** -130),            # float32 subnormal with 7 mantissa bits: exact
             (3.3895313892515355e38, 3.3895313892515355e38),   # largest bf16 (0x7F7F) stays
             (3.4e38, math.inf),                    # beyond the midpoint to 0x7F80 -> inf
             (-math.inf, -math.inf), (1e300, math.inf)]
    got = r(np.array([c[0] for c in cases]))
    want = np.array([c[1] for c in cases])
    bad = [(cases[i][0], got[i], want[i]) for i in range(len(cases)) if got[i] != want[i]]
    check(not bad, f"bf16_round: hand values (ties to even, overflow, subnormal){'; wrong: ' + str(bad) if bad else ''}")
    z = r(np.array([0.0, -0.0, math.nan]))
    check(z[0] == 0 and not np.signbit(z[0]) and z[1] == 0 and np.signbit(z[1]) and np.isnan(z[2]),
          "bf16_round: +0, -0 keep their sign, NaN stays NaN")
    rng = np.random.default_rng(30)
    b = r(rng.standard_normal(2000))
    half_ulp = np.ldexp(1.0, np.frexp(b)[1] - 9)             # b = m 2^e, m in [0.5, 1): ulp 2^(e-8)
    x = np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.integers(-30, 30, 20000),
                        b + np.sign(b) * half_ulp])             # exact ties, half of them odd
    y = r(x)
    bits_ok = np.all((y.astype(np.float32).view(np.uint32) & 0xFFFF) == 0)
    check(bits_ok and np.array_equal(y, nearest_bf16_brute(x)) and np.array_equal(r(y), y)
          and np.all(np.abs(y - x) <= 2.0 ** -8 * np.abs(x)),
          "bf16_round: == brute-force nearest bf16 (22000 values incl. exact ties), idempotent, |err| <= 2^-8 |x|")
    check(np.array_equal(r(x), (to_bf16_bits(x).astype(np.uint32) << 16).view(np.float32).astype(np.float64)),
          "bf16_round: == the safetensors writer's bf16 conversion")


def test_bf16_mode():
    r = precision.bf16_round
    # rounding points by hand: x = [3, 4], x/rms = [0.8485.., 1.1314..] -> bf16 [217/256, 145/128]
    x = np.array([3.0, 4.0])
    two = M.rms_norm(x, np.array([1.5, 1.5]), 0.0, r)       # bf(bf(x/rms) * w): 1.69921875 is a tie -> 218/128
    one = Q.rms_norm_1p(x, np.array([0.5, 0.5]), 0.0, r)    # bf(x/rms * (1+w)) = bf(1.6970..) -> 217/128
    check(close(two, [163 / 128, 218 / 128], 0) and close(one, [163 / 128, 217 / 128], 0),
          "bf16 hand: MiniCPM RMSNorm rounds twice ([163, 218]/128), Qwen3.5 zero-centred RMSNorm once ([163, 217]/128)")
    check(precision.scalar(1.4 / math.sqrt(24), "bfloat16") == struct.unpack("<f", struct.pack("<I", 0x3E9250F2))[0],
          "bf16: MiniCPM residual scale applied as fp32 0x3E9250F2")

    ids = list(np.random.default_rng(31).integers(0, 300, 40))
    for name, (c, W), fwd, fwd_logits in (("minicpm", minicpm_model(32), M.forward_logprobs, M.forward_logits),
                                          ("qwen35", qwen_model(33), Q.forward_logprobs, Q.forward_logits)):
        Wc = copy.deepcopy(W)
        f64, bf = fwd(c, W, ids), fwd(c, W, ids, dtype="bfloat16")
        logits = fwd_logits(c, W, ids, dtype="bfloat16")
        check(np.array_equal(logits, r(logits)), f"{name} bf16: logits are bf16 values")
        Wb = precision.weights_for(W, "bfloat16")
        check(all(np.array_equal(W[n], Wc[n]) for n in W) and all(np.array_equal(Wb[n], r(W[n])) for n in W)
              and precision.weights_for(Wb, "bfloat16") is Wb and precision.weights_for(W, "float64") is W
              and np.array_equal(fwd(c, Wb, ids, dtype="bfloat16"), bf)
              and all(np.array_equal(t, Wb[n]) for n, t in precision.weights_for(Wc, "bfloat16", inplace=True).items())
              and all(np.array_equal(Wc[n], Wb[n]) for n in W),
              f"{name} bf16: weights rounded once (input untouched unless inplace, pre-rounded weights give the same result)")
        check(np.array_equal(fwd(c, W, ids, dtype="float64"), f64) and close(np.exp(bf).sum(-1), np.ones(40), 1e-12),
              f"{name} bf16: float64 mode is the default path; bf16 log-probs normalised")
        diff = np.abs(bf - f64)
        # the random tiny Qwen3.5 is ill-conditioned (GDN outputs from cancelling sums are then
        # normalised per 8-dim head, amplifying relative errors up to ~30x), hence its looser bounds
        # (measured over 15 seeds: median 0.006-0.010, max 0.13-0.48; MiniCPM 2-3e-4 and 2-3e-3)
        med_bound, max_bound = (0.002, 0.02) if name == "minicpm" else (0.03, 1.0)
        check(1e-5 < diff.max() < max_bound and 0 < np.median(diff) < med_bound,
              f"{name} bf16: log-probs differ from float64 by a small non-zero amount (|diff| median "
              f"{np.median(diff):.1e} < {med_bound}, max {diff.max():.1e} < {max_bound})")
    c, W = qwen_model(33)
    diff = float(np.abs(Q.forward_logprobs(c, W, ids, "chunked", "bfloat16") - Q.forward_logprobs(c, W, ids, dtype="bfloat16")).max())
    check(diff < 0.05, f"qwen35 bf16: chunked == recurrent up to bf16 boundary flips (max |diff| {diff:.1e})")

    # peaked logits: embeddings x8 (tied head: a token predicts itself by a wide margin), neutral
    # final norm, output projections x0.3 (a residual scale, as MiniCPM's). Every row whose float64
    # top-1 margin is >= 0.5 nats must keep its argmax in bf16, and nearly all rows are that peaked.
    for name, mk, fwd, neutral in (("minicpm", minicpm_model, M.forward_logprobs, 1.0),
                                   ("qwen35", qwen_model, Q.forward_logprobs, 0.0)):
        c, W = mk(34)
        for n in W:
            if n.endswith("embed_tokens.weight"):
                W[n] = 8.0 * W[n]
            elif n.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight")):
                W[n] = 0.3 * W[n]
            elif n in ("model.norm.weight", "model.language_model.norm.weight"):
                W[n] = np.full_like(W[n], neutral)
        ids = list(np.random.default_rng(35).integers(0, 300, 60))
        f64, bf = fwd(c, W, ids), fwd(c, W, ids, dtype="bfloat16")
        top2 = np.sort(f64, -1)[:, -2:]
        peaked = top2[:, 1] - top2[:, 0] >= 0.5
        same = f64.argmax(-1) == bf.argmax(-1)
        check(peaked.mean() >= 0.9 and same[peaked].all(),
              f"{name} bf16: top-1 == float64 on peaked logits ({int(same[peaked].sum())}/{int(peaked.sum())} "
              f"peaked rows, {int(same.sum())}/60 rows overall)")


# ----------------------------------------------------------------------------- (h) MiniCPM-V-4.6 vision

# §6.1 worked examples: (H, W) -> grid (rows, cols) | None, thumbnail (H, W), thumbnail tokens,
# slice (H, W) | None, tokens per slice, total tokens (16x, S = 448, P = 14, M = 9)
SLICING_TABLE = [
    ((896, 1344), (2, 3), (392, 560), 70, (448, 448), 64, 454),
    ((720, 1280), (2, 3), (336, 616), 66, (392, 504), 63, 444),
    ((1080, 1920), (2, 4), (336, 616), 66, (448, 448), 64, 578),
    ((3000, 1000), (4, 2), (784, 280), 70, (560, 392), 70, 630),
    ((100, 100), None, (448, 448), 64, None, 0, 64),
]


def vision_model_config(**over):
    """Tiny MiniCPM-V-4.6: vision hidden 16, 2 heads, 3 layers with the vit_merger after layer 1 (so
    one layer runs on the downsampled grid), 8x8 position table; the tiny Qwen3.5 text model."""
    c = qwen_config()
    c.update({"model_type": "minicpmv4_6", "insert_layer_id": 1, "image_token_id": 290, "video_token_id": 291,
              "vision_config": {"model_type": "minicpmv4_6_vision", "hidden_size": 16, "intermediate_size": 24,
                                "num_hidden_layers": 3, "num_attention_heads": 2, "patch_size": 14,
                                "image_size": 112, "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh",
                                "num_channels": 3}})
    c.update(over)
    return c


def vision_weights(c, seed):
    """Random vision + merger weights: LayerNorm weights near 1, biases small, matrices / sqrt(fan_in)."""
    rng = np.random.default_rng(seed)
    W = {}
    for name, shape in sorted(V.vision_shapes(c).items()):
        if "norm" in name and name.endswith(".weight"):
            W[name] = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith("bias") or "position_embedding" in name:
            W[name] = 0.2 * rng.standard_normal(shape)
        else:
            W[name] = rng.standard_normal(shape) / math.sqrt(int(np.prod(shape[1:])))
    return W


def vision_model(seed=0, **over):
    c = vision_model_config(**over)
    W = random_weights(Q.expected_shapes(c, "model.language_model."), seed)
    W.update(vision_weights(c, seed + 1000))
    return c, W


def masked_attention(x, W, p, heads, allowed):
    """Independent MHA over one sequence x [T, D] where token i sees token j iff allowed[i, j]."""
    T, D = x.shape
    hd = D // heads
    q = x @ W[p + "q_proj.weight"].T + W[p + "q_proj.bias"]
    k = x @ W[p + "k_proj.weight"].T + W[p + "k_proj.bias"]
    v = x @ W[p + "v_proj.weight"].T + W[p + "v_proj.bias"]
    o = np.zeros((T, D))
    for h in range(heads):
        s = slice(h * hd, (h + 1) * hd)
        scores = np.where(allowed, q[:, s] @ k[:, s].T / math.sqrt(hd), -np.inf)
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        o[:, s] = (e / e.sum(axis=1, keepdims=True)) @ v[:, s]
    return o @ W[p + "out_proj.weight"].T + W[p + "out_proj.bias"]


def packed_vision_forward(c, W, slices):
    """A second, independently structured vision forward in HF's packed style: all slices' tokens in
    one sequence, attention restricted by block-diagonal masks (slice id in the encoder, (slice,
    window) in the vit_merger), merges by explicit index lists instead of reshapes."""
    vc, P = c["vision_config"], c["vision_config"]["patch_size"]
    side, eps, heads = vc["image_size"] // P, vc["layer_norm_eps"], vc["num_attention_heads"]
    ln = lambda x, n, e=eps: V.layer_norm(x, W[n + ".weight"], W[n + ".bias"], e)  # noqa: E731
    lin = lambda x, n: x @ W[n + ".weight"].T + W[n + ".bias"]  # noqa: E731
    tokens, meta = [], []                                   # meta: (slice, row, col) per token
    kernel = W[V.VISION + "embeddings.patch_embedding.weight"]
    for s, img in enumerate(slices):
        h, w = img.shape[0] // P, img.shape[1] // P
        for r in range(h):
            for col in range(w):
                patch = img[r * P:(r + 1) * P, col * P:(col + 1) * P].transpose(2, 0, 1)  # [C, P, P]
                e = np.einsum("dcij,cij->d", kernel, patch) + W[V.VISION + "embeddings.patch_embedding.bias"]
                pos = math.floor(side * r / h) * side + math.floor(side * col / w)
                tokens.append(e + W[V.VISION + "embeddings.position_embedding.weight"][pos])
                meta.append((s, r, col))
    x = np.array(tokens)
    sizes = [(img.shape[0] // P, img.shape[1] // P) for img in slices]

    def merge_index(meta, sizes):
        """For each slice, windows row-major, each as the 4 token indices TL, TR, BL, BR."""
        where = {m: i for i, m in enumerate(meta)}
        groups = []
        for s, (h, w) in enumerate(sizes):
            for R in range(h // 2):
                for C in range(w // 2):
                    groups.append([where[(s, 2 * R + a, 2 * C + b)] for a in (0, 1) for b in (0, 1)])
        return groups

    for i in range(vc["num_hidden_layers"]):
        p = f"{V.VISION}encoder.layers.{i}."
        same_slice = np.array([[a[0] == b[0] for b in meta] for a in meta])
        x = x + masked_attention(ln(x, p + "layer_norm1"), W, p + "self_attn.", heads, same_slice)
        x = x + lin(V.gelu_tanh(lin(ln(x, p + "layer_norm2"), p + "mlp.fc1")), p + "mlp.fc2")
        if i == c["insert_layer_id"]:
            p = V.VISION + "vit_merger."
            same_window = np.array([[a[0] == b[0] and a[1] // 2 == b[1] // 2 and a[2] // 2 == b[2] // 2
                                     for b in meta] for a in meta])
            x = x + masked_attention(ln(x, p + "layer_norm1"), W, p + "self_attn.", heads, same_window)
            groups = merge_index(meta, sizes)
            cat = np.array([np.concatenate([x[j] for j in g]) for g in groups])
            mean = np.array([sum(x[j] for j in g) / 4 for g in groups])
            x = lin(V.gelu_tanh(lin(ln(cat, p + "pre_norm"), p + "linear_1")), p + "linear_2") + mean
            sizes = [(h // 2, w // 2) for h, w in sizes]
            meta = [(s, r, col) for s, (h, w) in enumerate(sizes) for r in range(h) for col in range(w)]
    x = ln(x, V.VISION + "post_layernorm")
    groups = merge_index(meta, sizes)
    cat = np.array([np.concatenate([x[j] for j in g]) for g in groups])
    y = lin(ln(cat, V.MERGER + "pre_norm", 1e-6), V.MERGER + "linear_1")
    y = 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    return lin(y, V.MERGER + "linear_2")


def test_slicing():
    pp = V.preprocessor_config(None)
    check(pp == V.PREPROCESSOR_DEFAULTS, "vision: preprocessor defaults without a model dir")
    bad = []
    for (H, Wd), grid, thumb, nt, sl, ns, total in SLICING_TABLE:
        plan = V.slice_plan(H, Wd, pp)
        got = (plan["grid"], plan["thumb"], plan["thumb_tokens"], plan["slice"], plan["slice_tokens"], plan["tokens"])
        if got != (grid, thumb, nt, sl, ns, total):
            bad.append(((H, Wd), got))
    check(not bad, f"slicing: §6.1 worked examples (grid rows x cols, thumbnail, slice, token counts){bad or ''}")
    check([V.ensure_divide(L, 56) for L in (84, 140, 196, 20, 0, 83.9, 365, 547)] == [112, 112, 224, 56, 56, 56, 392, 560],
          "slicing: ensure_divide rounds half to even (84 -> 112, 140 -> 112, 196 -> 224), at least d")
    check(V.best_resize(896, 1344, 448, 14, False) == (392, 560) and V.best_resize(100, 100, 448, 14, False) == (112, 112)
          and V.best_resize(100, 100, 448, 14, True) == (448, 448),
          "slicing: best_resize (int truncation, no upscale unless asked)")
    check(V.slice_grid(1000, 1000, 448, 9) == (2, 2) and V.slice_grid(5000, 5000, 448, 9) == (3, 3)
          and V.slice_grid(448, 448, 448, 9) is None and V.slice_grid(449, 448, 448, 9) == (2, 1)
          and V.slice_grid(500, 3000, 448, 9) == (1, 7) and V.slice_grid(3000, 500, 448, 9) == (7, 1),
          "slicing: grids (square 2x2, capped at M: 3x3, none when m <= 1, wide 1x7, tall 7x1)")
    # ties: |ln(1/2)| == |ln(2)| exactly, so the first (a = 1: 1 col, 2 rows) stays; but
    # |ln(2/3)| = 0.40546510810816444 > |ln(3/2)| = 0.4054651081081644 in doubles, so a square
    # 1100 x 1100 image (n = 6) gets 2 rows x 3 cols. An implementation computing ln(a) - ln(b)
    # would see an exact tie there and keep 3 rows x 2 cols.
    check(V.slice_grid(500, 500, 448, 9) == (2, 1) and V.slice_grid(1100, 1100, 448, 9) == (2, 3)
          and V.slice_plan(1100, 1100, pp)["tokens"] == 64 + 6 * 70,
          "slicing: first strict minimum of |ln(W0/H0) - ln(a/b)| with ln of the quotient (500^2 -> 2x1, 1100^2 -> 2x3)")
    plan = V.slice_plan(3000, 1000, dict(pp, slice_mode=False))
    check(plan["grid"] is None and plan["thumb"] == (784, 280) and plan["tokens"] == 70,
          "slicing: slice_mode false -> thumbnail only (upscale allowed)")

    t = V.placeholder_text(3, 2, 2, 3, 1, True)
    s = "<slice><|image_pad|></slice>"
    check(t == "<image_id>3</image_id><image><|image_pad|><|image_pad|></image>" + s * 3 + "\n" + s * 3,
          "placeholder: §6.2 layout (image id, thumbnail, rows of slices joined by one newline)")
    check(V.placeholder_text(0, 3, 0, 0, 0, False) == "<image>" + "<|image_pad|>" * 3 + "</image>"
          and V.placeholder_text(12, 1, None, None, 0, True) == "<image_id>12</image_id><image><|image_pad|></image>",
          "placeholder: no slices; use_image_id false drops the id")
    vocab = {"<image_id>": 1, "</image_id>": 2, "<image>": 3, "</image>": 4, "<slice>": 5, "</slice>": 6,
             "<|image_pad|>": 7, "1": 21, "2": 22, "Ċ": 30}
    check(V.placeholder_token_ids("<image_id>12</image_id><image><|image_pad|></image><slice></slice>\n<slice></slice>", vocab)
          == [1, 21, 22, 2, 3, 7, 4, 5, 6, 30, 5, 6], "placeholder: token ids (specials single, digits and newline bytewise)")

    ok = True
    for side, top in ((70, 1024), (8, 300), (16, 300)):
        for n in range(1, top + 1):
            try:
                V.position_buckets(n, side)
            except AssertionError:
                ok = False
    check(ok, "position ids: HF float32 bucketize form == floor(side*i/n) for n = 1..1024 (side 70), 1..300 (8, 16)")
    check(V.position_buckets(3, 8).tolist() == [0, 2, 5] and V.position_buckets(16, 8).tolist() == [i // 2 for i in range(16)]
          and V.position_buckets(35, 70).tolist() == list(range(0, 70, 2))
          and V.position_ids(2, 3, 8).tolist() == [0, 2, 5, 32, 34, 37],
          "position ids: hand values (bucket_h * side + bucket_w, exact boundaries included)")


def test_vision_math(tmp):
    check(close(V.gelu_tanh(np.array([1.0, -1.0, 0.0])), [0.8411919906082768, -0.15880800939172324, 0.0], 1e-15)
          and close(V.gelu_erf(np.array([1.0, -1.0, 0.0])), [0.8413447460685429, -0.15865525393145707, 0.0], 1e-15),
          "vision hand: tanh GELU and erf GELU at +-1")
    y = V.layer_norm(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 1.0]), np.array([0.0, 0.0, 1.0]), 0.0)
    check(close(y, [-math.sqrt(1.5), 0.0, 1 + math.sqrt(1.5)], 1e-15), "vision hand: LayerNorm (biased variance, w, b)")
    x = np.arange(4 * 6)[:, None] * np.ones((1, 2))                     # token n = r*6 + c on a 4x6 grid
    g = V.group_2x2(x, 4, 6)
    check(g[:, :, 0].tolist()[:4] == [[0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11], [12, 13, 18, 19]]
          and np.array_equal(V.ungroup_2x2(g, 4, 6), x), "vision: 2x2 groups are TL, TR, BL, BR, windows row-major; ungroup inverts")

    c, W = vision_model(40)
    d = V.vision_dims(c)
    rng = np.random.default_rng(41)
    img = rng.uniform(-1, 1, (56, 84, 3))
    pe = V.patch_embed(img, W, 14)
    k, b = W[V.VISION + "embeddings.patch_embedding.weight"], W[V.VISION + "embeddings.patch_embedding.bias"]
    loop = np.array([[sum(k[o, ch, i, j] * img[r * 14 + i, cc * 14 + j, ch] for ch in range(3) for i in range(14) for j in range(14))
                      + b[o] for o in range(16)] for r in range(4) for cc in range(6)])
    check(close(pe, loop, 1e-12), "vision: patch embedding == an explicit conv loop, tokens row-major")

    h, w = 6, 10
    x = rng.standard_normal((h * w, 16))
    rc = [(n // w, n % w) for n in range(h * w)]
    block = np.array([[a[0] // 2 == b_[0] // 2 and a[1] // 2 == b_[1] // 2 for b_ in rc] for a in rc])
    p = V.VISION + "vit_merger."
    full = masked_attention(V.layer_norm(x, W[p + "layer_norm1.weight"], W[p + "layer_norm1.bias"], 1e-6),
                            W, p + "self_attn.", 2, block)
    check(close(V.window_attention(d, W, x, h, w), full, 1e-12),
          "vision: 2x2 window attention == full attention with a block-diagonal mask (6x10 grid)")
    enc = masked_attention(x, W, V.VISION + "encoder.layers.0.self_attn.", 2, np.ones((h * w, h * w), bool))
    check(close(V.attention(x[None], W, V.VISION + "encoder.layers.0.self_attn.", 2)[0], enc, 1e-12),
          "vision: encoder attention == unmasked independent MHA (bidirectional)")

    slices = [rng.uniform(-1, 1, (56, 112, 3)), rng.uniform(-1, 1, (112, 56, 3)), rng.uniform(-1, 1, (56, 56, 3))]
    per = np.concatenate([V.vision_forward(c, W, s) for s in slices])
    packed = packed_vision_forward(c, W, slices)
    check(per.shape == (2 + 2 + 1, 32) and close(per, packed, 1e-10),
          f"vision: per-slice forward == packed 3-slice forward with block masks (max diff {np.abs(per - packed).max():.1e})")
    one = V.vision_forward(c, W, slices[0])
    other = V.vision_forward(c, W, np.concatenate([slices[0][:, :56], slices[2]], axis=1))
    check(close(per[:2], one, 0) and not close(one, other, 1e-6),
          "vision: a slice's features do not depend on the other slices; they do depend on its own pixels")
    c0 = vision_model_config(insert_layer_id=2)
    check(not close(V.vision_forward(c0, W, slices[0]), one, 1e-6) and close(packed_vision_forward(c0, W, slices[:1]),
          V.vision_forward(c0, W, slices[0]), 1e-10), "vision: insert_layer_id moves the vit_merger (both forms agree)")

    # preprocessing on a real image file: thumbnail and slices are PIL BICUBIC resizes, tiles row-major
    from PIL import Image
    arr = (rng.uniform(0, 256, (130, 300, 3))).astype(np.uint8)
    path = os.path.join(tmp, "img_300x130.png")
    Image.fromarray(arr).save(path)
    pp = dict(V.PREPROCESSOR_DEFAULTS, scale_resolution=112)
    plan, sl = V.preprocess(path, pp)
    pil = Image.fromarray(arr)
    thumb = np.asarray(pil.resize((168, 56), Image.BICUBIC)).astype(np.float64) / 127.5 - 1
    refined = np.asarray(pil.resize((336, 112), Image.BICUBIC)).astype(np.float64) / 127.5 - 1
    check(plan["grid"] == (1, 3) and plan["thumb"] == (56, 168) and plan["slice"] == (112, 112) and plan["tokens"] == 3 + 3 * 4
          and len(sl) == 4 and close(sl[0], thumb, 1e-14)
          and all(close(sl[1 + j], refined[:, 112 * j:112 * (j + 1)], 1e-14) for j in range(3)),
          "preprocess: thumbnail = BICUBIC resize, slices = row-major tiles of the refined resize, u8/127.5 - 1")
    gray = os.path.join(tmp, "gray.png")
    Image.fromarray(arr[:, :, 0]).save(gray)
    check(V.preprocess(gray, pp)[1][0].shape == (56, 168, 3), "preprocess: a grayscale file is converted to RGB")
    return c, W, path


def write_vision_checkpoint(model_dir, c, W, pp=None):
    """Tiny checkpoint + optional preprocessor_config.json + a minimal tokenizer.json (the image
    special tokens, the digits and the newline byte)."""
    stored = write_checkpoint(model_dir, c, W, lambda n: "F32")
    if pp is not None:
        with open(os.path.join(model_dir, "preprocessor_config.json"), "w") as f:
            json.dump(pp, f)
    vocab = {str(i): 100 + i for i in range(10)}
    vocab["Ċ"] = 110
    added = [{"id": 284 + i, "content": s} for i, s in enumerate(V.SPECIAL_TOKENS)]   # <|image_pad|> = 290
    with open(os.path.join(model_dir, "tokenizer.json"), "w") as f:
        json.dump({"model": {"type": "BPE", "vocab": vocab}, "added_tokens": added}, f)
    return stored


def test_vision_cli(tmp, c, W, big_path):
    from PIL import Image
    rng = np.random.default_rng(42)
    small_path = os.path.join(tmp, "img_60x40.png")
    Image.fromarray(rng.uniform(0, 256, (40, 60, 3)).astype(np.uint8)).save(small_path)
    pp = dict(V.PREPROCESSOR_DEFAULTS, scale_resolution=112)
    mdir = os.path.join(tmp, "minicpmv46")
    Wst = write_vision_checkpoint(mdir, c, W, pp)
    vocab = V.load_vocab(mdir)

    # input_embeds override in qwen35_ref
    ids = list(rng.integers(0, 280, 20))
    base = Q.forward_logits(c, Wst, ids)
    E = Wst["model.language_model.embed_tokens.weight"]
    check(np.array_equal(Q.forward_logits(c, Wst, ids, input_embeds={}), base)
          and np.array_equal(Q.forward_logits(c, Wst, ids, input_embeds=([5, 9], E[[ids[5], ids[9]]])), base),
          "qwen35 input_embeds: empty override, or the tokens' own embeddings, == the plain forward")
    vals = rng.standard_normal((2, 32))
    a = Q.forward_logits(c, Wst, ids, input_embeds=([7, 12], vals))
    b = Q.forward_logits(c, Wst, ids, input_embeds={12: vals[1], 7: vals[0]})
    check(np.array_equal(a, b) and close(a[:7], base[:7], 1e-12) and not close(a[7:], base[7:], 1e-6),
          "qwen35 input_embeds: dict == (rows, array); rows before the first override unchanged, later ones change")
    try:
        Q.forward_logits(c, Wst, ids, input_embeds=([20], vals[:1]))
        check(False, "qwen35 input_embeds: a row past the sequence is rejected")
    except ValueError:
        check(True, "qwen35 input_embeds: a row past the sequence is rejected")

    # image_features == the slices through vision_forward; plans as expected
    feats = V.image_features(mdir, big_path)
    plan, sl = V.preprocess(big_path, V.preprocessor_config(mdir))
    check(feats.shape == (15, 32) and close(feats, np.concatenate([V.vision_forward(c, Wst, s) for s in sl]), 0),
          "vision: image_features = thumbnail rows, then slice rows row-major (300x130 -> 3 + 3x4 rows)")

    def prompt(paths):
        out = [5, 6]
        for k, pth in enumerate(paths):
            w0, h0 = Image.open(pth).size
            out += V.placeholder_token_ids(V.plan_text(V.slice_plan(h0, w0, pp), k, pp), vocab) + [7]
        return out + [8, 9]

    p1, p2 = prompt([small_path, big_path]), prompt([big_path])
    out = os.path.join(tmp, "v.json")
    fout = os.path.join(tmp, "vf.json")
    V.main(["--model", mdir, "--image", small_path, "--image", big_path, "--image", big_path,
            "--images-per-prompt", "2,1", "--prompt-ids", ",".join(map(str, p1)), "--prompt-ids", ",".join(map(str, p2)),
            "--generate", "3", "--out", out, "--features-out", fout])
    f_small, f_big = V.image_features(mdir, small_path), feats
    with open(fout) as f:
        fd = json.load(f)
    check([len(i["features"]) for i in fd["images"]] == [4, 15, 15] and close(np.array(fd["images"][1]["features"]), f_big, 0),
          "vision CLI: --features-out rows per image (60x40 -> 4, 300x130 -> 15)")
    overrides = [([i for i, t in enumerate(p1) if t == 290], np.concatenate([f_small, f_big])),
                 ([i for i, t in enumerate(p2) if t == 290], f_big)]
    with open(out) as f:
        dump = json.load(f)
    ok = dump["reference"] == "minicpmv46_vision_ref" and dump["options"]["layout_check"] == ["ok", "ok"]
    for s, ov in zip(dump["sequences"], overrides):
        P, G, rows = len(s["prompt_ids"]), s["generated_ids"], np.array(s["logprobs"])
        direct = Q.forward_logprobs(c, Wst, s["prompt_ids"] + G[:-1], input_embeds=ov)
        ok &= rows.shape[0] == P + len(G) - 1 and close(rows, direct, 1e-12) and int(np.argmax(direct[-1])) == G[-1]
        ok &= all(int(np.argmax(rows[P - 1 + i])) == G[i] for i in range(len(G) - 1))
        ok &= not close(rows[:P], Q.forward_logprobs(c, Wst, s["prompt_ids"]), 1e-6)
    check(ok, "vision CLI: dump = greedy tokens + direct forward with the image rows replaced, layout check ok")

    def fails(argv):
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                V.main(argv)
            return False
        except SystemExit:
            return True

    common = ["--model", mdir, "--out", os.path.join(tmp, "bad.json")]
    check(fails(common + ["--image", big_path, "--prompt-ids", ",".join(map(str, p1))]),
          "vision CLI: image-token count != feature rows is an error")
    swapped = prompt([big_path, small_path])
    check(fails(common + ["--image", small_path, "--image", big_path, "--prompt-ids", ",".join(map(str, swapped))])
          and not fails(common + ["--image", small_path, "--image", big_path, "--skip-layout-check",
                                  "--prompt-ids", ",".join(map(str, swapped))]),
          "vision CLI: same token count but another layout is an error (unless --skip-layout-check)")
    check(fails(common + ["--image", big_path, "--images-per-prompt", "1,1", "--prompt-ids", "1,2"]),
          "vision CLI: --images-per-prompt must add up to the images")
    lout = os.path.join(tmp, "layout.json")
    with contextlib.redirect_stdout(io.StringIO()) as so:
        V.main(["--model", mdir, "--image", small_path, "--image", big_path, "--image", big_path,
                "--images-per-prompt", "1,2", "--layout", "--out", lout])
    lines = [json.loads(line) for line in so.getvalue().splitlines()]
    with open(lout) as f:
        saved = json.load(f)
    want_big = {"grid": [1, 3], "thumb": [56, 168], "slice": [112, 112], "tokens": 15}
    check(lines == saved and len(lines) == 3 and lines[0]["grid"] is None and lines[0]["tokens"] == 4
          and all({k: lines[i][k] for k in want_big} == want_big for i in (1, 2))
          and lines[1]["text"].startswith("<image_id>0</image_id>") and lines[2]["text"].startswith("<image_id>1</image_id>")
          and lines[2]["text"].count("<|image_pad|>") == 15 and "\n" not in lines[2]["text"],
          "vision CLI --layout: one JSON line per image, image index per prompt")


def test_minicpm_folded_into_llama():
    # hf_ref.py and hf_reference_dump.py can run MiniCPM4 as transformers' Llama with MiniCPM's
    # scalings folded into the weights (scripts/minicpm_as_llama.py); with the scalings neutral
    # (scale_emb 1, scale_depth sqrt(L), dim_model_base = hidden, an untied head) minicpm_ref
    # is plain Llama, so the folded weights must give the same logits as the original model.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
    import minicpm_as_llama
    for tied in (True, False):
        c, W = minicpm_model(seed=11, tie_word_embeddings=tied)
        if not tied:
            W["lm_head.weight"] = np.random.default_rng(12).standard_normal(W["model.embed_tokens.weight"].shape)
        plain = dict(c, scale_emb=1, scale_depth=math.sqrt(c["num_hidden_layers"]),
                     dim_model_base=c["hidden_size"], tie_word_embeddings=False)
        ids = [1, 5, 17, 200, 3, 99, 42, 7, 8, 250, 11, 12, 13, 14, 15, 16, 19, 21]
        want = M.forward_logits(c, W, ids, long_rope=True)
        got = M.forward_logits(plain, minicpm_as_llama.fold_minicpm_scalings(c, W), ids, long_rope=True)
        check(close(got, want, 1e-10), f"MiniCPM folded into Llama == MiniCPM (tied={tied})")


def main():
    test_rope()
    test_minicpm_folded_into_llama()
    test_causality_and_prefix()
    test_incremental()
    test_gdn_forms()
    test_hand_cases()
    test_bf16_round()
    test_bf16_mode()
    test_slicing()
    with tempfile.TemporaryDirectory() as tmp:
        test_safetensors_and_cli(tmp)
        test_vision_cli(tmp, *test_vision_math(tmp))
    print(f"\n{len(FAILURES)} failure(s)" if FAILURES else "\nall reference self-tests passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
