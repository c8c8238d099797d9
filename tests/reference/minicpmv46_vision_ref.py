"""Reference vision path of MiniCPM-V-4.6 (image slicing, placeholder layout, SigLIP tower with the
ViT window-attention merger, final MLP merger) in numpy float64, plus the full multimodal forward
(vision features scattered into the Qwen3.5 text model of qwen35_ref.py).

The test oracle for cpmserve's MiniCPM-V-4.6 vision path, written from
../shared/docs/specs/minicpmv46.md §2, §4, §6.1, §6.2, §7 and the released checkpoint's
config.json / preprocessor_config.json. Everything is float64 except the two places where the
definition itself is integer/uint8 or float32: the resampling (PIL BICUBIC on the RGB uint8 image,
as HF's "pil" image-processor backend) and the float32 position-bucket comparison of HF's
SigLIP-NaViT embeddings (§4.1), which is asserted to equal the integer rule floor(side*i/n).

Preprocessing (§6.1), per image of H0 x W0 pixels, S = scale_resolution, P = patch_size:
  ensure_divide(L, d) = max(round(L/d)*d, d)               Python round: half to even
  best_resize((h, w), up): if h*w > S^2 or up: a = w/h; h = int(S/sqrt(a)); w = int(h*a)
                           -> (ensure_divide(h, 4P), ensure_divide(w, 4P))
  grid: m = min(ceil(W0*H0/S^2), M); none if m <= 1; else over n in (m-1, m, m+1) (skip n == 1,
        n > M), a = 1..n with n % a == 0, b = n/a: err = |ln(W0/H0) - ln(a/b)|, first strict
        minimum; cols = a, rows = b
  refine: Rw = ensure_divide(W0, cols), Rh = ensure_divide(H0, rows);
          (sh, sw) = best_resize((Rh/rows, Rw/cols), up=True) -> (sh*rows, sw*cols)
  thumbnail = resize(image, best_resize((H0, W0), up = grid is none)); slices = the refined image
  cut into rows x cols tiles of (sh, sw), row-major. Pixels: (u8/255 - mean)/std, [H, W, 3] RGB.

Vision tower per slice (§4.1-4.5), h = H/P, w = W/P, tokens row-major (n = r*w + c):
  x = conv_P(img) + pos[bucket(r)*side + bucket(c)]        side = image_size // patch_size
  encoder layers 0..insert_layer_id on h x w (pre-LN SigLIP: x += out(MHA(LN1 x)), bidirectional
    within the slice; x += fc2(gelu_tanh(fc1(LN2 x))))
  vit_merger: x += scatter(MHA within each 2x2 window (LN1 x)); per window (row-major over the
    (h/2)(w/2) grid) concat TL,TR,BL,BR -> linear_2(gelu_tanh(linear_1(pre_norm(.)))) + mean of
    the 4 tokens
  encoder layers insert_layer_id+1.. on (h/2) x (w/2); post_layernorm
  merger (model.merger.mlp.0): per 2x2 block concat TL,TR,BL,BR -> linear_2(gelu_erf(linear_1(
    pre_norm(.))))  (no residual)  -> [(h/4)(w/4), text_hidden]
An image's features are its slices' features concatenated, thumbnail first, then the slices
row-major; the images of a prompt in order fill the positions whose id is image_token_id (§2).

Must not depend on: cpmserve code, torch, transformers. numpy + Pillow (resampling only) + stdlib.

CLI (see README.md):
  minicpmv46_vision_ref.py --model DIR --image PATH [--image PATH ...] --prompt-ids IDS [...]
      [--images-per-prompt K1,K2,...] [--generate N] [--gdn-mode recurrent|chunked]
      [--features-out FEATS.json] [--skip-layout-check] --out OUT.json
  minicpmv46_vision_ref.py --model DIR --image PATH [...] [--images-per-prompt ...] --layout
"""
import argparse
import json
import math
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen35_ref as Q  # noqa: E402
import ref_cli  # noqa: E402
import safetensors_np  # noqa: E402

