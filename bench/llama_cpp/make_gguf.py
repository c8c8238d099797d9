#!/usr/bin/env python3
"""Writes a GGUF file of a MiniCPM4 model's shapes with dummy bf16 weights, for llama.cpp.

The baseline benchmark (bench/llama_cpp/run.sh) runs llama.cpp on the same dimensions as
`cpmserve bench`, so that the two engines are compared in one run on one machine: what
`cpmserve bench --load-format dummy`-style weights are to cpmserve, this file is to llama.cpp.
Layers as llama.cpp's "minicpm" architecture loads them (bf16 matrices, f32 norms, the head tied
to the embedding), the real vocabulary from the model's tokenizer.model, the muP scales from
config.json. The weights are random bf16 values of magnitude 1/32 to 1/8 and random sign (fixed
seed): speed does not depend on them, and no value is denormal.

With --ternary the layers' matrices are llama.cpp's TQ2_0 instead (2-bit codes of -1, 0, +1
and an fp16 scale per 256 weights; embedding and norms as before): BitCPM4-0.5B's shapes, as
`cpmserve bench --ternary` runs them.

With --q8 the layers' matrices and the (tied) embedding are llama.cpp's Q8_0 (int8 in blocks of
32 with an fp16 scale), as `llama-quantize ... Q8_0` makes them: what `cpmserve bench -q q8_0`
streams.

Usage: make_gguf.py --model ../shared/models/MiniCPM4-0.5B --out /tmp/minicpm4-dummy.gguf
Needs python3 only (the tokenizer's protobuf is read by hand).
"""
import argparse
import json
import math
import os
import random
import struct
import sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32
# GGUF metadata value types.
T_UINT32, T_INT32, T_FLOAT32, T_STRING, T_ARRAY = 4, 5, 6, 8, 9
# ggml tensor types; TQ2_0's block: 256 weights as 64 bytes of 2-bit codes and an fp16 scale;
# Q8_0's: an fp16 scale then 32 int8 weights.
GGML_F32, GGML_Q8_0, GGML_BF16, GGML_TQ2_0 = 0, 8, 30, 35
TQ2_0_BLOCK, TQ2_0_BYTES = 256, 66
Q8_0_BLOCK, Q8_0_BYTES = 32, 34


def fail(msg):
    sys.exit(f"make_gguf: {msg}")


# ---- the tokenizer: sentencepiece's ModelProto, field 1 = repeated SentencePiece ----

