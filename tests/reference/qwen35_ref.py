"""Reference forward pass of the Qwen3.5 hybrid text model (MiniCPM-V-4.6's language model) in
numpy float64.

The test oracle for cpmserve's Qwen3.5 path, written from ../shared/docs/specs/minicpmv46.md
(sections 1-3 and 5): the exact math, everything in float64, no cache (each call runs the whole
sequence from a zero state), no batching.

Checkpoints: MiniCPMV4_6ForConditionalGeneration / Qwen3_5ForConditionalGeneration (config
"text_config", weights under "model.language_model."; vision, merger and mtp.* tensors ignored)
or plain Qwen3_5ForCausalLM (flat config, weights under "model.").

  h = E[ids]                                     (no embedding scale)
  per layer: h += Mixer(RMSNorm1p(h)); h += MLP(RMSNorm1p(h))     RMSNorm1p: x/rms(x) * (1 + w)
     Mixer = gated full attention (layer_types[i] == "full_attention") or Gated DeltaNet
  logits = RMSNorm1p(h) @ head.T                  head = embed_tokens unless untied + lm_head exists

Gated DeltaNet has two independent implementations of the delta rule: token-by-token
(gated_delta_rule_recurrent, the definition) and chunked (gated_delta_rule_chunked, chunk 64);
self_test.py checks that they agree.

dtype="bfloat16" (CLI --dtype bfloat16) emulates the bf16 PyTorch model (HF Qwen3_5 with its
torch code paths and SDPA-style attention; see precision.py): all weights rounded to bf16 (A_log,
dt_bias and norm weights too), activations rounded with bf() where a bf16 tensor is produced,
float64 in between (minicpmv46.md §3, §7):
  norms: zero-centred RMSNorm in float, one rounding bf(x/rms * (1+w));
  every linear layer: bf(x Wᵀ); residual adds bf(h + bf(mixer)), bf(h + bf(mlp));
  MLP: bf(bf(bf(silu(g)) * u) Wdᵀ) with g, u rounded;
  attention: q, k = norm (rounded), RoPE with cos/sin cast to bf16 and every op of
    (x1*c - x2*s, x2*c + x1*s) rounded, as HF's apply_rotary_pos_emb does on bf16 tensors;
    scores, softmax in float, P rounded as precision.attention_values; o = bf(P v);
    o = bf(o * bf(sigmoid(gate)));
  GDN: in_proj outputs rounded; y = bf(silu(bf(conv))) (torch conv1d on bf16, then SiLU);
    beta = bf(sigmoid(b)) (HF: b.sigmoid() on a bf16 tensor); g, the q/k L2 norms and the whole
    recurrence (state S) in float; core output bf(o); gated norm bf(bf(bf(o/rms) * w) * silu(z));
  head: final norm (one rounding), logits = bf(h Eᵀ).

Must not depend on: cpmserve code, torch, transformers. numpy + stdlib only.
CLI: see ref_cli.py and README.md (extra flag: --gdn-mode recurrent|chunked).
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

ARCHS = ("MiniCPMV4_6ForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM")
IGNORED_PREFIXES = ("model.vision_tower.", "model.merger.", "model.visual.", "mtp.")


# ----------------------------------------------------------------------------- config

def text_config(c):
    archs = c.get("architectures") or []
    if archs and not any(a in ARCHS for a in archs):
        raise ValueError(f"config.json: architectures {archs} is not one of {ARCHS}")
    return c.get("text_config") or c


def dims(c):
    tc = text_config(c)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "intermediate_size", "vocab_size", "rms_norm_eps", "linear_num_key_heads",
                "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                "linear_conv_kernel_dim"):
        if key not in tc:
            raise KeyError(f"config.json: missing text config field {key}")
    rp = tc.get("rope_parameters") or {}
    if rp.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type {rp['rope_type']} not supported")
    L = tc["num_hidden_layers"]
    layer_types = tc.get("layer_types")
    if layer_types is None:
        every = tc.get("full_attention_interval", 4)
        layer_types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(L)]
    hd = tc.get("head_dim") or tc["hidden_size"] // tc["num_attention_heads"]
    prf = rp.get("partial_rotary_factor", tc.get("partial_rotary_factor", 0.25))
    return dict(D=tc["hidden_size"], L=L, H=tc["num_attention_heads"], KV=tc["num_key_value_heads"],
                hd=hd, rot=int(hd * prf), theta=float(rp.get("rope_theta", tc.get("rope_theta", 10000.0))),
                gate=tc.get("attn_output_gate", True), F=tc["intermediate_size"], V=tc["vocab_size"],
                eps=tc["rms_norm_eps"], Hk=tc["linear_num_key_heads"], Hv=tc["linear_num_value_heads"],
                dk=tc["linear_key_head_dim"], dv=tc["linear_value_head_dim"],
                K=tc["linear_conv_kernel_dim"], layer_types=list(layer_types))


def prefix_of(W):
    return "model.language_model." if any(n.startswith("model.language_model.") for n in W) else "model."


def expected_shapes(c, prefix):
    d = dims(c)
    D, F, hd = d["D"], d["F"], d["hd"]
    key_dim, value_dim = d["Hk"] * d["dk"], d["Hv"] * d["dv"]
    conv_dim = 2 * key_dim + value_dim
    shapes = {prefix + "embed_tokens.weight": (d["V"], D), prefix + "norm.weight": (D,)}
    for i, kind in enumerate(d["layer_types"]):
        p = f"{prefix}layers.{i}."
        shapes.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                       p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
                       p + "mlp.down_proj.weight": (D, F)})
        if kind == "full_attention":
            a = p + "self_attn."
            shapes.update({a + "q_proj.weight": (d["H"] * hd * (2 if d["gate"] else 1), D),
                           a + "k_proj.weight": (d["KV"] * hd, D), a + "v_proj.weight": (d["KV"] * hd, D),
                           a + "o_proj.weight": (D, d["H"] * hd), a + "q_norm.weight": (hd,),
                           a + "k_norm.weight": (hd,)})
        elif kind == "linear_attention":
            a = p + "linear_attn."
            shapes.update({a + "in_proj_qkv.weight": (conv_dim, D), a + "in_proj_z.weight": (value_dim, D),
                           a + "in_proj_b.weight": (d["Hv"], D), a + "in_proj_a.weight": (d["Hv"], D),
                           a + "conv1d.weight": (conv_dim, 1, d["K"]), a + "A_log": (d["Hv"],),
                           a + "dt_bias": (d["Hv"],), a + "norm.weight": (d["dv"],),
                           a + "out_proj.weight": (D, value_dim)})
        else:
            raise ValueError(f"layer {i}: unknown layer type {kind}")
    return shapes


def check_weights(c, W):
    shapes = expected_shapes(c, prefix_of(W))
    for name, shape in shapes.items():
        if name not in W:
            raise KeyError(f"missing tensor {name}")
        if tuple(W[name].shape) != shape:
            raise ValueError(f"tensor {name}: shape {tuple(W[name].shape)}, expected {shape}")
    extra = [n for n in W if n not in shapes and n != "lm_head.weight" and not n.startswith(IGNORED_PREFIXES)]
    if extra:
        raise ValueError(f"unexpected tensors: {sorted(extra)[:5]}")


def lm_head(c, W):
    """Tied (embed_tokens) unless tie_word_embeddings is false (top level, else text_config) and
    lm_head.weight exists."""
    tie = c.get("tie_word_embeddings", text_config(c).get("tie_word_embeddings", True))
    if tie is False and "lm_head.weight" in W:
        return W["lm_head.weight"]
    return W[prefix_of(W) + "embed_tokens.weight"]


def load_model(model_dir, text_only=True):
    """-> (config, weights as float64); text_only: the IGNORED_PREFIXES tensors left unread."""
    c = safetensors_np.load_config(model_dir)
    W = safetensors_np.load_weights(model_dir, skip_prefixes=IGNORED_PREFIXES if text_only else ())
    check_weights(c, W)
    return c, W


# ----------------------------------------------------------------------------- math

def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def silu(x):
    return x * sigmoid(x)


def softplus(x):
    return np.logaddexp(0.0, x)                          # log(1 + e^x)


def rms_norm(x, w, eps):
    """Plain-weight RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * w."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rms_norm_1p(x, w, eps, rnd=identity):
    """Zero-centred Qwen3.5 RMSNorm: x / sqrt(mean(x^2) + eps) * (1 + w), all in float, then one
    rounding (bf16 mode)."""
    return rnd(rms_norm(x, 1.0 + w, eps))