BICUBIC = getattr(Image, "Resampling", Image).BICUBIC

# §1 / CKPT preprocessor_config.json; HF-IP class defaults are the same values
PREPROCESSOR_DEFAULTS = {"max_slice_nums": 9, "scale_resolution": 448, "patch_size": 14, "use_image_id": True,
                         "slice_mode": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                         "downsample_mode": "16x"}

# §6.2 literal special-token strings
IMAGE_ID_START, IMAGE_ID_END = "<image_id>", "</image_id>"
IMAGE_START, IMAGE_END = "<image>", "</image>"
SLICE_START, SLICE_END = "<slice>", "</slice>"
IMAGE_PAD = "<|image_pad|>"
SPECIAL_TOKENS = (IMAGE_ID_START, IMAGE_ID_END, IMAGE_START, IMAGE_END, SLICE_START, SLICE_END, IMAGE_PAD)

VISION = "model.vision_tower."
MERGER = "model.merger.mlp.0."
MERGER_EPS = 1e-6                                      # HF-M MiniCPMV4_6DownsampleMLP: fixed 1e-6


# ----------------------------------------------------------------------------- preprocessing

def preprocessor_config(model_dir):
    """preprocessor_config.json of model_dir over the spec defaults (a missing file = defaults)."""
    cfg = dict(PREPROCESSOR_DEFAULTS)
    path = os.path.join(model_dir, "preprocessor_config.json") if model_dir else None
    if path and os.path.exists(path):
        with open(path) as f:
            cfg.update(json.load(f))
    if cfg.get("downsample_mode", "16x") not in ("16x", "4x"):
        raise ValueError(f"downsample_mode {cfg['downsample_mode']!r}: 16x or 4x")
    return cfg


def patches_per_token(pp):
    """16x: the ViT merger and the merger (16 patches a token); 4x: the merger alone (HF-IP)."""
    return 16 if pp.get("downsample_mode", "16x") == "16x" else 4


def ensure_divide(length, divisor):
    """max(round(length/divisor)*divisor, divisor); Python round = half to even (round(2.5) = 2)."""
    return max(round(length / divisor) * divisor, divisor)


def best_resize(h, w, scale_resolution, patch_size, upscale):
    """(h, w) may be floats (refine). Returns (H, W), multiples of 4*patch_size."""
    if h * w > scale_resolution * scale_resolution or upscale:
        aspect = w / h
        h = int(scale_resolution / math.sqrt(aspect))
        w = int(h * aspect)
    return ensure_divide(h, 4 * patch_size), ensure_divide(w, 4 * patch_size)


def slice_grid(H0, W0, scale_resolution, max_slice_nums):
    """(rows, cols) or None. Candidates n in (m-1, m, m+1), factorizations a*b = n with a = 1..n;
    err = |ln(W0/H0) - ln(a/b)|, first strict minimum; cols = a, rows = b."""
    log_ratio = math.log(W0 / H0)
    m = min(math.ceil(W0 * H0 / (scale_resolution * scale_resolution)), max_slice_nums)
    if m <= 1:
        return None
    best, best_err = None, math.inf
    for n in (m - 1, m, m + 1):
        if n == 1 or n > max_slice_nums:
            continue
        for a in range(1, n + 1):
            if n % a == 0:
                b = n // a
                err = abs(log_ratio - math.log(a / b))
                if err < best_err:
                    best, best_err = (b, a), err
    return best


def refine_size(H0, W0, rows, cols, scale_resolution, patch_size):
    Rw, Rh = ensure_divide(W0, cols), ensure_divide(H0, rows)
    sh, sw = best_resize(Rh / rows, Rw / cols, scale_resolution, patch_size, upscale=True)
    return sh * rows, sw * cols


