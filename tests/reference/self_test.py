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
close to but not equal to float64, top-1 kept where the logits are peaked.

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


def main():
    test_rope()
    test_causality_and_prefix()
    test_incremental()
    test_gdn_forms()
    test_hand_cases()
    test_bf16_round()
    test_bf16_mode()
    with tempfile.TemporaryDirectory() as tmp:
        test_safetensors_and_cli(tmp)
    print(f"\n{len(FAILURES)} failure(s)" if FAILURES else "\nall reference self-tests passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
