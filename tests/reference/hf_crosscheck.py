"""cpmserve and the numpy references against transformers' own models, on tiny checkpoints.

Three phases, because transformers (torch) is not a Debian package and CI does not have it:

  hf_crosscheck.py prepare --cpmserve build/cpmserve --dir D   # here: checkpoints, images, engine
                                                                # and numpy-reference dumps
  hf_crosscheck.py hf --dir D                                   # where torch + transformers are
  hf_crosscheck.py compare --dir D                              # here: the table; exit 1 on a bound
  hf_crosscheck.py selftest --cpmserve build/cpmserve         # the tool itself, no transformers (ctest)
  hf_crosscheck.py all --cpmserve build/cpmserve --dir D       # the three in turn, where one python
                                                                # has numpy, Pillow, torch, transformers

`prepare` writes tiny random checkpoints with the real tensor names (`cpmserve make-tiny`:
MiniCPM4 tied float32, untied bf16 and BitCPM4-style ternary; MiniCPM-V-4.6 float32 and bf16;
both again at the released head sizes, `--real-heads`, float32 and bf16),
three opaque RGB test images, and for each case the engine's dump (`cpmserve generate
--dump-logprobs --all-positions --ignore-eos`) and the float64 numpy reference's. `hf` runs
hf_ref.py's forward for each case in the dtypes listed. `compare` pairs them with
compare_logprobs.py and the image features row by row.

Bounds: transformers float64 against the numpy float64 reference within 1e-3 in every log-prob
and the same top-1 and greedy ids. transformers keeps RMSNorm, RoPE, the attention softmax and
the chunked delta rule in float32 even in a float64 model: measured 4e-6 (MiniCPM4) to 2.2e-4
(MiniCPM-V-4.6 with images) on these checkpoints, where a misread formula gives 1e-2 and more.
cpmserve float32 against transformers float32 as the model tests bound cpmserve against numpy
(2e-3, same top-1, same top-20, same greedy ids). bf16 against bf16 is reported only (below).

MiniCPM4: transformers 5.17 has no native MiniCPM and the hub's remote code is not here, so
hf_ref.py runs it as transformers' Llama with MiniCPM's three scalings folded into the weights
(scripts/minicpm_as_llama.py); the MiniCPM-V-4.6 cases run transformers' own classes.
"""
import argparse
import json
import os
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_logprobs  # noqa: E402
import ref_cli  # noqa: E402

PY = sys.executable
GENERATE = 8
IMAGES = {"small": (120, 90), "wide": (700, 330), "tall": (260, 900)}
VISION_PROMPTS = [
    ("<|im_start|>user\n<|image_pad|>\nWhat is in the picture?<|im_end|>\n<|im_start|>assistant\n", ["small"]),
    ("<|im_start|>user\n<|image_pad|>\nDescribe it.<|im_end|>\n<|im_start|>assistant\n", ["wide"]),
    ("<|im_start|>user\nFirst <|image_pad|> then <|image_pad|>. Compare.<|im_end|>\n<|im_start|>assistant\n",
     ["tall", "small"]),
]

# compare_logprobs.check_bounds names (its defaults fill the rest: max |d| over the top-20 2e-3,
# max rel 0.01, top-1 and top-20 all equal)
F32 = {"max_abs_logprob_full": 2e-3, "require_generated_match": True}
F64 = {"max_abs_logprob_full": 1e-3, "require_generated_match": True}
# bf16 against bf16 is reported, not bounded: two bf16 programs that round at different points
# differ by as much as either differs from float64 (on these tiny models' peaked GDN heads, ~1).
FEATURES_F32 = 1e-4


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def prompts_of(lengths, vocab, seed):
    x, out = seed, []
    for n in lengths:
        ids = [1]
        while len(ids) < n:
            x = (x * 1103515245 + 12345) % (1 << 31)
            ids.append(3 + (x >> 8) % (vocab - 6))
        out.append(ids[:n])
    return out


