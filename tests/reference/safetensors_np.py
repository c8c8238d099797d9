"""Minimal safetensors + config.json reader for the numpy reference implementations.

Reads a Hugging Face model directory: either one `model.safetensors`, or shards listed in
`model.safetensors.index.json` ("weight_map": tensor name -> shard file). Every tensor comes back
as a float64 numpy array, whatever its storage dtype (F32, F16, BF16, F64).

File format (safetensors): 8-byte little-endian u64 header length N, then N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__": {...}},
then the data buffer; offsets are relative to the start of the buffer (byte 8 + N).
BF16 -> float32: take the uint16, shift it left by 16 bits into a uint32, view as float32.

Must not depend on: cpmserve code, torch, the `safetensors` package. Only numpy + stdlib.
"""
import json
import os
import struct

import numpy as np

# storage dtype -> (bytes per element, little-endian numpy dtype of the stored bits)
_DTYPES = {
    "F64": (8, "<f8"),
    "F32": (4, "<f4"),
    "F16": (2, "<f2"),
    "BF16": (2, "<u2"),
}


def _decode(dtype, raw, shape):
    """Raw little-endian bytes of one tensor -> float64 array of the given shape."""
    _, np_dtype = _DTYPES[dtype]
    bits = np.frombuffer(raw, dtype=np_dtype)
    if dtype == "BF16":
        as_u32 = bits.astype(np.uint32) << np.uint32(16)  # bf16 is the high half of an f32
        values = as_u32.view(np.float32)
    else:
        values = bits
    return values.astype(np.float64).reshape(shape)


def read_safetensors_header(path):
    """Returns (header dict without __metadata__, metadata dict, data start offset, file size)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: file too short for a safetensors header ({size} bytes)")
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            raise ValueError(f"{path}: header length {n} runs past the end of the file ({size} bytes)")
        header = json.loads(f.read(n).decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    return header, metadata, 8 + n, size


def read_safetensors(path, names=None):
    """One .safetensors file -> {name: float64 ndarray}. `names`: optional subset to load."""
    header, _, data_start, size = read_safetensors_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            if names is not None and name not in names:
                continue
            dtype = info["dtype"]
            if dtype not in _DTYPES:
                raise ValueError(f"{path}: tensor {name}: unsupported dtype {dtype}")
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(o) for o in info["data_offsets"])
            want = int(np.prod(shape, dtype=np.int64)) * _DTYPES[dtype][0]
            if end - begin != want:
                raise ValueError(f"{path}: tensor {name}: {end - begin} bytes for shape {shape} {dtype} "
                                 f"(expected {want})")
            if data_start + end > size:
                raise ValueError(f"{path}: tensor {name}: data ends at {data_start + end}, file is {size} bytes")
            f.seek(data_start + begin)
            out[name] = _decode(dtype, f.read(end - begin), shape)
    return out


def load_weights(model_dir, skip_prefixes=()):
    """Model directory -> {name: float64 ndarray}, single-file or sharded; tensors whose names
    start with one of `skip_prefixes` are not read (a text model's reference skips a vision
    tower: gigabytes as float64 at the released sizes)."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    single_path = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
        by_file = {}
        for name, fname in weight_map.items():
            if not name.startswith(tuple(skip_prefixes)):
                by_file.setdefault(fname, set()).add(name)
        weights = {}
        for fname in sorted(by_file):
            shard = read_safetensors(os.path.join(model_dir, fname), names=by_file[fname])
            missing = by_file[fname] - set(shard)
            if missing:
                raise ValueError(f"{fname}: tensors listed in the index are missing: {sorted(missing)[:5]}")
            weights.update(shard)
        return weights
    if os.path.exists(single_path):
        if not skip_prefixes:
            return read_safetensors(single_path)
        header = read_safetensors_header(single_path)[0]
        return read_safetensors(single_path, names={n for n in header
                                                    if not n.startswith(tuple(skip_prefixes))})
    raise FileNotFoundError(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


if __name__ == "__main__":
    import sys
    w = load_weights(sys.argv[1])
    for k in sorted(w):
        print(k, w[k].shape)