def tokens_per_slice(H, W, patch_size, per_token=16):
    """(H/P)(W/P)/16 in 16x mode, /4 in 4x mode."""
    return (H // patch_size) * (W // patch_size) // per_token


def slice_plan(H0, W0, pp):
    """The §6.1 plan of one H0 x W0 image: {"grid": (rows, cols) | None, "thumb": (H, W),
    "refine": (H, W) | None, "slice": (H, W) | None, "thumb_tokens", "slice_tokens", "tokens"}."""
    S, P, M = pp["scale_resolution"], pp["patch_size"], pp["max_slice_nums"]
    grid = slice_grid(H0, W0, S, M) if pp.get("slice_mode", True) else None
    thumb = best_resize(H0, W0, S, P, upscale=grid is None)
    plan = {"grid": grid, "thumb": thumb, "refine": None, "slice": None,
            "thumb_tokens": tokens_per_slice(*thumb, P, patches_per_token(pp)), "slice_tokens": 0}
    if grid is not None:
        rows, cols = grid
        RH, RW = refine_size(H0, W0, rows, cols, S, P)
        plan.update(refine=(RH, RW), slice=(RH // rows, RW // cols),
                    slice_tokens=tokens_per_slice(RH // rows, RW // cols, P, patches_per_token(pp)))
    plan["tokens"] = plan["thumb_tokens"] + (plan["slice_tokens"] * grid[0] * grid[1] if grid else 0)
    return plan


def load_rgb(image):
    """A path or a PIL image -> PIL RGB image, as vLLM's image loader makes it (the served
    behaviour): a mode-"RGBA" image is pasted over white with its alpha as the mask; every other
    mode is convert("RGB") (alpha dropped)."""
    img = Image.open(image) if isinstance(image, (str, os.PathLike)) else image
    if img.mode == "RGBA":
        rgb = Image.new("RGB", img.size, (255, 255, 255))
        rgb.paste(img, mask=img.split()[3])
        return rgb
    return img.convert("RGB")


def normalize(u8, pp):
    x = u8.astype(np.float64) / 255.0
    return (x - np.asarray(pp["image_mean"], dtype=np.float64)) / np.asarray(pp["image_std"], dtype=np.float64)


def preprocess(image, pp):
    """-> (plan, [float64 [H, W, 3] slices: thumbnail first, then the tiles row-major])."""
    img = load_rgb(image)
    W0, H0 = img.size
    plan = slice_plan(H0, W0, pp)
    th, tw = plan["thumb"]
    out = [normalize(np.asarray(img.resize((tw, th), BICUBIC)), pp)]
    if plan["grid"] is not None:
        rows, cols = plan["grid"]
        RH, RW = plan["refine"]
        sh, sw = plan["slice"]
        refined = np.asarray(img.resize((RW, RH), BICUBIC))
        for r in range(rows):
            for c in range(cols):
                out.append(normalize(refined[r * sh:(r + 1) * sh, c * sw:(c + 1) * sw], pp))
    return plan, out


def placeholder_text(index, n_thumb, rows, cols, n_slice, use_image_id):
    """§6.2: [<image_id>k</image_id>]<image>pad*n_thumb</image> then rows lines (joined by "\\n", no
    leading/trailing newline) of cols times <slice>pad*n_slice</slice>. rows/cols 0 or None: no slices."""
    text = (f"{IMAGE_ID_START}{index}{IMAGE_ID_END}" if use_image_id else "") + IMAGE_START + IMAGE_PAD * n_thumb + IMAGE_END
    if rows and cols:
        text += "\n".join([(SLICE_START + IMAGE_PAD * n_slice + SLICE_END) * cols] * rows)
    return text


def plan_text(plan, index, pp):
    rows, cols = plan["grid"] if plan["grid"] else (0, 0)
    return placeholder_text(index, plan["thumb_tokens"], rows, cols, plan["slice_tokens"], pp.get("use_image_id", True))


def layout(plan, index, pp):
    """The --layout record of one image."""
    return {"grid": list(plan["grid"]) if plan["grid"] else None, "thumb": list(plan["thumb"]),
            "slice": list(plan["slice"]) if plan["slice"] else None, "tokens": plan["tokens"],
            "text": plan_text(plan, index, pp)}


# ----------------------------------------------------------------------------- placeholder token ids

def _byte_unicode():
    """GPT-2 byte-level BPE alphabet: byte -> printable character."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def load_vocab(model_dir):
    """tokenizer.json -> {token string: id} (BPE vocab + added tokens), or None without the file."""
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        t = json.load(f)
    vocab = dict(t.get("model", {}).get("vocab", {}))
    vocab.update({a["content"]: a["id"] for a in t.get("added_tokens", [])})
    return vocab


def placeholder_token_ids(text, vocab):
    """Token ids of a placeholder text: the special tokens are single tokens; every other character
    (the image index digits and "\\n") is looked up byte by byte, which is how a Qwen2 byte-level
    BPE tokenizes single digits and a lone newline. Not a general tokenizer."""
    b2u = _byte_unicode()
    ids, i = [], 0
    while i < len(text):
        for s in SPECIAL_TOKENS:
            if text.startswith(s, i):
                ids.append(vocab[s])
                i += len(s)
                break
        else:
            for byte in text[i].encode("utf-8"):
                ids.append(vocab[b2u[byte]])
            i += 1
    return ids


# ----------------------------------------------------------------------------- config and weights

def vision_dims(c):
    vc = c["vision_config"]
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "patch_size",
                "image_size"):
        if key not in vc:
            raise KeyError(f"config.json: missing vision_config field {key}")
    if c.get("downsample_mode", "16x") not in ("16x", "4x"):
        raise ValueError(f"downsample_mode {c['downsample_mode']!r}: 16x or 4x")
    if list(c.get("merge_kernel_size", [2, 2])) != [2, 2] or c.get("merger_times", 1) != 1:
        raise NotImplementedError("merge_kernel_size / merger_times: only the defaults (2, 2) / 1 are implemented")
    if list(vc.get("window_kernel_size", [2, 2])) != [2, 2]:
        raise NotImplementedError("window_kernel_size: only (2, 2) is implemented")
    if vc.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise NotImplementedError(f"vision hidden_act {vc['hidden_act']}")
    D, heads, L = vc["hidden_size"], vc["num_attention_heads"], vc["num_hidden_layers"]
    insert = c.get("insert_layer_id", 6)
    if not 0 <= insert < L:
        raise ValueError(f"insert_layer_id {insert} outside [0, {L}): the vit_merger would never run")
    if D % heads:
        raise ValueError(f"vision hidden_size {D} not divisible by {heads} heads")
    tc = c.get("text_config") or {}
    return dict(D=D, F=vc["intermediate_size"], L=L, heads=heads, P=vc["patch_size"],
                side=vc["image_size"] // vc["patch_size"], eps=vc.get("layer_norm_eps", 1e-6),
                channels=vc.get("num_channels", 3), insert=insert,
                text_D=tc.get("hidden_size", c.get("hidden_size")),
                image_token_id=c.get("image_token_id", 248056))


def vision_shapes(c):
    """§4.6 tensor names and shapes."""
    d = vision_dims(c)
    D, F, P, D4 = d["D"], d["F"], d["P"], 4 * d["D"]
    s = {VISION + "embeddings.patch_embedding.weight": (D, d["channels"], P, P),
         VISION + "embeddings.patch_embedding.bias": (D,),
         VISION + "embeddings.position_embedding.weight": (d["side"] ** 2, D),
         VISION + "post_layernorm.weight": (D,), VISION + "post_layernorm.bias": (D,)}

    def attn(p):
        for t in ("q_proj", "k_proj", "v_proj", "out_proj"):
            s[p + t + ".weight"], s[p + t + ".bias"] = (D, D), (D,)

    for i in range(d["L"]):
        p = f"{VISION}encoder.layers.{i}."
        for n in ("layer_norm1", "layer_norm2"):
            s[p + n + ".weight"], s[p + n + ".bias"] = (D,), (D,)
        attn(p + "self_attn.")
        s.update({p + "mlp.fc1.weight": (F, D), p + "mlp.fc1.bias": (F,), p + "mlp.fc2.weight": (D, F),
                  p + "mlp.fc2.bias": (D,)})
    p = VISION + "vit_merger."
    attn(p + "self_attn.")
    s.update({p + "layer_norm1.weight": (D,), p + "layer_norm1.bias": (D,), p + "pre_norm.weight": (D4,),
              p + "pre_norm.bias": (D4,), p + "linear_1.weight": (4 * F, D4), p + "linear_1.bias": (4 * F,),
              p + "linear_2.weight": (D, 4 * F), p + "linear_2.bias": (D,)})
    s.update({MERGER + "pre_norm.weight": (D4,), MERGER + "pre_norm.bias": (D4,),
              MERGER + "linear_1.weight": (D4, D4), MERGER + "linear_1.bias": (D4,),
              MERGER + "linear_2.weight": (d["text_D"], D4), MERGER + "linear_2.bias": (d["text_D"],)})
    return s


def check_vision_weights(c, W):
    for name, shape in vision_shapes(c).items():
        if name not in W:
            raise KeyError(f"missing tensor {name}")
        if tuple(W[name].shape) != shape:
            raise ValueError(f"tensor {name}: shape {tuple(W[name].shape)}, expected {shape}")


def load_model(model_dir):
    """-> (config, all weights as float64, preprocessor config); vision and text weights checked."""
    c, W = Q.load_model(model_dir, text_only=False)
    check_vision_weights(c, W)
    return c, W, preprocessor_config(model_dir)


# ----------------------------------------------------------------------------- math

def layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)       # biased variance
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu_erf(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def linear(x, W, p):
    return x @ W[p + "weight"].T + W[p + "bias"]


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention(x, W, p, heads):
    """Bidirectional MHA with biases, each batch entry its own sequence. x [B, T, D] -> [B, T, D];
    `p` ends in "self_attn."."""
    B, T, D = x.shape
    hd = D // heads
    split = lambda t: linear(x, W, p + t + ".").reshape(B, T, heads, hd).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split("q_proj"), split("k_proj"), split("v_proj")            # [B, heads, T, hd]
    probs = softmax(q @ k.transpose(0, 1, 3, 2) * hd ** -0.5)              # [B, heads, T, T]
    o = (probs @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    return linear(o, W, p + "out_proj.")


def position_buckets(n, side):
    """Bucket of each of n patch rows (or columns) in the side x side position table, HF's float32
    form (HF-M MiniCPMV4_6VisionEmbeddings): boundaries = float32 arange(1/side, 1, 1/side),
    fractions = float32 arange(0, 1 - 1e-6, 1/n), torch.bucketize(right=True) = the number of
    boundaries <= the fraction. torch's arange has ceil((end - start)/step) elements, each
    start + i*step computed in double then cast to float32. Asserted to equal both the fractions
    float32(i)/float32(n) and the integer rule floor(side*i/n) (§4.1)."""
    step = 1.0 / side
    boundaries = (step + np.arange(math.ceil((1.0 - step) / step)) * step).astype(np.float32)
    fstep = 1.0 / n
    frac = (np.arange(math.ceil((1.0 - 1e-6) / fstep)) * fstep).astype(np.float32)
    buckets = np.searchsorted(boundaries, frac, side="right")
    frac_div = np.arange(n, dtype=np.float32) / np.float32(n)
    exact = (side * np.arange(n)) // n
    assert len(frac) == n and np.array_equal(buckets, exact) and \
        np.array_equal(np.searchsorted(boundaries, frac_div, side="right"), exact), \
        f"position buckets for n={n}, side={side}: float32 form {buckets.tolist()} != floor(side*i/n) {exact.tolist()}"
    return buckets


def position_ids(h, w, side):
    return (position_buckets(h, side)[:, None] * side + position_buckets(w, side)[None, :]).reshape(-1)


def patch_embed(img, W, P):
    """img [H, W, C] -> [(H/P)(W/P), D], conv kernel = stride = P, tokens row-major."""
    H, Wd, C = img.shape
    h, w = H // P, Wd // P
    patches = img[:h * P, :w * P].reshape(h, P, w, P, C).transpose(0, 2, 4, 1, 3).reshape(h * w, C * P * P)
    k = W[VISION + "embeddings.patch_embedding.weight"]                     # [D, C, P, P]
    return patches @ k.reshape(k.shape[0], -1).T + W[VISION + "embeddings.patch_embedding.bias"]


def group_2x2(x, h, w):
    """[h*w, D] row-major -> [(h/2)(w/2), 4, D]: windows row-major, tokens TL, TR, BL, BR."""
    D = x.shape[-1]
    return x.reshape(h // 2, 2, w // 2, 2, D).transpose(0, 2, 1, 3, 4).reshape((h // 2) * (w // 2), 4, D)


def ungroup_2x2(x, h, w):
    """Inverse of group_2x2."""
    D = x.shape[-1]
    return x.reshape(h // 2, w // 2, 2, 2, D).transpose(0, 2, 1, 3, 4).reshape(h * w, D)


def encoder_layer(d, W, i, x):
    """Pre-LN SigLIP block on one slice. x [T, D]."""
    p = f"{VISION}encoder.layers.{i}."
    a = layer_norm(x, W[p + "layer_norm1.weight"], W[p + "layer_norm1.bias"], d["eps"])
    x = x + attention(a[None], W, p + "self_attn.", d["heads"])[0]
    m = layer_norm(x, W[p + "layer_norm2.weight"], W[p + "layer_norm2.bias"], d["eps"])
    return x + linear(gelu_tanh(linear(m, W, p + "mlp.fc1.")), W, p + "mlp.fc2.")


def window_attention(d, W, x, h, w):
    """vit_merger step 1 without the residual: MHA(LN1 x) within each 2x2 window, back in raster order."""
    p = VISION + "vit_merger."
    a = layer_norm(x, W[p + "layer_norm1.weight"], W[p + "layer_norm1.bias"], d["eps"])
    return ungroup_2x2(attention(group_2x2(a, h, w), W, p + "self_attn.", d["heads"]), h, w)


def vit_merger(d, W, x, h, w):
    """[h*w, D] -> [(h/2)(w/2), D]."""
    if h % 2 or w % 2:
        raise ValueError(f"vit_merger: patch grid {h}x{w} is not even")
    p = VISION + "vit_merger."
    x = x + window_attention(d, W, x, h, w)
    win = group_2x2(x, h, w)                                                # [N, 4, D]
    cat = win.reshape(win.shape[0], -1)                                     # TL | TR | BL | BR
    y = layer_norm(cat, W[p + "pre_norm.weight"], W[p + "pre_norm.bias"], d["eps"])
    y = linear(gelu_tanh(linear(y, W, p + "linear_1.")), W, p + "linear_2.")
    return y + win.mean(axis=1)


def merger(d, W, x, h, w):
    """Final merger: [h*w, D] -> [(h/2)(w/2), text_D]; exact erf GELU, no residual."""
    if h % 2 or w % 2:
        raise ValueError(f"merger: grid {h}x{w} is not even")
    cat = group_2x2(x, h, w).reshape((h // 2) * (w // 2), 4 * x.shape[-1])
    y = layer_norm(cat, W[MERGER + "pre_norm.weight"], W[MERGER + "pre_norm.bias"], MERGER_EPS)
    return linear(gelu_erf(linear(y, W, MERGER + "linear_1.")), W, MERGER + "linear_2.")


def vision_forward(c, W, img, per_token=16):
    """One slice, float64 [H, W, 3] normalized pixels (H, W multiples of 4*patch) ->
    [(h/4)(w/4), text_hidden] LLM embeddings, block row-major; per_token 4 (4x mode): no ViT
    merger, every layer on the full grid, [(h/2)(w/2), text_hidden] (§4.3)."""
    d = vision_dims(c)
    P = d["P"]
    H, Wd = img.shape[:2]
    if H % (4 * P) or Wd % (4 * P):
        raise ValueError(f"slice {H}x{Wd} is not a multiple of 4*patch_size = {4 * P}")
    h, w = H // P, Wd // P
    x = patch_embed(img, W, P) + W[VISION + "embeddings.position_embedding.weight"][position_ids(h, w, d["side"])]
    for i in range(d["L"]):
        x = encoder_layer(d, W, i, x)
        if i == d["insert"] and per_token == 16:
            x = vit_merger(d, W, x, h, w)
            h, w = h // 2, w // 2
    x = layer_norm(x, W[VISION + "post_layernorm.weight"], W[VISION + "post_layernorm.bias"], d["eps"])
    return merger(d, W, x, h, w)


def image_features_from(c, W, pp, image):
    """-> (plan, [N, text_hidden]) for one image: thumbnail rows, then each slice's rows, row-major."""
    plan, slices = preprocess(image, pp)
    feats = np.concatenate([vision_forward(c, W, s, patches_per_token(pp)) for s in slices], axis=0)
    assert feats.shape[0] == plan["tokens"], (feats.shape, plan["tokens"])
    return plan, feats


def image_features(model_dir, path):
    """All slices of one image (thumbnail first, then slices row-major), concatenated: [N, text_hidden]."""
    c = safetensors_np.load_config(model_dir)
    W = safetensors_np.load_weights(model_dir)
    check_vision_weights(c, W)
    return image_features_from(c, W, preprocessor_config(model_dir), path)[1]


# ----------------------------------------------------------------------------- prompts

def image_rows(c, prompt_ids, n_features):
    """Positions of image_token_id in the prompt; their number must equal the feature rows (§7)."""
    tok = vision_dims(c)["image_token_id"]
    rows = [i for i, t in enumerate(prompt_ids) if t == tok]
    if len(rows) != n_features:
        raise ValueError(f"prompt has {len(rows)} image tokens (id {tok}) but the images give {n_features} "
                         f"feature rows")
    return rows


def check_prompt_layout(prompt_ids, plans, pp, vocab):
    """The prompt's image special tokens and pads, in order, are exactly the §6.2 layouts of its
    images (index k = position within the prompt). The index digits and newlines are not checked."""
    special = {vocab[s] for s in SPECIAL_TOKENS if s in vocab}
    if len(special) != len(SPECIAL_TOKENS):
        return "skipped (tokenizer.json lacks some image special tokens)"
    want = [t for k, plan in enumerate(plans) for t in placeholder_token_ids(plan_text(plan, k, pp), vocab)
            if t in special]
    got = [t for t in prompt_ids if t in special]
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        raise ValueError(f"prompt image layout differs from §6.2 at special token {first} of {len(want)} "
                         f"(got {got[first:first + 8]}, expected {want[first:first + 8]}); "
                         f"--skip-layout-check to run anyway")
    return "ok"


def split_images(images, per_prompt, n_prompts):
    if per_prompt is None:
        per_prompt = [len(images)] + [0] * (n_prompts - 1)
    if len(per_prompt) != n_prompts:
        raise SystemExit(f"--images-per-prompt has {len(per_prompt)} entries for {n_prompts} prompts")
    if sum(per_prompt) != len(images) or any(k < 0 for k in per_prompt):
        raise SystemExit(f"--images-per-prompt {per_prompt} does not add up to the {len(images)} images")
    out, i = [], 0
    for k in per_prompt:
        out.append(images[i:i + k])
        i += k
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description="MiniCPM-V-4.6 vision + Qwen3.5 numpy float64 reference forward")
    p.add_argument("--model", required=True, help="Hugging Face model directory")
    p.add_argument("--image", action="append", default=[], help="image path; repeat, in prompt order")
    p.add_argument("--images-per-prompt", type=ref_cli.parse_ids, default=None,
                   help="K1,K2,...: images of each prompt, consumed in order (default: all to the first prompt)")
    p.add_argument("--prompt-ids", action="append", default=[], type=ref_cli.parse_ids,
                   help="comma-separated token ids with the placeholder layout already expanded; repeat")
    p.add_argument("--layout", action="store_true",
                   help="print each image's slicing and placeholder layout as one JSON line, then exit")
    p.add_argument("--max-model-len", type=int, default=None, help="recorded only")
    p.add_argument("--generate", type=int, default=0, help="greedy tokens to generate per sequence")
    p.add_argument("--gdn-mode", choices=("recurrent", "chunked"), default="recurrent")
    p.add_argument("--dtype", choices=("float64",), default="float64", help="float64 only (no bf16 vision emulation)")
    p.add_argument("--features-out", default=None, help="also write each image's feature rows to this JSON file")
    p.add_argument("--skip-layout-check", action="store_true",
                   help="do not compare the prompt's image special tokens with the §6.2 layout")
    p.add_argument("--out", default=None, help="output JSON path (required unless --layout)")
    args = p.parse_args(argv)

    if args.layout:
        pp = preprocessor_config(args.model)
        groups = split_images(args.image, args.images_per_prompt,
                              1 if args.images_per_prompt is None else len(args.images_per_prompt))
        records = []
        for group in groups:
            for k, path in enumerate(group):
                W0, H0 = load_rgb(path).size
                records.append(layout(slice_plan(H0, W0, pp), k, pp))
                print(json.dumps(records[-1]))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(records, f)
        return records

    if not args.prompt_ids or not args.out:
        p.error("--prompt-ids and --out are required (unless --layout)")
    c, W, pp = load_model(args.model)
    d = Q.dims(c)
    vocab = load_vocab(args.model)
    groups = split_images(args.image, args.images_per_prompt, len(args.prompt_ids))
    sequences, image_info, feature_dump, checks = [], [], [], []
    for prompt, group in zip(args.prompt_ids, groups):
        if not prompt:
            raise SystemExit("empty --prompt-ids")
        bad = [t for t in prompt if not 0 <= t < d["V"]]
        if bad:
            raise SystemExit(f"token ids out of range [0, {d['V']}): {bad}")
        plans, feats = [], []
        for k, path in enumerate(group):
            plan, f = image_features_from(c, W, pp, path)
            plans.append(plan)
            feats.append(f)
            image_info.append({"path": path, "index": k, "grid": list(plan["grid"]) if plan["grid"] else None,
                               "thumb": list(plan["thumb"]), "slice": list(plan["slice"]) if plan["slice"] else None,
                               "tokens": plan["tokens"]})
            feature_dump.append({"path": path, "features": f.tolist()})
        feats = np.concatenate(feats, axis=0) if feats else np.zeros((0, d["D"]))
        try:
            rows = image_rows(c, prompt, feats.shape[0])
            if args.skip_layout_check:
                checks.append("skipped (--skip-layout-check)")
            elif vocab is None:
                checks.append("skipped (no tokenizer.json)")
            else:
                checks.append(check_prompt_layout(prompt, plans, pp, vocab))
        except ValueError as e:
            raise SystemExit(f"prompt {len(sequences)}: {e}")
        override = (rows, feats)
        generated, logprobs = ref_cli.greedy_generate(
            lambda ids: Q.forward_logprobs(c, W, ids, args.gdn_mode, input_embeds=override), prompt, args.generate)
        sequences.append({"prompt_ids": list(prompt), "generated_ids": generated,
                          "logprobs": [[float(x) for x in row] for row in logprobs]})
    options = {"max_model_len": args.max_model_len, "gdn_mode": args.gdn_mode, "dtype": args.dtype,
               "images_per_prompt": [len(g) for g in groups], "images": image_info, "layout_check": checks,
               "preprocessor": {k: pp[k] for k in PREPROCESSOR_DEFAULTS}}
    dump = ref_cli.write_dump(args.out, args.model, "minicpmv46_vision_ref", options, sequences)
    if args.features_out:
        ref_cli.write_features(args.features_out, args.model, feature_dump)
    return dump


if __name__ == "__main__":
    main()
