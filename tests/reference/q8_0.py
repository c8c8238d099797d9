"""Q8_0 quantization (`--quantization q8_0`) as the references define it, from the format's
description (cpmserve's src/kernels/q8.h says the same in words; no code is shared):

- a weight row is cut into blocks of 32 inputs; a block's scale is d = amax / 127 (float32),
  stored as fp16 after division by a per-tensor power of two 2^e (e puts the tensor's largest d
  in (2^14, 2^15]); the values are q = round-half-even(w / d') clipped to [-127, 127], d' the
  stored scale times 2^e, computed in float32;
- each matmul's input rows are cut the same way and quantized the same way (d in float32, no
  fp16 step, q = round-half-even(x · (1/d)) in float32);
- the product is then exact: sum over blocks of d'_w · d_x · (q_w · q_x) — computed here in
  float64 as the dequantized x times the dequantized weight.

Must not depend on cpmserve code; numpy + stdlib only.
"""
import numpy as np

BLOCK = 32


def _blocks(a):
    """[rows, k] -> [rows, nb, 32] zero-padded, and k."""
    a = np.asarray(a)
    rows, k = a.shape
    nb = -(-k // BLOCK)
    padded = np.zeros((rows, nb * BLOCK), dtype=a.dtype)
    padded[:, :k] = a
    return padded.reshape(rows, nb, BLOCK), k


def dequantized_weight(w):
    """The weight [n, k] as Q8_0 holds it: d'·q per element, float64."""
    b, k = _blocks(np.asarray(w, dtype=np.float32))
    d = np.abs(b).max(axis=2) / np.float32(127)                      # [n, nb] float32
    max_d = float(d.max()) if d.size else 0.0
    e = np.frexp(max_d)[1] - 15 if max_d > 0 and np.isfinite(max_d) else 0
    stored = (d.astype(np.float64) * 2.0 ** -e).astype(np.float16)   # round-to-nearest-even
    d_used = (stored.astype(np.float64) * 2.0 ** e).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d_used[..., None] > 0, np.rint(b / d_used[..., None]), 0)
    q = np.clip(q, -127, 127)
    out = (q.astype(np.float64) * d_used[..., None].astype(np.float64)).reshape(b.shape[0], -1)
    return out[:, :k]


def dequantized_input(x):
    """Rows of a matmul's input [t, k] as the Q8_0 matmul quantizes them, float64."""
    b, k = _blocks(np.asarray(x, dtype=np.float32))
    d = np.abs(b).max(axis=2) / np.float32(127)                      # float32
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(b * inv[..., None]), -128, 127)             # float32 product, then rint
    out = (q.astype(np.float64) * d[..., None].astype(np.float64)).reshape(b.shape[0], -1)
    return out[:, :k]


def matmul(x, w_dequantized):
    """x [t, k] @ W.T for a weight from dequantized_weight."""
    return dequantized_input(x) @ w_dequantized.T
