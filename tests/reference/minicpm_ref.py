"""Reference forward pass of MiniCPMForCausalLM (MiniCPM4-0.5B architecture) in numpy float64.

The test oracle for cpmserve's MiniCPM4 path, written from ../shared/docs/specs/minicpm4.md
(sections 1-4): the exact math of the model, everything in float64, no KV cache (every call runs
the full causal forward over all positions), no batching, no speed tricks.

dtype="bfloat16" (CLI --dtype bfloat16) emulates the bf16 PyTorch model instead (see
precision.py): weights rounded to bf16, and activations rounded with bf() exactly at the points of
minicpm4.md §3, float64 in between:
  h = bf(E[tok]*scale_emb); RMSNorm y = bf(x*r), out = bf(y*w); q, k, v = bf(x Wᵀ);
  RoPE on the bf16 q/k in float64, rounded once; scores, softmax in float; o = bf(P v) where P,
  the exps against the running max of an online softmax, is rounded to bf16 and their sum is not
  (as FlashAttention-2, PyTorch's CPU SDPA and the engine: precision.attention_values; eager
  rounds the normalized probabilities instead); a = bf(o Woᵀ);
  h = bf(h + bf(a*rs)); MLP g, u = bf(.), m = bf(bf(silu(g))*u), d = bf(m Wdᵀ), h = bf(h + bf(d*rs));
  head: RMSNorm (two roundings), z = bf(hf / (hidden/dim_model_base)), logits = bf(z Eᵀ).
  Python-float constants (scale_emb, rs, the head divisor) are applied as fp32, as PyTorch does.

  h = E[ids] * scale_emb
  per layer:  h += rs * Attn(RMSNorm(h)),  h += rs * MLP(RMSNorm(h)),  rs = scale_depth/sqrt(L)
  logits = (RMSNorm(h) / (hidden_size/dim_model_base)) @ head.T

Attention: GQA (query head h reads kv head h // (heads/kv_heads)), rotate_half (NEOX) RoPE over the
whole head (pairs (i, i+head_dim/2)), LongRoPE when rope_scaling.rope_type == "longrope", causal
softmax with scale 1/sqrt(head_dim). LongRoPE factor lists are rounded to float32 (every
implementation stores them so); all other arithmetic is float64.

Short/long LongRoPE factors: the `long_rope` argument; the default follows vLLM: long iff the
engine's max_model_len > original_max_position_embeddings (max_model_len defaults to
max_position_embeddings), for all positions.

Must not depend on: cpmserve code, torch, transformers. numpy + stdlib only.
CLI: see ref_cli.py and README.md.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import precision  # noqa: E402
import q8_0  # noqa: E402
import ref_cli  # noqa: E402
import safetensors_np  # noqa: E402
from precision import identity  # noqa: E402

ARCH = "MiniCPMForCausalLM"
IGNORED_SUFFIXES = ("rotary_emb.inv_freq", "cos_cached", "sin_cached")


# ----------------------------------------------------------------------------- config

def dims(c):
    """Derived sizes from config.json (raises KeyError naming a missing field)."""
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "vocab_size", "rms_norm_eps", "scale_emb", "dim_model_base", "scale_depth",
                "max_position_embeddings"):
        if key not in c:
            raise KeyError(f"config.json: missing field {key}")
    archs = c.get("architectures") or [ARCH]
    if ARCH not in archs:
        raise ValueError(f"config.json: architectures {archs} is not {ARCH}")
    if c.get("hidden_act", "silu") != "silu":
        raise ValueError(f"config.json: hidden_act {c['hidden_act']} is not silu")
    heads = c["num_attention_heads"]
    return dict(D=c["hidden_size"], L=c["num_hidden_layers"], H=heads,
                KV=c.get("num_key_value_heads") or heads, hd=c["hidden_size"] // heads,
                F=c["intermediate_size"], V=c["vocab_size"])


def rope_kind(c):
    rs = c.get("rope_scaling")
    if not rs:
        return "default"
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "su":
        kind = "longrope"
    if kind not in ("default", "longrope"):
        raise ValueError(f"config.json: rope_scaling type {kind} not supported")
    return kind


def original_max(c):
    rs = c.get("rope_scaling") or {}
    return rs.get("original_max_position_embeddings", c.get("original_max_position_embeddings"))


def default_long_rope(c, max_model_len=None):
    """vLLM's rule: long factors iff max_model_len > original_max_position_embeddings."""
    if rope_kind(c) != "longrope":
        return False
    mml = max_model_len if max_model_len is not None else c["max_position_embeddings"]
    return mml > original_max(c)


