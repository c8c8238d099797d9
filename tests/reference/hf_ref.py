"""The same dumps as the numpy references, computed by Hugging Face transformers' own models.

A third, independent implementation: transformers' `MiniCPMV4_6ForConditionalGeneration`
(Qwen3.5 hybrid LM, SigLIP tower, mergers) with its own image processor, and for MiniCPM4 /
BitCPM4 the native `MiniCPMForCausalLM` where the release has one, else transformers' Llama with
MiniCPM's scalings folded into the weights (scripts/minicpm_as_llama.py). Where the numpy
references were written from the specs, this is the code the checkpoints were published for,
so a spec misreading shared by cpmserve and the numpy references shows up here. Needs torch and
transformers >= 5.7 (not Debian packages: run it where they are installed; CI does not). The
model class is chosen from config.json's `architectures`, never from remote code, so a
checkpoint dir without `model_type` (MiniCPM4's own config has none) loads too.

  python3 tests/reference/hf_ref.py --model DIR --prompt-ids 1,2,3 [--prompt-ids ...] \
      [--generate N] [--dtype float64|float32|bfloat16] [--image A.png ...] \
      [--images-per-prompt K1,K2,...] [--image-backend pil|torchvision] \
      [--features-out FEATS.json] --out OUT.json

Output: ref_cli.py's JSON (`{"model", "reference": "hf_transformers", "options", "sequences":
[{"prompt_ids", "generated_ids", "logprobs"}]}`), comparable with compare_logprobs.py against
the engine (`cpmserve generate --dump-logprobs --all-positions`) or the numpy references.

- Generation is transformers' `generate` (KV cache, greedy); the log-prob rows are one full
  forward over prompt + generated[:-1], so `options.generate_consistent` says whether the cached
  greedy ids are the argmax of the full forward's rows (they should be, barring near-ties).
- Images (MiniCPM-V-4.6): the prompt ids already hold the expanded layout, as for
  minicpmv46_vision_ref.py. Each image goes through transformers' MiniCPMV4_6 image processor
  (`--image-backend pil`, the default, resamples with PIL as the numpy reference and cpmserve
  do; `torchvision` is what AutoImageProcessor picks when torchvision is installed), then
  `get_image_features` one slice at a time (each slice is encoded on its own by definition), and
  the features replace the image-token rows of the input embeddings. `options.packed_features_
  max_abs` records how far transformers' own packed call (all slices of an image in one
  `get_image_features`) is from that, or why it failed.
- MiniCPM4 LongRoPE: transformers picks the long factors per forward when positions exceed
  `original_max_position_embeddings`; cpmserve (like vLLM) picks them once from
  max_model_len > original. Compare prompts that stay on one side: short prompts against the
  engine at `--max-model-len` = original, long ones at a larger max_model_len.
"""
import copy
import json
import os
import sys
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import minicpm_as_llama  # noqa: E402
import ref_cli  # noqa: E402

try:                                        # absent in CI: self_test.py imports only the numpy parts
    import torch
    import transformers
    DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}
except ImportError:
    torch = transformers = None
    DTYPES = {"float64": None, "float32": None, "bfloat16": None}


def load_model(model_dir, dtype):
    """-> (model, config dict, class name, loading info) using the class named in config.json."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    arch = (cfg.get("architectures") or [None])[0]
    cls = getattr(transformers, arch or "", None)
    if cls is None and arch == "MiniCPMForCausalLM":
        model, info = minicpm_as_llama.load(model_dir, DTYPES[dtype])
        return model, cfg, "LlamaForCausalLM (MiniCPM scalings folded)", info
    if cls is None:
        raise SystemExit(f"{model_dir}/config.json: architectures[0] = {arch!r} is not a transformers class "
                         f"(transformers {transformers.__version__})")
    model, info = cls.from_pretrained(model_dir, dtype=DTYPES[dtype], attn_implementation="eager",
                                      output_loading_info=True)
    model.eval()
    info = {k: sorted(map(str, v)) for k, v in info.items() if isinstance(v, (list, set)) and v}
    return model, cfg, arch, info


def image_processor(model_dir, backend):
    """transformers' MiniCPMV4_6 image processor with the checkpoint's preprocessor_config.json."""
    path = os.path.join(model_dir, "preprocessor_config.json")
    kwargs = {}
    if os.path.exists(path):
        with open(path) as f:
            kwargs = {k: v for k, v in json.load(f).items() if k not in ("image_processor_type", "processor_class")}
    if backend == "pil":
        from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import \
            MiniCPMV4_6ImageProcessorPil as cls
    else:
        from transformers.models.minicpmv4_6.image_processing_minicpmv4_6 import \
            MiniCPMV4_6ImageProcessor as cls
    return cls(**kwargs)


def image_features(model, processor, path, record):
    """[N, text_hidden] rows of one image in the model's dtype: thumbnail, then slices row-major."""
    from PIL import Image
    with Image.open(path) as im:
        image = im.convert("RGB")
    out = processor([image], return_tensors="pt")
    pixels, sizes = out["pixel_values"], out["target_sizes"]
    grid = out["grids"][0]
    dtype = next(model.parameters()).dtype
    pixels = pixels.to(dtype)
    per_slice, start = [], 0
    for h, w in sizes.tolist():
        n = h * w                                  # patches of this slice along the last axis
        piece = pixels[..., start * pixels.shape[2]:(start + n) * pixels.shape[2]]
        feats = model.get_image_features(piece, torch.tensor([[h, w]], dtype=sizes.dtype)).pooler_output
        per_slice.append(torch.cat(list(feats), dim=0))
        start += n
    rows = torch.cat(per_slice, dim=0)
    record.update({"path": path, "grid": [int(g) for g in grid], "target_sizes": sizes.tolist(),
                   "tokens": int(rows.shape[0])})
    try:
        packed = torch.cat(list(model.get_image_features(pixels, sizes).pooler_output), dim=0)
        record["packed_features_max_abs"] = float((packed.double() - rows.double()).abs().max())
    except Exception as e:  # noqa: BLE001 - recorded, not fatal: the per-slice rows are the definition
        record["packed_features_max_abs"] = f"failed: {type(e).__name__}: {e}"
    return rows


