"""Precision modes of the references: float64 (the definition) and an emulation of a bfloat16
PyTorch model (`--dtype bfloat16`).

In bfloat16 mode the weights are rounded to bf16 once (round-to-nearest-even from the stored
values), and the forward passes call `rnd` exactly where a bf16 PyTorch model rounds an activation
to bf16 (the rounding points of ../shared/docs/specs/minicpm4.md §3 and minicpmv46.md §3). The
arithmetic between two rounding points stays float64, standing in for PyTorch's fp32 opmath and
fp32 GEMM accumulation. In float64 mode `rnd` is the identity and nothing is rounded, so the
forward is the float64 definition, unchanged.

Must not depend on cpmserve code; numpy + stdlib only.
"""
import numpy as np

DTYPES = ("float64", "bfloat16")


def bf16_round(x):
    """x (float64 values) -> the nearest bfloat16 values, as float64.

    x goes through float32 first (the value an fp32 op would hold), then its float32 bits are
    rounded to the top 16 with round-to-nearest, ties to even: add 0x7FFF + (bit 16), clear the
    low 16 bits. Signed zeros, infinities and subnormals behave as in PyTorch; a finite value at or
    beyond the midpoint between the largest bf16 (0x7F7F) and infinity becomes infinity; NaN stays
    NaN."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0:
        return bf16_round(a.reshape(1))[0]
    with np.errstate(over="ignore", invalid="ignore"):   # |x| > float32 max -> inf, as a cast does
        u = a.astype(np.float32).view(np.uint32)
    r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    out = r.view(np.float32).astype(np.float64)
    nan = np.isnan(a)
    if nan.any():                                       # NaN payloads may carry into inf or wrap
        out[nan] = a[nan]
    return out


def identity(x):
    return x


def check_dtype(dtype):
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    return dtype


def rounder(dtype):
    """The `rnd` function the forwards thread through: bf16_round in bfloat16 mode, else identity."""
    return bf16_round if check_dtype(dtype) == "bfloat16" else identity


# The blocks of keys over which the engine's attention kernels run their online softmax: spans of
# SPAN_KEYS keys inside partitions of PARTITION_KEYS keys (each from a fresh state, merged at
# the end). They decide where P is rounded in bfloat16 mode.
SPAN_KEYS = 128
PARTITION_KEYS = 1024


def attention_values(scores, v, rnd):
    """softmax(scores) @ v for one head: scores [T, K] (-inf where masked), v [K, hd].

    As FlashAttention-2 and PyTorch's CPU SDPA compute it in a bf16 model: an online softmax over
    blocks of keys (the engine's, above) whose exps e^(s - m), m the running max, are summed
    unrounded and rounded to bf16 (`rnd`) as the P of their products with V. In float64 mode
    (`rnd` the identity) this is softmax(scores) @ v."""
    T, K = scores.shape
    parts = []                                            # each partition's (m, l, o)
    for p0 in range(0, K, PARTITION_KEYS):
        m = np.full(T, -np.inf)
        l = np.zeros(T)
        o = np.zeros((T, v.shape[1]))
        for s0 in range(p0, min(K, p0 + PARTITION_KEYS), SPAN_KEYS):
            s = scores[:, s0:min(K, s0 + SPAN_KEYS, p0 + PARTITION_KEYS)]
            m_new = np.maximum(m, s.max(axis=1))
            with np.errstate(invalid="ignore"):           # -inf - -inf: rows with no key yet
                alpha = np.where(m > -np.inf, np.exp(m - m_new), 0.0)
                e = np.where((m_new > -np.inf)[:, None], np.exp(s - m_new[:, None]), 0.0)
            l = l * alpha + e.sum(axis=1)
            o = o * alpha[:, None] + rnd(e) @ v[s0:s0 + s.shape[1]]
            m = m_new
        parts.append((m, l, o))
    mx = np.max([m for m, _, _ in parts], axis=0)
    total_l = np.zeros(T)
    total_o = np.zeros((T, v.shape[1]))
    for m, l, o in parts:
        with np.errstate(invalid="ignore"):
            w = np.where(m > -np.inf, np.exp(m - mx), 0.0)
        total_l += l * w
        total_o += o * w[:, None]
    return total_o / total_l[:, None]


def scalar(v, dtype):
    """A Python-float constant as a bf16 PyTorch op applies it: fp32 (opmath) in bfloat16 mode.
    E.g. MiniCPM's residual scale 1.4/sqrt(24) becomes fp32 0x3E9250F2."""
    return float(np.float32(v)) if check_dtype(dtype) == "bfloat16" else float(v)


class Bf16Weights(dict):
    """A weight dict whose tensors already hold bf16 values (made by weights_for)."""


def weights_for(W, dtype, inplace=False):
    """The weights a forward in `dtype` uses: W itself in float64 mode; in bfloat16 mode every
    tensor rounded to bf16 (a Bf16Weights, which later calls take as is, so a CLI rounds a real
    checkpoint once rather than once per forward). inplace=True replaces W's tensors one by one
    (the CLIs: no second float64 copy of a real checkpoint); otherwise W is left untouched."""
    if check_dtype(dtype) == "float64" or isinstance(W, Bf16Weights):
        return W
    if not inplace:
        return Bf16Weights((name, bf16_round(t)) for name, t in W.items())
    for name in list(W):
        W[name] = bf16_round(W[name])
    return Bf16Weights(W)