def gated_rms_norm(x, z, w, eps, rnd=identity):
    """GDN output norm (Qwen3_5RMSNormGated, plain weight): x / rms(x) * w * silu(z).
    Rounding points (bf16 mode): normalised x cast back, times w (a bf16 op), times silu(z) in
    float, cast back."""
    return rnd(rnd(rnd(x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)) * w) * silu(z))


def l2norm(x, eps=1e-6):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def partial_rope(x, positions, rot, theta, rnd=identity):
    """NEOX rotate_half over the first `rot` dims of each head; the rest pass through.
    x [T, heads, hd] -> same; pairs (i, i + rot/2), inv_freq[i] = theta^(-2i/rot).
    bf16 mode: cos/sin cast to bf16 and each product and sum rounded (HF-Q on bf16 tensors)."""
    half = rot // 2
    inv_freq = 1.0 / theta ** (2.0 * np.arange(half) / rot)                  # [half]
    angle = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq       # [T, half]
    c, s = rnd(np.cos(angle)[:, None, :]), rnd(np.sin(angle)[:, None, :])
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    return np.concatenate([rnd(rnd(x1 * c) - rnd(x2 * s)), rnd(rnd(x2 * c) + rnd(x1 * s)), rest], axis=-1)


# ----------------------------------------------------------------------------- delta rule

def gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=None):
    """Token-by-token gated delta rule. q, k [T, H, dk] (already normalised/scaled), v [T, H, dv],
    g, beta [T, H]. Returns (o [T, H, dv], final state S [H, dk, dv])."""
    T, H, dk = k.shape
    dv = v.shape[-1]
    S = np.zeros((H, dk, dv)) if initial_state is None else initial_state.copy()
    o = np.empty((T, H, dv))
    for t in range(T):
        S = S * np.exp(g[t])[:, None, None]                         # decay
        u = np.einsum("hkv,hk->hv", S, k[t])                        # S^T k: prediction for k_t
        delta = beta[t][:, None] * (v[t] - u)                       # [H, dv]
        S = S + k[t][:, :, None] * delta[:, None, :]                # S += k delta^T
        o[t] = np.einsum("hkv,hk->hv", S, q[t])                     # S^T q with the updated S
    return o, S


def gated_delta_rule_chunked(q, k, v, g, beta, initial_state=None, chunk_size=64):
    """Chunked (WY / UT-transform) form of the same rule; zero-pads T up to a multiple of C."""
    T, H, dk = k.shape
    dv = v.shape[-1]
    C = chunk_size
    pad = (-T) % C
    padT = lambda x: np.concatenate([x, np.zeros((pad,) + x.shape[1:])], axis=0)  # noqa: E731
    q, k, v, g, beta = (padT(x) for x in (q, k, v, g, beta))       # padding: g=0, beta=0, k=0
    S_all = np.zeros((H, dk, dv)) if initial_state is None else initial_state.copy()
    o = np.zeros((T + pad, H, dv))
    lower_incl = np.tril(np.ones((C, C), dtype=bool))
    for h in range(H):
        S = S_all[h]                                                # [dk, dv]
        for s0 in range(0, T + pad, C):
            Q, K, V = q[s0:s0 + C, h], k[s0:s0 + C, h], v[s0:s0 + C, h]   # [C, dk], [C, dk], [C, dv]
            G, B = g[s0:s0 + C, h], beta[s0:s0 + C, h]                   # [C]
            Gam = np.cumsum(G)                                           # cumulative log-decay
            Dm = np.exp(np.where(lower_incl, Gam[:, None] - Gam[None, :], -np.inf))  # [C, C]
            Kb, Vb = B[:, None] * K, B[:, None] * V
            A = np.tril((Kb @ K.T) * Dm, -1)                             # strictly lower
            I_A = np.eye(C) + A
            U = np.linalg.solve(I_A, Vb)                                 # (I + A)^-1 Vb    [C, dv]
            Wm = np.linalg.solve(I_A, np.exp(Gam)[:, None] * Kb)         # (I + A)^-1 e^Gam Kb [C, dk]
            P = (Q @ K.T) * Dm                                           # [C, C], diag included
            Qt = np.exp(Gam)[:, None] * Q
            Kt = np.exp(Gam[-1] - Gam)[:, None] * K
            Vp = U - Wm @ S                                              # [C, dv]
            o[s0:s0 + C, h] = Qt @ S + P @ Vp
            S = np.exp(Gam[-1]) * S + Kt.T @ Vp
        S_all[h] = S
    return o[:T], S_all