def logprob_rows(model, ids, n_prompt, image_rows, image_token_id):
    """log-softmax rows [len(ids), V] (float64) of one full forward. Image rows replace the
    prompt's image tokens only: a generated image-token id is an ordinary token."""
    input_ids = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        if image_rows is None:
            logits = model(input_ids=input_ids).logits[0]
        else:
            embeds = model.get_input_embeddings()(input_ids)
            mask = input_ids[0] == image_token_id
            mask[n_prompt:] = False
            if int(mask.sum()) != image_rows.shape[0]:
                raise SystemExit(f"prompt has {int(mask.sum())} image tokens (id {image_token_id}) but the images "
                                 f"give {image_rows.shape[0]} feature rows")
            embeds[0, mask] = image_rows.to(embeds.dtype)
            logits = model(inputs_embeds=embeds).logits[0]
    return torch.log_softmax(logits.double(), dim=-1).numpy()


def greedy(model, ids, n, image_rows, image_token_id):
    """transformers' cached greedy decoding of n tokens. No EOS ids: an EOS neither stops it nor
    is suppressed (min_new_tokens would mask it), as cpmserve's --ignore-eos."""
    if n == 0:
        return []
    input_ids = torch.tensor([ids], dtype=torch.long)
    config = copy.deepcopy(model.generation_config)
    config.eos_token_id = None
    config.do_sample, config.num_beams, config.temperature, config.top_p, config.top_k = False, 1, None, None, None
    config.repetition_penalty, config.pad_token_id = 1.0, 0
    kwargs = {"generation_config": config, "max_new_tokens": n}
    with torch.no_grad():
        if image_rows is None:
            out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
            return out[0, len(ids):].tolist()
        embeds = model.get_input_embeddings()(input_ids)
        embeds[0, input_ids[0] == image_token_id] = image_rows.to(embeds.dtype)
        out = model.generate(input_ids=input_ids, inputs_embeds=embeds,
                             attention_mask=torch.ones_like(input_ids), **kwargs)
        return out[0, -n:].tolist()


def main(argv=None):
    if transformers is None:
        raise SystemExit("hf_ref.py needs torch and transformers (pip); CI has neither")
    p = ref_cli.make_parser("transformers reference forward (same dump format as the numpy references)")
    for action in p._actions:                       # this reference runs in transformers' dtypes
        if action.dest == "dtype":
            action.choices, action.default = tuple(DTYPES), "float64"
    p.add_argument("--image", action="append", default=[], help="image path; repeat, in prompt order")
    p.add_argument("--images-per-prompt", type=ref_cli.parse_ids, default=None,
                   help="K1,K2,...: images of each prompt (default: all to the first prompt)")
    p.add_argument("--image-backend", choices=("pil", "torchvision"), default="pil")
    p.add_argument("--features-out", default=None, help="also write each image's feature rows to this JSON file")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model, cfg, arch, info = load_model(args.model, args.dtype)
    text_cfg = cfg.get("text_config", cfg)
    vocab = text_cfg["vocab_size"]
    per_prompt = args.images_per_prompt or [len(args.image)] + [0] * (len(args.prompt_ids) - 1)
    if len(per_prompt) != len(args.prompt_ids) or sum(per_prompt) != len(args.image):
        raise SystemExit(f"--images-per-prompt {per_prompt} does not match {len(args.prompt_ids)} prompts / "
                         f"{len(args.image)} images")
    processor = image_processor(args.model, args.image_backend) if args.image else None
    sequences, images, features, consistent = [], [], [], []
    next_image = 0
    for prompt, k in zip(args.prompt_ids, per_prompt):
        bad = [t for t in prompt if not 0 <= t < vocab]
        if not prompt or bad:
            raise SystemExit(f"empty prompt or ids out of range [0, {vocab}): {bad}")
        rows = None
        if k:
            parts = []
            for path in args.image[next_image:next_image + k]:
                record = {}
                with torch.no_grad():
                    parts.append(image_features(model, processor, path, record))
                images.append(record)
                features.append({"path": path, "features": parts[-1].double().tolist()})
            next_image += k
            rows = torch.cat(parts, dim=0)
        generated = greedy(model, prompt, args.generate, rows, cfg.get("image_token_id"))
        ids = list(prompt) + generated[:-1]
        logprobs = logprob_rows(model, ids, len(prompt), rows, cfg.get("image_token_id"))
        consistent.append(all(int(np.argmax(logprobs[len(prompt) - 1 + i])) == g for i, g in enumerate(generated)))
        sequences.append({"prompt_ids": list(prompt), "generated_ids": generated,
                          "logprobs": [[float(x) for x in row] for row in logprobs]})
    options = {"dtype": args.dtype, "max_model_len": args.max_model_len, "class": arch,
               "transformers": transformers.__version__, "torch": torch.__version__,
               "attn_implementation": "eager", "loading_info": info, "generate_consistent": consistent,
               "image_backend": args.image_backend if args.image else None, "images": images}
    dump = ref_cli.write_dump(args.out, args.model, "hf_transformers", options, sequences)
    if args.features_out:
        ref_cli.write_features(args.features_out, args.model, features)
    return dump


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception:  # noqa: BLE001 - a readable trace for runs on a remote machine
        traceback.print_exc()
        sys.exit(1)