# ----------------------------------------------------------------------------- math

def rms_norm(x, w, eps, rnd=identity):
    """y = x / sqrt(mean(x^2) + eps) * w over the last axis (no 1+w offset).
    Rounding points (bf16 mode): rnd(rnd(x / rms) * w)."""
    return rnd(rnd(x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)) * w)


def silu(x):
    return x * (0.5 * (1.0 + np.tanh(0.5 * x)))        # x * sigmoid(x), overflow-free


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rope_cos_sin(c, positions, long_rope):
    """cos, sin [T, head_dim/2] for the given positions (magnitude factor already applied)."""
    hd = c["hidden_size"] // c["num_attention_heads"]
    half = hd // 2
    theta = float(c.get("rope_theta") or 10000.0)
    i = np.arange(half, dtype=np.float64)
    base = theta ** (2.0 * i / hd)                        # theta^(2i/hd)
    factors = np.ones(half)
    mscale = 1.0
    if rope_kind(c) == "longrope":
        rs = c["rope_scaling"]
        factors = np.array(rs["long_factor" if long_rope else "short_factor"], dtype=np.float32)
        factors = factors.astype(np.float64)
        if factors.shape != (half,):
            raise ValueError(f"rope_scaling factor list has {factors.size} entries, expected {half}")
        L0 = original_max(c)
        S = c["max_position_embeddings"] / L0
        mscale = math.sqrt(1.0 + math.log(S) / math.log(L0)) if S > 1.0 else 1.0
    inv_freq = 1.0 / (factors * base)                    # [half]
    angle = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]  # [T, half]
    return np.cos(angle) * mscale, np.sin(angle) * mscale


def apply_rope(x, cos, sin):
    """rotate_half RoPE. x [T, heads, hd]; cos/sin [T, hd/2]; pairs (i, i + hd/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


# ----------------------------------------------------------------------------- weights

def expected_shapes(c):
    d = dims(c)
    D, hd, F = d["D"], d["hd"], d["F"]
    shapes = {"model.embed_tokens.weight": (d["V"], D), "model.norm.weight": (D,)}
    for l in range(d["L"]):
        p = f"model.layers.{l}."
        shapes.update({
            p + "input_layernorm.weight": (D,),
            p + "self_attn.q_proj.weight": (d["H"] * hd, D),
            p + "self_attn.k_proj.weight": (d["KV"] * hd, D),
            p + "self_attn.v_proj.weight": (d["KV"] * hd, D),
            p + "self_attn.o_proj.weight": (D, d["H"] * hd),
            p + "post_attention_layernorm.weight": (D,),
            p + "mlp.gate_proj.weight": (F, D),
            p + "mlp.up_proj.weight": (F, D),
            p + "mlp.down_proj.weight": (D, F),
        })
    return shapes


def check_weights(c, W):
    shapes = expected_shapes(c)
    for name, shape in shapes.items():
        if name not in W:
            raise KeyError(f"missing tensor {name}")
        if tuple(W[name].shape) != shape:
            raise ValueError(f"tensor {name}: shape {tuple(W[name].shape)}, expected {shape}")
    extra = [n for n in W if n not in shapes and n != "lm_head.weight" and not n.endswith(IGNORED_SUFFIXES)]
    if extra:
        raise ValueError(f"unexpected tensors: {sorted(extra)[:5]}")


def lm_head(c, W):
    """lm_head.weight if present and tie_word_embeddings is false (default true), else embed_tokens."""
    if c.get("tie_word_embeddings", True) is False:
        if "lm_head.weight" not in W:
            raise KeyError("tie_word_embeddings is false but lm_head.weight is missing")
        return W["lm_head.weight"]
    return W["model.embed_tokens.weight"]


def load_model(model_dir):
    c = safetensors_np.load_config(model_dir)
    W = safetensors_np.load_weights(model_dir)
    check_weights(c, W)
    return c, W


# ----------------------------------------------------------------------------- forward

def q8_0_weights(c, W):
    """The linear weights and the head (key "lm_head") as Q8_0 holds them (q8_0.py), for
    forward_logits's `q8`."""
    Q = {name: q8_0.dequantized_weight(t) for name, t in W.items()
         if name.startswith("model.layers.") and name.endswith("_proj.weight")}
    Q["lm_head"] = q8_0.dequantized_weight(lm_head(c, W))
    return Q