# ----------------------------------------------------------------------------- layers

def plain_linear(W):
    """x @ W[name].T: the checkpoint's weights."""
    return lambda x, name: x @ W[name].T


def full_attention(d, W, a, x, positions, rnd=identity, lin=None):
    """Gated full attention. x [T, D] -> [T, D]; `a` = tensor prefix ending in "self_attn.";
    lin(x, name): the projections (plain_linear(W) when None)."""
    lin = lin or plain_linear(W)
    T, H, KV, hd = x.shape[0], d["H"], d["KV"], d["hd"]
    qg = rnd(lin(x, a + "q_proj.weight"))                               # [T, H*hd*(2 if gate)]
    if d["gate"]:
        qg = qg.reshape(T, H, 2 * hd)                                    # per head [query | gate]
        q, gate = qg[..., :hd], qg[..., hd:].reshape(T, H * hd)
    else:
        q, gate = qg.reshape(T, H, hd), None
    k = rnd(lin(x, a + "k_proj.weight")).reshape(T, KV, hd)
    v = rnd(lin(x, a + "v_proj.weight")).reshape(T, KV, hd)
    q = rms_norm_1p(q, W[a + "q_norm.weight"], d["eps"], rnd)            # per-head norm before RoPE
    k = rms_norm_1p(k, W[a + "k_norm.weight"], d["eps"], rnd)
    q = partial_rope(q, positions, d["rot"], d["theta"], rnd)
    k = partial_rope(k, positions, d["rot"], d["theta"], rnd)
    causal = np.tril(np.ones((T, T), dtype=bool))
    o = np.empty((T, H, hd))
    for head in range(H):
        kvh = head // (H // KV)
        scores = np.where(causal, (q[:, head] @ k[:, kvh].T) / math.sqrt(hd), -np.inf)   # [T, T]
        o[:, head] = precision.attention_values(scores, v[:, kvh], rnd)  # [T, hd]
    o = rnd(o).reshape(T, H * hd)
    if gate is not None:
        o = rnd(o * rnd(sigmoid(gate)))
    return rnd(lin(o, a + "o_proj.weight"))