# name: checkpoint, make-tiny flags, prompt lengths (or "vision"), engine flags, numpy reference,
# transformers runs [(dtype, image backend)], pairs to compare [(a, b, bounds)]
CASES = {
    # MiniCPM4 prompts below original_max_position_embeddings (64): short LongRoPE factors on both
    # sides (the engine at --max-model-len 64, transformers by the positions it sees).
    "minicpm4_short": dict(ckpt="m4", lengths=[1, 9, 40], engine=["--dtype", "float32", "--max-model-len", "64"],
                           ref=["minicpm_ref.py", "--max-model-len", "64"],
                           hf=[("float64", None), ("float32", None)],
                           pairs=[("hf_float64", "numpy", F64), ("engine", "hf_float32", F32),
                                  ("engine", "hf_float64", F32)]),
    # Past 64 positions: the long factors and the magnitude factor on both sides.
    "minicpm4_long": dict(ckpt="m4", lengths=[100, 180], engine=["--dtype", "float32"], ref=["minicpm_ref.py"],
                          hf=[("float64", None), ("float32", None)],
                          pairs=[("hf_float64", "numpy", F64), ("engine", "hf_float32", F32)]),
    "minicpm4_bf16_untied": dict(ckpt="m4_bf16", lengths=[9, 40],
                                 engine=["--dtype", "bfloat16", "--max-model-len", "64"],
                                 ref=["minicpm_ref.py", "--max-model-len", "64"],
                                 hf=[("float64", None), ("bfloat16", None)],
                                 pairs=[("hf_float64", "numpy", F64), ("engine", "hf_bfloat16", None)]),
    "bitcpm4_ternary": dict(ckpt="m4_ternary", lengths=[9, 40],
                            engine=["--dtype", "float32", "--max-model-len", "64"],
                            ref=["minicpm_ref.py", "--max-model-len", "64"],
                            hf=[("float64", None), ("float32", None)],
                            pairs=[("hf_float64", "numpy", F64), ("engine", "hf_float32", F32)]),
    # Qwen3.5 hybrid LM: prompts across the delta rule's 64-token chunks.
    "minicpmv46_text": dict(ckpt="v46", lengths=[1, 7, 70, 150], engine=["--dtype", "float32"],
                            ref=["qwen35_ref.py"], hf=[("float64", None), ("float32", None)],
                            pairs=[("hf_float64", "numpy", F64), ("engine", "hf_float32", F32)]),
    "minicpmv46_bf16": dict(ckpt="v46_bf16", lengths=[7, 70], engine=["--dtype", "bfloat16"],
                            ref=["qwen35_ref.py"], hf=[("float64", None), ("bfloat16", None)],
                            pairs=[("hf_float64", "numpy", F64), ("engine", "hf_bfloat16", None)]),
    # Images: transformers' image processor (PIL backend as the spec; torchvision reported),
    # tower, mergers and the placeholder rows.
    "minicpmv46_images": dict(ckpt="v46", lengths="vision", engine=["--dtype", "float32"],
                              ref=["minicpmv46_vision_ref.py"],
                              hf=[("float64", "pil"), ("float32", "pil"), ("float32", "torchvision")],
                              pairs=[("hf_float64_pil", "numpy", F64), ("engine", "hf_float32_pil", F32),
                                     ("engine", "hf_float32_torchvision", None)]),
    # The released models' head shapes (`make-tiny --real-heads`): MiniCPM4 heads of 64, 8 query
    # heads per KV head, 32 LongRoPE pairs; MiniCPM-V-4.6 heads of 256 (4 per KV head), GDN heads
    # of 128, vision heads of 72 on the 70 x 70 position grid.
    "minicpm4_real_heads_short": dict(ckpt="m4_real", lengths=[1, 40, 56],
                                      engine=["--dtype", "float32", "--max-model-len", "64"],
                                      ref=["minicpm_ref.py", "--max-model-len", "64"],
                                      hf=[("float64", None), ("float32", None)],
                                      pairs=[("hf_float64", "numpy", F64), ("engine", "hf_float32", F32)]),
    "minicpm4_real_heads_long": dict(ckpt="m4_real", lengths=[150], engine=["--dtype", "float32"],
                                     ref=["minicpm_ref.py"], hf=[("float64", None), ("float32", None)],
                                     pairs=[("hf_float64", "numpy", F64), ("engine", "hf_float32", F32)]),
    "minicpmv46_real_heads_text": dict(ckpt="v46_real", lengths=[5, 130], engine=["--dtype", "float32"],
                                       ref=["qwen35_ref.py"], hf=[("float64", None), ("float32", None)],
                                       pairs=[("hf_float64", "numpy", F64), ("engine", "hf_float32", F32)]),
    "minicpmv46_real_heads_images": dict(ckpt="v46_real", lengths="vision", engine=["--dtype", "float32"],
                                         ref=["minicpmv46_vision_ref.py"],
                                         hf=[("float64", "pil"), ("float32", "pil")],
                                         pairs=[("hf_float64_pil", "numpy", F64),
                                                ("engine", "hf_float32_pil", F32)]),
    "minicpm4_real_heads_bf16": dict(ckpt="m4_real_bf16", lengths=[9, 40],
                                     engine=["--dtype", "bfloat16", "--max-model-len", "64"],
                                     ref=["minicpm_ref.py", "--max-model-len", "64"],
                                     hf=[("float64", None), ("bfloat16", None)],
                                     pairs=[("hf_float64", "numpy", F64), ("engine", "hf_bfloat16", None),
                                            ("engine", "numpy", None), ("hf_bfloat16", "numpy", None)]),
    "minicpmv46_real_heads_bf16": dict(ckpt="v46_real_bf16", lengths=[7, 70], engine=["--dtype", "bfloat16"],
                                       ref=["qwen35_ref.py"], hf=[("float64", None), ("bfloat16", None)],
                                       pairs=[("hf_float64", "numpy", F64), ("engine", "hf_bfloat16", None),
                                              ("engine", "numpy", None), ("hf_bfloat16", "numpy", None)]),
}