def forward_logits(c, W, token_ids, long_rope=None, dtype="float64", q8=None):
    """Full causal forward over token_ids (positions 0..T-1) -> logits [T, V].
    dtype "bfloat16": the bf16 emulation (module docstring); W may be raw or already rounded.
    q8: the Q8_0 weights from q8_0_weights (--quantization q8_0), whose matmuls then quantize
    their inputs as q8_0.py says; None: the checkpoint's values."""
    rnd = precision.rounder(dtype)
    W = precision.weights_for(W, dtype)
    d = dims(c)
    D, L, H, KV, hd = d["D"], d["L"], d["H"], d["KV"], d["hd"]
    group = H // KV
    eps = c["rms_norm_eps"]
    if long_rope is None:
        long_rope = default_long_rope(c)
    ids = np.asarray(token_ids, dtype=np.int64)
    T = ids.size

    res_scale = precision.scalar(c["scale_depth"] / math.sqrt(L), dtype)
    cos, sin = rope_cos_sin(c, np.arange(T), long_rope)                # [T, hd/2]
    causal = np.tril(np.ones((T, T), dtype=bool))                        # key <= query

    def linear(x, name):                                                 # x @ W.T, rounded
        return rnd(x @ W[name].T if q8 is None else q8_0.matmul(x, q8[name]))

    h = rnd(W["model.embed_tokens.weight"][ids] * precision.scalar(c["scale_emb"], dtype))  # [T, D]
    for l in range(L):
        p = f"model.layers.{l}."
        # attention block
        x = rms_norm(h, W[p + "input_layernorm.weight"], eps, rnd)      # [T, D]
        q = linear(x, p + "self_attn.q_proj.weight").reshape(T, H, hd)  # [T, H, hd]
        k = linear(x, p + "self_attn.k_proj.weight").reshape(T, KV, hd)
        v = linear(x, p + "self_attn.v_proj.weight").reshape(T, KV, hd)
        q = rnd(apply_rope(q, cos, sin))                                 # rotated in float, one rounding
        k = rnd(apply_rope(k, cos, sin))
        o = np.empty((T, H, hd))
        for head in range(H):
            kvh = head // group
            scores = (q[:, head] @ k[:, kvh].T) / math.sqrt(hd)          # [T, T]
            scores = np.where(causal, scores, -np.inf)
            o[:, head] = precision.attention_values(scores, v[:, kvh], rnd)  # [T, hd]
        o = rnd(o)
        attn = linear(o.reshape(T, H * hd), p + "self_attn.o_proj.weight")  # [T, D]
        h = rnd(h + rnd(attn * res_scale))
        # MLP block
        x = rms_norm(h, W[p + "post_attention_layernorm.weight"], eps, rnd)
        gate = linear(x, p + "mlp.gate_proj.weight")                     # [T, F]
        up = linear(x, p + "mlp.up_proj.weight")                         # [T, F]
        mlp = linear(rnd(rnd(silu(gate)) * up), p + "mlp.down_proj.weight")  # [T, D]
        h = rnd(h + rnd(mlp * res_scale))

    h = rms_norm(h, W["model.norm.weight"], eps, rnd)
    h = rnd(h / precision.scalar(D / c["dim_model_base"], dtype))
    if q8 is not None:
        return rnd(q8_0.matmul(h, q8["lm_head"]))
    return rnd(h @ lm_head(c, W).T)                                      # [T, V]


def forward_logprobs(c, W, token_ids, long_rope=None, dtype="float64", q8=None):
    """Log-softmax (float64) of forward_logits."""
    return ref_cli.log_softmax(forward_logits(c, W, token_ids, long_rope, dtype, q8))


def main(argv=None):
    parser = ref_cli.make_parser("MiniCPM4 numpy reference forward (float64, or bf16 emulation)")
    parser.add_argument("--quantization", choices=("none", "q8_0"), default="none",
                        help="q8_0: the linear weights and matmul inputs as q8_0.py defines")
    args = parser.parse_args(argv)
    c, W = load_model(args.model)
    W = precision.weights_for(W, args.dtype, inplace=True)               # bf16: rounded once
    q8 = q8_0_weights(c, W) if args.quantization == "q8_0" else None
    mml = args.max_model_len if args.max_model_len is not None else c["max_position_embeddings"]
    long_rope = default_long_rope(c, mml)
    options = {"max_model_len": mml, "long_rope": long_rope, "dtype": args.dtype,
               "quantization": args.quantization}
    return ref_cli.run(args, lambda ids: forward_logprobs(c, W, ids, long_rope, args.dtype, q8),
                       dims(c)["V"], "minicpm_ref", options)


if __name__ == "__main__":
    main()
