"""Shared pieces of the reference command lines: log-softmax, greedy generation, JSON dump.

Used by minicpm_ref.py and qwen35_ref.py. Holds no model math. Must not depend on cpmserve code;
numpy + stdlib only.

Output JSON (one file per run):
  {"model": MODEL_DIR, "reference": MODULE, "options": {...},
   "sequences": [{"prompt_ids": [...], "generated_ids": [...], "logprobs": [[V floats], ...]}]}
logprobs has one row per prompt position (row t = log-softmax of the logits at position t, i.e.
the distribution of token t+1), then one row per generated token except the last: in total
len(prompt_ids) + len(generated_ids) - 1 rows (len(prompt_ids) when nothing is generated).
Generation is greedy: argmax, ties -> lowest id. Floats are float64 written with repr precision
(in --dtype bfloat16 mode too: the logits are bf16 values, the log-softmax is float64).
"""
import argparse
import json

import numpy as np


def log_softmax(logits):
    """[T, V] -> [T, V], stable: x - max - log(sum(exp(x - max)))."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def greedy_generate(logprobs_fn, prompt_ids, n_generate):
    """logprobs_fn(token_ids) -> [len, V] log-probs of a full (KV-free) forward.

    Returns (generated_ids, logprobs rows as described in the module docstring)."""
    tokens = list(prompt_ids)
    generated = []
    logprobs = logprobs_fn(tokens)                       # [P, V]
    for step in range(n_generate):
        next_id = int(np.argmax(logprobs[-1]))           # np.argmax: first (lowest) id on ties
        generated.append(next_id)
        if step + 1 < n_generate:                        # the last generated token gets no row
            tokens.append(next_id)
            logprobs = logprobs_fn(tokens)               # [P + step + 1, V]
    return generated, logprobs


def parse_ids(text):
    return [int(t) for t in text.replace(" ", "").split(",") if t != ""]


def make_parser(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", required=True, help="Hugging Face model directory")
    p.add_argument("--prompt-ids", action="append", required=True, type=parse_ids,
                   help="comma-separated token ids; repeat for several sequences")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="engine context length (MiniCPM LongRoPE long/short rule); default max_position_embeddings")
    p.add_argument("--generate", type=int, default=0, help="greedy tokens to generate per sequence")
    p.add_argument("--dtype", choices=("float64", "bfloat16"), default="float64",
                   help="float64: the exact definition (default); bfloat16: emulate a bf16 PyTorch model "
                        "(bf16 weights, activations rounded at its rounding points); see precision.py")
    p.add_argument("--out", required=True, help="output JSON path")
    return p


def write_dump(path, model, reference, options, sequences):
    """The dump described in the module docstring; returns it."""
    dump = {"model": model, "reference": reference, "options": options, "sequences": sequences}
    with open(path, "w") as f:
        json.dump(dump, f)
    return dump


def write_features(path, model, images):
    """--features-out: {"model", "images": [{"path", "features": [[floats] per row]}]}."""
    with open(path, "w") as f:
        json.dump({"model": model, "images": images}, f)


def read_feature_rows(path):
    """Image feature rows in order, from a --features-out file ({"images": [...]}) or from the
    engine's `generate --dump-image-features` ({"sequences": [...]}, the same rows per prompt)."""
    with open(path) as f:
        data = json.load(f)
    items = data["images"] if "images" in data else data["sequences"]
    return [row for item in items for row in item["features"]]


def run(args, logprobs_fn, vocab_size, reference, options):
    """Runs every prompt, writes the JSON dump to args.out. Returns the dump dict."""
    sequences = []
    for prompt in args.prompt_ids:
        if not prompt:
            raise SystemExit("empty --prompt-ids")
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise SystemExit(f"token ids out of range [0, {vocab_size}): {bad}")
        generated, logprobs = greedy_generate(logprobs_fn, prompt, args.generate)
        sequences.append({"prompt_ids": list(prompt), "generated_ids": generated,
                          "logprobs": [[float(x) for x in row] for row in logprobs]})
    return write_dump(args.out, args.model, reference, options, sequences)