CHECKPOINTS = {
    "m4": ["--arch", "minicpm4", "--dtype", "float32"],
    "m4_bf16": ["--arch", "minicpm4", "--dtype", "bfloat16", "--untied", "--seed", "1"],
    "m4_ternary": ["--arch", "minicpm4", "--dtype", "bfloat16", "--ternary", "32", "--seed", "2"],
    "v46": ["--arch", "minicpmv4_6", "--dtype", "float32"],
    "v46_bf16": ["--arch", "minicpmv4_6", "--dtype", "bfloat16", "--seed", "1"],
    "m4_real": ["--arch", "minicpm4", "--dtype", "float32", "--real-heads", "--seed", "3"],
    "v46_real": ["--arch", "minicpmv4_6", "--dtype", "float32", "--real-heads", "--seed", "3"],
    "m4_real_bf16": ["--arch", "minicpm4", "--dtype", "bfloat16", "--real-heads", "--seed", "5"],
    "v46_real_bf16": ["--arch", "minicpmv4_6", "--dtype", "bfloat16", "--real-heads", "--seed", "5"],
}


def write_images(d):
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(1)
    paths = {}
    for name, (w, h) in IMAGES.items():
        y, x = np.mgrid[0:h, 0:w]
        a = np.stack([x * 255 // w, y * 255 // h, ((x + y) * 7) % 256], -1)
        a = (a * 0.7 + rng.integers(0, 77, a.shape)).astype(np.uint8)
        paths[name] = os.path.join(d, f"{name}.png")
        Image.fromarray(a, "RGB").save(paths[name])
    return paths


def prepare(args):
    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    for name in sorted({CASES[c]["ckpt"] for c in args.cases}):
        run([args.cpmserve, "make-tiny", os.path.join(d, name), *CHECKPOINTS[name]])
    images = write_images(d)
    plan = {}
    for case in args.cases:
        c = CASES[case]
        model = os.path.join(d, c["ckpt"])
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        vocab = cfg.get("text_config", cfg)["vocab_size"]
        eng = os.path.join(d, f"{case}.engine.json")
        cmd = [args.cpmserve, "generate", "--model", model, "--max-tokens", str(GENERATE), "--dump-logprobs", eng,
               "--all-positions", "--ignore-eos", "--threads", "2", *c["engine"]]
        image_list, per_prompt = [], []
        if c["lengths"] == "vision":
            cmd += ["--dump-image-features", os.path.join(d, f"{case}.engine_features.json")]
            for text, names in VISION_PROMPTS:
                cmd += ["--prompt", text]
                image_list += [images[n] for n in names]
                per_prompt.append(len(names))
            for path in image_list:
                cmd += ["--image", path]
        else:
            for p in prompts_of(c["lengths"], vocab, seed=len(case)):
                cmd += ["--prompt-ids", ",".join(map(str, p))]
        run(cmd)
        with open(eng) as f:
            prompts = [s["prompt_ids"] for s in json.load(f)["sequences"]]
        ref = [PY, os.path.join(HERE, c["ref"][0]), "--model", model, "--generate", str(GENERATE),
               "--out", os.path.join(d, f"{case}.numpy.json"), *c["ref"][1:]]
        if image_list:
            ref += ["--images-per-prompt", ",".join(map(str, per_prompt)),
                    "--features-out", os.path.join(d, f"{case}.numpy_features.json")]
            ref += [a for path in image_list for a in ("--image", path)]
        ref += [a for p in prompts for a in ("--prompt-ids", ",".join(map(str, p)))]
        run(ref)
        plan[case] = {"model": c["ckpt"], "prompts": prompts, "images": [os.path.basename(p) for p in image_list],
                      "images_per_prompt": per_prompt}
        print(f"prepared {case}: {len(prompts)} prompts of {[len(p) for p in prompts]} tokens")
    path = os.path.join(d, "plan.json")            # earlier prepares' cases stay
    if os.path.exists(path):
        with open(path) as f:
            plan = {**json.load(f), **plan}
    with open(path, "w") as f:
        json.dump(plan, f)


def hf(args):
    """Runs in one process (torch imports once); a failing run is reported and the rest go on."""
    import hf_ref
    d = os.path.abspath(args.dir)
    with open(os.path.join(d, "plan.json")) as f:
        plan = json.load(f)
    status = {}
    plan = {case: p for case, p in plan.items() if case in args.cases}
    for case, p in plan.items():
        for dtype, backend in CASES[case]["hf"]:
            tag = f"hf_{dtype}" + (f"_{backend}" if backend else "")
            argv = ["--model", os.path.join(d, p["model"]), "--dtype", dtype, "--generate", str(GENERATE),
                    "--out", os.path.join(d, f"{case}.{tag}.json")]
            argv += [a for ids in p["prompts"] for a in ("--prompt-ids", ",".join(map(str, ids)))]
            if p["images"]:
                argv += ["--image-backend", backend, "--images-per-prompt", ",".join(map(str, p["images_per_prompt"])),
                         "--features-out", os.path.join(d, f"{case}.{tag}_features.json")]
                argv += [a for name in p["images"] for a in ("--image", os.path.join(d, name))]
            try:
                dump = hf_ref.main(argv)
                status[f"{case}.{tag}"] = {k: dump["options"][k] for k in
                                           ("transformers", "torch", "loading_info", "generate_consistent", "images")}
                print(f"{case}.{tag}: ok", flush=True)
            except BaseException as e:  # noqa: BLE001 - keep going; the log says what broke
                status[f"{case}.{tag}"] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
                print(f"{case}.{tag}: FAILED {type(e).__name__}: {e}\n{traceback.format_exc()}", flush=True)
    for case, p in plan.items():
        if CASES[case]["lengths"] == "vision":
            status[f"{case}.processor_layout"] = processor_layout(d, p)
    path = os.path.join(d, "hf_status.json")       # earlier runs' other cases stay
    if os.path.exists(path):
        with open(path) as f:
            status = {**json.load(f), **status}
    with open(path, "w") as f:
        json.dump(status, f, indent=1)


def processor_layout(d, p):
    """transformers' MiniCPMV4_6Processor on the same texts and images: its input ids must be the
    engine's (placeholder expansion §6.2 and tokenization)."""
    try:
        from PIL import Image
        from transformers import AutoProcessor
        processor = AutoProcessor.from_pretrained(os.path.join(d, p["model"]))
        names, out = iter(p["images"]), []
        for (text, image_names), want in zip(VISION_PROMPTS, p["prompts"]):
            images = [Image.open(os.path.join(d, next(names))).convert("RGB") for _ in image_names]
            ids = processor(text=[text], images=images, return_tensors="pt")["input_ids"][0].tolist()
            out.append({"equal": ids == want, "ids": ids})
        return {"prompts": out}
    except Exception as e:  # noqa: BLE001 - reported by compare
        return {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}


def compare_features(d, case, a, b):
    fa, fb = os.path.join(d, f"{case}.{a}_features.json"), os.path.join(d, f"{case}.{b}_features.json")
    if not (os.path.exists(fa) and os.path.exists(fb)):
        return None
    ra, rb = ref_cli.read_feature_rows(fa), ref_cli.read_feature_rows(fb)
    if len(ra) != len(rb):
        return f"{len(ra)} vs {len(rb)} rows"
    return max(abs(x - y) for u, v in zip(ra, rb) for x, y in zip(u, v))


def compare(args):
    d = os.path.abspath(args.dir)
    failures, lines = [], []
    lines.append("| case | A | B | rows | top-1 | top-20 | max abs (top-20) | max abs (all) | max rel (top-20) "
                 "| KL max | greedy |")
    lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for case in args.cases:
        c = CASES[case]
        for a, b, bounds in c["pairs"]:
            pa, pb = os.path.join(d, f"{case}.{a}.json"), os.path.join(d, f"{case}.{b}.json")
            if not os.path.exists(pb) or not os.path.exists(pa):
                failures.append(f"{case}: {a} vs {b}: missing dump")
                continue
            with open(pa) as f:
                da = json.load(f)
            with open(pb) as f:
                db = json.load(f)
            metrics = compare_logprobs.compare(da, db)
            m = metrics["overall"]
            rows = sum(len(s["logprobs"]) for s in db["sequences"])
            lines.append(f"| {case} | {a} | {b} | {rows} | {m['top1']:.3f} | {m['top20_overlap']:.3f} | "
                         f"{m['max_abs_top20']:.2e} | {m['max_abs_full']:.2e} | {m['max_rel_top20']:.2e} | "
                         f"{m['kl_max']:.2e} | {'equal' if m['generated_match'] else 'differ'} |")
            if bounds:
                failures += [f"{case}: {a} vs {b}: {x}" for x in compare_logprobs.check_bounds(metrics, bounds)]
        if c["lengths"] == "vision":
            for a, b, bound in (("engine", "hf_float32_pil", FEATURES_F32), ("numpy", "hf_float64_pil", FEATURES_F32),
                                ("engine", "hf_float32_torchvision", None)):
                if all(f"hf_{dt}_{be}" != b for dt, be in c["hf"]):
                    continue
                diff = compare_features(d, case, a, b)
                lines.append(f"| {case} | {a} features | {b} features | | | | | "
                             f"{diff if isinstance(diff, str) or diff is None else f'{diff:.2e}'} | | | |")
                if bound is not None and (diff is None or isinstance(diff, str) or diff > bound):
                    failures.append(f"{case}: {a} vs {b} image features: {diff}")
    status_path = os.path.join(d, "hf_status.json")
    if os.path.exists(status_path):
        with open(status_path) as f:
            status = {k: v for k, v in json.load(f).items() if k.split(".")[0] in args.cases}
        for key in [k for k in status if k.endswith(".processor_layout")]:
            layout = status.pop(key)
            if "error" in layout:
                lines.append(f"note: {key}: transformers' MiniCPMV4_6Processor did not run: {layout['error']}")
                continue
            equal = [x["equal"] for x in layout["prompts"]]
            lines.append(f"{key}: transformers' MiniCPMV4_6Processor input ids equal to the engine's: {equal}")
            if not all(equal):
                failures.append(f"{key}: input ids differ from the engine's")
        for run_name, s in status.items():
            if "error" in s:
                failures.append(f"{run_name}: {s['error']}")
            elif not all(s["generate_consistent"]):
                lines.append(f"note: {run_name}: transformers' cached greedy ids are not the argmax of its full "
                             f"forward ({s['generate_consistent']})")
            for img in s.get("images") or []:
                lines.append(f"note: {run_name}: {os.path.basename(img['path'])} grid {img['grid']} tokens "
                             f"{img['tokens']} packed-call max abs {img['packed_features_max_abs']}")
        first = next(iter(status.values()))
        if "transformers" in first:
            lines.insert(0, f"transformers {first['transformers']}, torch {first['torch']}\n")
    print("\n".join(lines))
    for f in failures:
        print(f"FAIL {f}")
    sys.exit(1 if failures else 0)


def selftest(args):
    """The tool itself, without transformers (ctest): two cases prepared, the numpy reference's
    dumps standing in for transformers' must pass `compare`; one log-prob moved by 0.01 must fail."""
    import shutil
    import tempfile
    with tempfile.TemporaryDirectory(prefix="hf_crosscheck_") as d:
        args.dir = d
        selftest_in(args, d, shutil)


def selftest_in(args, d, shutil):
    args.cases = ["minicpm4_short", "minicpmv46_images"]
    prepare(args)
    for case in args.cases:
        for dtype, backend in CASES[case]["hf"]:
            tag = f"hf_{dtype}" + (f"_{backend}" if backend else "")
            shutil.copy(os.path.join(d, f"{case}.numpy.json"), os.path.join(d, f"{case}.{tag}.json"))
            if backend:
                shutil.copy(os.path.join(d, f"{case}.numpy_features.json"),
                            os.path.join(d, f"{case}.{tag}_features.json"))
    if run_compare(args) != 0:
        sys.exit("selftest: compare failed on dumps that must pass")
    path = os.path.join(d, "minicpm4_short.hf_float32.json")
    with open(path) as f:
        dump = json.load(f)
    dump["sequences"][1]["logprobs"][3][5] += 0.01
    with open(path, "w") as f:
        json.dump(dump, f)
    if run_compare(args) != 1:
        sys.exit("selftest: compare passed a dump with a log-prob moved by 0.01")
    print("selftest: PASS")


def run_compare(args):
    try:
        compare(args)
    except SystemExit as e:
        return e.code
    return 0


def run_all(args):
    prepare(args)
    hf(args)
    compare(args)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("phase", choices=("prepare", "hf", "compare", "selftest", "all"))
    p.add_argument("--dir", help="working folder (checkpoints, images, dumps); selftest uses a temporary one")
    p.add_argument("--cpmserve", default="build/cpmserve", help="prepare: the cpmserve binary")
    p.add_argument("--cases", default=None,
                   help="comma-separated subset of the cases (default: prepare all; hf and compare those prepared)")
    args = p.parse_args()
    if args.phase != "selftest" and not args.dir:
        p.error("--dir is required")
    if args.cases:
        args.cases = args.cases.split(",")
    elif args.phase in ("prepare", "selftest", "all"):
        args.cases = list(CASES)         # (selftest picks its own two)
    else:                                   # what `prepare` wrote
        with open(os.path.join(args.dir, "plan.json")) as f:
            prepared = json.load(f)
        args.cases = [c for c in CASES if c in prepared]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        p.error(f"unknown cases {unknown} (known: {', '.join(CASES)})")
    {"prepare": prepare, "hf": hf, "compare": compare, "selftest": selftest, "all": run_all}[args.phase](args)


if __name__ == "__main__":
    main()