def gated_deltanet(d, W, a, x, mode, rnd=identity, lin=None):
    """Gated DeltaNet layer from a zero state. x [T, D] -> [T, D]; `a` ends in "linear_attn.";
    lin(x, name): the projections (plain_linear(W) when None)."""
    lin = lin or plain_linear(W)
    T, Hk, Hv, dk, dv, K = x.shape[0], d["Hk"], d["Hv"], d["dk"], d["dv"], d["K"]
    key_dim = Hk * dk
    m = rnd(lin(x, a + "in_proj_qkv.weight"))                           # [T, conv_dim]
    z = rnd(lin(x, a + "in_proj_z.weight")).reshape(T, Hv, dv)
    b = rnd(lin(x, a + "in_proj_b.weight"))                             # [T, Hv]
    alpha = rnd(lin(x, a + "in_proj_a.weight"))                         # [T, Hv]
    # causal depthwise conv1d (zero initial state) + SiLU: y[t] = sum_j w[:, j] * m[t - (K-1) + j]
    w = W[a + "conv1d.weight"][:, 0, :]                                  # [conv_dim, K]
    m_pad = np.concatenate([np.zeros((K - 1, m.shape[1])), m], axis=0)   # [T+K-1, conv_dim]
    y = rnd(silu(rnd(sum(w[:, j] * m_pad[j:j + T] for j in range(K)))))
    q = y[:, :key_dim].reshape(T, Hk, dk)
    k = y[:, key_dim:2 * key_dim].reshape(T, Hk, dk)
    v = y[:, 2 * key_dim:].reshape(T, Hv, dv)
    beta = rnd(sigmoid(b))
    g = -np.exp(W[a + "A_log"]) * softplus(alpha + W[a + "dt_bias"])    # [T, Hv], log-decay <= 0
    q = l2norm(q) * dk ** -0.5
    k = l2norm(k)
    q = np.repeat(q, Hv // Hk, axis=1)                                   # k head j serves v heads
    k = np.repeat(k, Hv // Hk, axis=1)                                   #   j*r .. j*r + r-1
    rule = gated_delta_rule_chunked if mode == "chunked" else gated_delta_rule_recurrent
    o, _ = rule(q, k, v, g, beta)                                        # [T, Hv, dv], float state
    o = gated_rms_norm(rnd(o), z, W[a + "norm.weight"], d["eps"], rnd)   # gated RMSNorm per head
    return rnd(lin(o.reshape(T, Hv * dv), a + "out_proj.weight"))


def embed_override(input_embeds, T, D):
    """input_embeds: {row: vector} or (rows, array [len(rows), D]) -> (row index array, [n, D] array).
    Rows must lie in [0, T) and be distinct."""
    if isinstance(input_embeds, dict):
        rows = sorted(input_embeds)
        vals = np.array([np.asarray(input_embeds[r], dtype=np.float64).reshape(-1) for r in rows]) if rows \
            else np.zeros((0, D))
    else:
        rows, vals = input_embeds
        vals = np.asarray(vals, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if vals.shape != (rows.size, D):
        raise ValueError(f"input_embeds: {rows.size} rows need values of shape ({rows.size}, {D}), got {vals.shape}")
    if rows.size and (rows.min() < 0 or rows.max() >= T or np.unique(rows).size != rows.size):
        raise ValueError(f"input_embeds: rows must be distinct and in [0, {T})")
    return rows, vals


def q8_0_weights(c, W):
    """The language model's linear weights and the head (key "lm_head") as Q8_0 holds them
    (q8_0.py), but the Gated DeltaNet's in_proj_a and in_proj_b, which --quantization q8_0
    leaves as they are (one row per value head: their bytes are nothing, their outputs drive
    the state's decay exponentially)."""
    pre = prefix_of(W)
    Q = {name: q8_0.dequantized_weight(t) for name, t in W.items()
         if name.startswith(pre + "layers.") and name.endswith(".weight") and t.ndim == 2
         and "proj" in name and not name.endswith(("in_proj_a.weight", "in_proj_b.weight"))}
    Q["lm_head"] = q8_0.dequantized_weight(lm_head(c, W))
    return Q


def q8_linear(W, Q):
    """x @ W.T through Q8_0 (q8_0.matmul) for the weights in Q, plainly for the rest."""
    return lambda x, name: q8_0.matmul(x, Q[name]) if name in Q else x @ W[name].T


def forward_logits(c, W, token_ids, gdn_mode="recurrent", dtype="float64", input_embeds=None,
                   q8=None):
    """Full causal forward over token_ids (positions 0..T-1) -> logits [T, V].
    dtype "bfloat16": the bf16 emulation (module docstring); W may be raw or already rounded.
    input_embeds (optional): {row: vector} or (rows, [n, D] array); these rows' input embeddings
    replace embed_tokens[token_ids[row]] (the multimodal scatter of minicpmv46.md §2; rounded to
    bf16 in bfloat16 mode). None leaves the forward exactly as without it.
    q8: the Q8_0 weights from q8_0_weights (--quantization q8_0), whose matmuls then quantize
    their inputs as q8_0.py says; None: the checkpoint's values."""
    rnd = precision.rounder(dtype)
    W = precision.weights_for(W, dtype)
    lin = plain_linear(W) if q8 is None else q8_linear(W, q8)
    d = dims(c)
    pre = prefix_of(W)
    ids = np.asarray(token_ids, dtype=np.int64)
    positions = np.arange(ids.size)
    h = W[pre + "embed_tokens.weight"][ids]                              # [T, D], a copy
    if input_embeds is not None:
        rows, vals = embed_override(input_embeds, ids.size, d["D"])
        h[rows] = rnd(vals)
    for i, kind in enumerate(d["layer_types"]):
        p = f"{pre}layers.{i}."
        x = rms_norm_1p(h, W[p + "input_layernorm.weight"], d["eps"], rnd)
        if kind == "full_attention":
            h = rnd(h + full_attention(d, W, p + "self_attn.", x, positions, rnd, lin))
        else:
            h = rnd(h + gated_deltanet(d, W, p + "linear_attn.", x, gdn_mode, rnd, lin))
        x = rms_norm_1p(h, W[p + "post_attention_layernorm.weight"], d["eps"], rnd)
        gate = rnd(lin(x, p + "mlp.gate_proj.weight"))
        up = rnd(lin(x, p + "mlp.up_proj.weight"))
        h = rnd(h + rnd(lin(rnd(rnd(silu(gate)) * up), p + "mlp.down_proj.weight")))
    h = rms_norm_1p(h, W[pre + "norm.weight"], d["eps"], rnd)
    if q8 is not None:
        return rnd(q8_0.matmul(h, q8["lm_head"]))
    return rnd(h @ lm_head(c, W).T)                                      # [T, V]


def forward_logprobs(c, W, token_ids, gdn_mode="recurrent", dtype="float64", input_embeds=None,
                     q8=None):
    """Log-softmax (float64) of forward_logits."""
    return ref_cli.log_softmax(forward_logits(c, W, token_ids, gdn_mode, dtype, input_embeds, q8))


def main(argv=None):
    parser = ref_cli.make_parser("Qwen3.5 hybrid (MiniCPM-V-4.6 LM) numpy reference forward "
                                 "(float64, or bf16 emulation)")
    parser.add_argument("--gdn-mode", choices=("recurrent", "chunked"), default="recurrent")
    parser.add_argument("--quantization", choices=("none", "q8_0"), default="none",
                        help="q8_0: the linear weights (but in_proj_a/b) and matmul inputs as "
                             "q8_0.py defines")
    args = parser.parse_args(argv)
    c, W = load_model(args.model)
    W = precision.weights_for(W, args.dtype, inplace=True)               # bf16: rounded once
    q8 = q8_0_weights(c, W) if args.quantization == "q8_0" else None
    options = {"max_model_len": args.max_model_len, "gdn_mode": args.gdn_mode, "dtype": args.dtype,
               "quantization": args.quantization}
    return ref_cli.run(args, lambda ids: forward_logprobs(c, W, ids, args.gdn_mode, args.dtype,
                                                          None, q8),
                       dims(c)["V"], "qwen35_ref", options)


if __name__ == "__main__":
    main()