def read_varint(buf, pos):
    value, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def proto_fields(buf):
    """(field number, wire type, value) of each field of one message; value is bytes or int."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield field, wire, value


def read_sentencepiece(path):
    """[(piece, score, type)] in id order; type as sentencepiece's (and GGUF's) enum."""
    with open(path, "rb") as f:
        buf = f.read()
    pieces = []
    for field, wire, value in proto_fields(buf):
        if field != 1 or wire != 2:
            continue
        piece, score, kind = "", 0.0, 1
        for f2, w2, v2 in proto_fields(value):
            if f2 == 1:
                piece = v2.decode("utf-8")
            elif f2 == 2 and w2 == 5:
                score = struct.unpack("<f", v2)[0]
            elif f2 == 3:
                kind = v2
        pieces.append((piece, score, kind))
    if not pieces:
        fail(f"{path}: no sentencepiece pieces (field 1) found")
    return pieces


def vocabulary(model_dir, vocab_size):
    pieces = read_sentencepiece(os.path.join(model_dir, "tokenizer.model"))
    added_path = os.path.join(model_dir, "added_tokens.json")
    added = json.load(open(added_path)) if os.path.exists(added_path) else {}
    by_id = {i: p for i, p in enumerate(pieces)}
    for text, i in added.items():
        by_id[i] = (text, 0.0, 3)  # control tokens, as the chat template's markers are
    if max(by_id) >= vocab_size:
        fail(f"{model_dir}: token id {max(by_id)} is outside config.json's vocab_size {vocab_size}")
    # Ids the tokenizer leaves unnamed (padding up to vocab_size) get unique unused pieces.
    return [by_id.get(i, (f"[PAD{i}]", 0.0, 5)) for i in range(vocab_size)]


# ---- GGUF writing ----

def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, vtype, value):
    out = gguf_string(key) + struct.pack("<I", vtype)
    if vtype == T_UINT32:
        return out + struct.pack("<I", value)
    if vtype == T_INT32:
        return out + struct.pack("<i", value)
    if vtype == T_FLOAT32:
        return out + struct.pack("<f", value)
    if vtype == T_STRING:
        return out + gguf_string(value)
    etype, items = value
    out += struct.pack("<IQ", etype, len(items))
    if etype == T_STRING:
        return out + b"".join(gguf_string(s) for s in items)
    fmt = {T_INT32: "<i", T_FLOAT32: "<f", T_UINT32: "<I"}[etype]
    return out + b"".join(struct.pack(fmt, v) for v in items)


def config_int(cfg, key, path):
    if key not in cfg:
        fail(f"{path}: missing field '{key}'")
    return int(cfg[key])


def metadata(cfg, path, vocab, name):
    n_layer = config_int(cfg, "num_hidden_layers", path)
    hidden = config_int(cfg, "hidden_size", path)
    heads = config_int(cfg, "num_attention_heads", path)
    eos = cfg.get("eos_token_id", 2)
    eos = eos[-1] if isinstance(eos, list) else eos
    a = "minicpm"
    return [
        gguf_kv("general.architecture", T_STRING, a),
        gguf_kv("general.name", T_STRING, name),
        gguf_kv("general.alignment", T_UINT32, ALIGNMENT),
        gguf_kv(f"{a}.context_length", T_UINT32, config_int(cfg, "max_position_embeddings", path)),
        gguf_kv(f"{a}.embedding_length", T_UINT32, hidden),
        gguf_kv(f"{a}.block_count", T_UINT32, n_layer),
        gguf_kv(f"{a}.feed_forward_length", T_UINT32, config_int(cfg, "intermediate_size", path)),
        gguf_kv(f"{a}.attention.head_count", T_UINT32, heads),
        gguf_kv(f"{a}.attention.head_count_kv", T_UINT32,
                config_int(cfg, "num_key_value_heads", path)),
        gguf_kv(f"{a}.attention.layer_norm_rms_epsilon", T_FLOAT32, float(cfg["rms_norm_eps"])),
        gguf_kv(f"{a}.rope.dimension_count", T_UINT32, hidden // heads),
        gguf_kv(f"{a}.rope.freq_base", T_FLOAT32, float(cfg.get("rope_theta", 10000.0))),
        gguf_kv(f"{a}.vocab_size", T_UINT32, len(vocab)),
        # MiniCPM's muP scales, as llama.cpp's converter writes them.
        gguf_kv(f"{a}.embedding_scale", T_FLOAT32, float(cfg.get("scale_emb", 1.0))),
        gguf_kv(f"{a}.residual_scale", T_FLOAT32,
                float(cfg.get("scale_depth", 1.0)) / math.sqrt(n_layer)),
        gguf_kv(f"{a}.logit_scale", T_FLOAT32, float(cfg.get("dim_model_base", hidden)) / hidden),
        gguf_kv("tokenizer.ggml.model", T_STRING, "llama"),
        gguf_kv("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, [p for p, _, _ in vocab])),
        gguf_kv("tokenizer.ggml.scores", T_ARRAY, (T_FLOAT32, [s for _, s, _ in vocab])),
        gguf_kv("tokenizer.ggml.token_type", T_ARRAY, (T_INT32, [t for _, _, t in vocab])),
        gguf_kv("tokenizer.ggml.bos_token_id", T_UINT32, int(cfg.get("bos_token_id", 1))),
        gguf_kv("tokenizer.ggml.eos_token_id", T_UINT32, int(eos)),
    ]


def tensors(cfg, path, matrix_type, embd_type):
    """(name, shape as torch's [rows, cols], ggml type) in file order; layer matrices as
    `matrix_type`, the embedding (and so the tied head) as `embd_type`."""
    n_layer = config_int(cfg, "num_hidden_layers", path)
    hidden = config_int(cfg, "hidden_size", path)
    heads = config_int(cfg, "num_attention_heads", path)
    kv = config_int(cfg, "num_key_value_heads", path) * (hidden // heads)
    ff = config_int(cfg, "intermediate_size", path)
    out = [("token_embd.weight", (config_int(cfg, "vocab_size", path), hidden), embd_type),
           ("output_norm.weight", (hidden,), GGML_F32)]
    m = matrix_type
    for i in range(n_layer):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (hidden,), GGML_F32),
                (b + "attn_q.weight", (hidden, hidden), m),
                (b + "attn_k.weight", (kv, hidden), m),
                (b + "attn_v.weight", (kv, hidden), m),
                (b + "attn_output.weight", (hidden, hidden), m),
                (b + "ffn_norm.weight", (hidden,), GGML_F32),
                (b + "ffn_gate.weight", (ff, hidden), m),
                (b + "ffn_up.weight", (ff, hidden), m),
                (b + "ffn_down.weight", (hidden, ff), m)]
    return out


def size_of(shape, ggml_type):
    count = math.prod(shape)
    if ggml_type == GGML_TQ2_0:
        if shape[-1] % TQ2_0_BLOCK:
            fail(f"TQ2_0 needs rows of a multiple of {TQ2_0_BLOCK} weights, not {shape[-1]}")
        return count // TQ2_0_BLOCK * TQ2_0_BYTES
    if ggml_type == GGML_Q8_0:
        if shape[-1] % Q8_0_BLOCK:
            fail(f"Q8_0 needs rows of a multiple of {Q8_0_BLOCK} weights, not {shape[-1]}")
        return count // Q8_0_BLOCK * Q8_0_BYTES
    return count * (4 if ggml_type == GGML_F32 else 2)


def ternary_byte(i):
    """Byte i with each 2-bit code 3 (not a ternary value) made 1 (0); 0, 1, 2 are -1, 0, +1."""
    codes = [(i >> shift) & 3 for shift in (0, 2, 4, 6)]
    return sum((1 if c == 3 else c) << shift for c, shift in zip(codes, (0, 2, 4, 6)))


TERNARY_CODES = bytes(ternary_byte(i) for i in range(256))


def tensor_bytes(shape, ggml_type, rng):
    count = math.prod(shape)
    if ggml_type == GGML_F32:
        return struct.pack("<f", 1.0) * count  # norms: the identity scale
    if ggml_type == GGML_TQ2_0:
        scale = struct.pack("<e", 0.05)
        blocks = count // TQ2_0_BLOCK
        codes = rng.randbytes(blocks * TQ2_0_BLOCK // 4).translate(TERNARY_CODES)
        step = TQ2_0_BLOCK // 4
        return b"".join(codes[i * step:(i + 1) * step] + scale for i in range(blocks))
    if ggml_type == GGML_Q8_0:
        # Scale 2^-10 (|weight| <= 1/8, as the bf16 weights) and random int8 values.
        scale = struct.pack("<e", 2.0 ** -10)
        blocks = count // Q8_0_BLOCK
        values = rng.randbytes(blocks * Q8_0_BLOCK)
        return b"".join(scale + values[i * Q8_0_BLOCK:(i + 1) * Q8_0_BLOCK]
                        for i in range(blocks))
    # bf16, little-endian: a random low byte (7 mantissa bits and the exponent's lowest), a high
    # byte of random sign and exponent bits 0111101 (so |value| in [2^-5, 2^-3)).
    out = bytearray(2 * count)
    out[0::2] = rng.randbytes(count)
    out[1::2] = rng.randbytes(count).translate(bytes(0x3D | (i & 0x80) for i in range(256)))
    return bytes(out)


def padding(n):
    return b"\0" * ((-n) % ALIGNMENT)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model directory (config.json, tokenizer.model)")
    ap.add_argument("--out", required=True, help="GGUF file to write")
    kind = ap.add_mutually_exclusive_group()
    kind.add_argument("--ternary", action="store_true", help="layer matrices as TQ2_0")
    kind.add_argument("--q8", action="store_true", help="layer matrices and embedding as Q8_0")
    args = ap.parse_args()
    cfg_path = os.path.join(args.model, "config.json")
    try:
        cfg = json.load(open(cfg_path))
    except (OSError, ValueError) as e:
        fail(f"{cfg_path}: {e}")
    vocab = vocabulary(args.model, config_int(cfg, "vocab_size", cfg_path))
    kvs = metadata(cfg, cfg_path, vocab, os.path.basename(args.model.rstrip("/")))
    infos, offset = [], 0
    matrix_type = GGML_TQ2_0 if args.ternary else GGML_Q8_0 if args.q8 else GGML_BF16
    layout = tensors(cfg, cfg_path, matrix_type, GGML_Q8_0 if args.q8 else GGML_BF16)
    for name, shape, gtype in layout:
        size = size_of(shape, gtype)
        dims = list(reversed(shape))  # GGUF lists the contiguous dimension first
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) +
                     b"".join(struct.pack("<Q", d) for d in dims) +
                     struct.pack("<IQ", gtype, offset))
        offset += size + (-size) % ALIGNMENT
    rng = random.Random(0)
    with open(args.out, "wb") as f:
        head = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(layout), len(kvs))
        head += b"".join(kvs) + b"".join(infos)
        f.write(head + padding(len(head)))
        for name, shape, gtype in layout:
            data = tensor_bytes(shape, gtype, rng)
            f.write(data + padding(len(data)))
    print(f"make_gguf: wrote {args.out} ({offset / 1e6:.0f} MB of tensors, {len(vocab)} tokens)")


if __name__ == "__main__":
    main()
