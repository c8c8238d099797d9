"""Engine-vs-reference checks for MiniCPMForCausalLM on tiny checkpoints (run by ctest).

Each scenario writes a tiny checkpoint with `cpmserve make-tiny`, runs prompts through
`cpmserve generate --dump-logprobs` (the batched paged-KV engine), runs the same prompts through
the independent numpy float64 reference (tests/reference/minicpm_ref.py), and applies the bounds
of issue 2 with tests/reference/compare_logprobs.py. Usage:
    reference_checks.py CPMSERVE_BINARY SCENARIO
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REF_DIR = os.path.join(HERE, "..", "reference")
sys.path.insert(0, REF_DIR)
import compare_logprobs  # noqa: E402
import ref_cli  # noqa: E402

F32_BOUNDS = {"max_abs_top20": 2e-3, "max_abs_full": 2e-3, "top1": 1.0, "top20_overlap": 1.0}
BF16_BOUNDS = {"max_rel_top20": 0.01}


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


class Scenario:
    def __init__(self, binary, tmp):
        self.binary = binary
        self.tmp = tmp

    def make_tiny(self, name, *flags, seed=0):
        d = os.path.join(self.tmp, name)
        run([self.binary, "make-tiny", "--arch", "minicpm4", d, "--seed", str(seed), *flags])
        return d

    def engine(self, model, prompts, generate, *flags, tag="eng"):
        out = os.path.join(self.tmp, f"{tag}.json")
        cmd = [self.binary, "generate", "--model", model, "--max-tokens", str(generate),
               "--dump-logprobs", out, "--all-positions", "--ignore-eos", "--threads", "2", *flags]
        for p in prompts:
            cmd += ["--prompt-ids", ",".join(map(str, p))]
        run(cmd)
        with open(out) as f:
            return json.load(f)

    def reference(self, model, prompts, generate, *flags, tag="ref", script="minicpm_ref.py"):
        out = os.path.join(self.tmp, f"{tag}.json")
        cmd = [sys.executable, os.path.join(REF_DIR, script), "--model", model,
               "--generate", str(generate), "--out", out, *flags]
        for p in prompts:
            cmd += ["--prompt-ids", ",".join(map(str, p))]
        run(cmd)
        with open(out) as f:
            return json.load(f)


# Entries within this many nats of the k-th place are numerically tied: their order is noise.
TIE_TOL = 1e-4


def check(name, engine_dump, ref_dump, bounds, need_same_tokens=True):
    metrics = compare_logprobs.compare(engine_dump, ref_dump, tie_tol=TIE_TOL)
    o = metrics["overall"]
    print(f"[{name}] rows={o['rows']} top1={o['top1']:.4f} top20={o['top20_overlap']:.4f} "
          f"max|dlogp|top20={o['max_abs_top20']:.3e} (median row {o['median_abs_top20']:.1e}) full={o['max_abs_full']:.3e} "
          f"rel_top20 max={o['max_rel_top20']:.3e} mean={o['mean_rel_top20']:.3e} "
          f"kl_max={o['kl_max']:.3e}")
    failures = []
    for key, bound in bounds.items():
        v = o[key]
        if key in ("top1", "top20_overlap", "top5_overlap"):
            if v < bound:
                failures.append(f"{key} = {v} < {bound}")
        elif v > bound:
            failures.append(f"{key} = {v:.3e} > {bound}")
    if need_same_tokens:
        for i, (e, r) in enumerate(zip(engine_dump["sequences"], ref_dump["sequences"])):
            if e["generated_ids"] != r["generated_ids"]:
                failures.append(f"sequence {i}: greedy tokens differ: {e['generated_ids']} vs {r['generated_ids']}")
    if failures:
        sys.exit(f"[{name}] FAILED:\n  " + "\n  ".join(failures))
    return metrics


def prompts_of(lengths, vocab=512, seed=1):
    # Deterministic pseudo-random ids (no numpy needed), avoiding the special ids 0..2.
    out, x = [], seed
    for n in lengths:
        p = []
        for _ in range(n):
            x = (x * 1103515245 + 12345) % (1 << 31)
            p.append(3 + x % (vocab - 3))
        out.append(p)
    return out


def scenario_f32_single(s):
    m = s.make_tiny("m", "--dtype", "float32")
    prompts = prompts_of([24])
    check("f32_single", s.engine(m, prompts, 8, "--dtype", "float32"),
          s.reference(m, prompts, 8), F32_BOUNDS)


def scenario_f32_batch_mixed(s):
    m = s.make_tiny("m", "--dtype", "float32", seed=3)
    prompts = prompts_of([1, 5, 33, 17, 2], seed=7)
    ref = s.reference(m, prompts, 6)
    check("f32_batch_mixed", s.engine(m, prompts, 6, "--dtype", "float32"), ref, F32_BOUNDS)
    # Prefill in chunks of 3 and 7: steps mix one sequence's prefill chunk with others' decodes.
    for chunk in (3, 7):
        check(f"f32_batch_chunk{chunk}",
              s.engine(m, prompts, 6, "--dtype", "float32", "--prefill-chunk", str(chunk), tag=f"c{chunk}"),
              ref, F32_BOUNDS)


def scenario_incremental_vs_oneshot(s):
    m = s.make_tiny("m", "--dtype", "float32", seed=5)
    prompts = prompts_of([20, 9], seed=11)
    oneshot = s.engine(m, prompts, 5, "--dtype", "float32", tag="oneshot")
    stepwise = s.engine(m, prompts, 5, "--dtype", "float32", "--prefill-chunk", "1", "--block-size", "4",
                        tag="stepwise")
    # Token-by-token decode through the cache equals one-shot prefill up to f32 rounding.
    check("incremental_vs_oneshot", stepwise, oneshot,
          {"max_abs_full": 1e-4, "top1": 1.0, "top20_overlap": 1.0})
    check("incremental_vs_reference", stepwise, s.reference(m, prompts, 5), F32_BOUNDS)


def scenario_long_positions(s):
    # The tiny config has original_max_position_embeddings 64 < max_position_embeddings 256.
    m = s.make_tiny("m", "--dtype", "float32", seed=9)
    prompts = prompts_of([100, 70], seed=13)
    # Default max_model_len 256 > 64: vLLM's rule takes the long factors for every position.
    check("long_factors", s.engine(m, prompts, 6, "--dtype", "float32"),
          s.reference(m, prompts, 6), F32_BOUNDS)
    # max_model_len 64: short factors.
    short = prompts_of([40, 58], seed=17)
    check("short_factors", s.engine(m, short, 4, "--dtype", "float32", "--max-model-len", "64", tag="short"),
          s.reference(m, short, 4, "--max-model-len", "64", tag="ref_short"), F32_BOUNDS)


def scenario_long_context(s):
    # Contexts past the attention's partitions of 1024 keys (kPartitionKeys), which are attended
    # as separate tasks and merged: prefill chunks whose rows straddle key 1024 and decodes past
    # it, every position's logprobs against the reference.
    m = s.make_tiny("m", "--dtype", "float32", seed=23)
    config = os.path.join(m, "config.json")
    with open(config) as f:
        c = json.load(f)
    c["max_position_embeddings"] = 2048
    with open(config, "w") as f:
        json.dump(c, f)
    prompts = prompts_of([1100, 1030], seed=37)
    check("long_context", s.engine(m, prompts, 4, "--dtype", "float32", "--prefill-chunk", "200"),
          s.reference(m, prompts, 4), F32_BOUNDS)


def scenario_storage_variants(s):
    prompts = prompts_of([12, 30], seed=19)
    for name, flags in (("bf16_storage", ["--dtype", "bfloat16"]),
                        ("f16_storage", ["--dtype", "float16"]),
                        ("sharded", ["--dtype", "float32", "--shards", "3"]),
                        ("untied", ["--dtype", "float32", "--untied"])):
        m = s.make_tiny(name, *flags, seed=21)
        check(name, s.engine(m, prompts, 5, "--dtype", "float32", tag=name),
              s.reference(m, prompts, 5, tag="ref_" + name), F32_BOUNDS)


def scenario_bf16_path(s):
    m = s.make_tiny("m", "--dtype", "bfloat16", seed=23)
    prompts = prompts_of([16, 40, 3], seed=29)
    eng = s.engine(m, prompts, 6, "--dtype", "bfloat16")
    # Against a reference that rounds to bf16 at HF's rounding points (the seed's comparison:
    # two bf16 implementations), the seed's bound holds: max relative error over top-20 < 1%.
    ref_bf16 = s.reference(m, prompts, 6, "--dtype", "bfloat16", tag="ref_bf16")
    check("bf16_vs_bf16_reference", eng, ref_bf16, BF16_BOUNDS, need_same_tokens=False)
    # Against float64 the distribution stays close (bf16 logits carry ~0.4% per-logit error).
    check("bf16_vs_f64_reference", eng, s.reference(m, prompts, 6, tag="ref_f64"),
          {"kl_max": 2e-2}, need_same_tokens=False)


def scenario_ternary_bitcpm(s):
    # BitCPM4-style checkpoints (ternary layer weights in bf16): the engine packs them as 2-bit
    # codes, and must match the bf16 reference as any bf16 checkpoint does, and its own bf16
    # kernels (CPM_TERNARY=0) exactly: decode at batch 3 and 1, prefill of 40 tokens.
    for scale in ("32", "row"):
        m = s.make_tiny("t" + scale, "--dtype", "bfloat16", "--ternary", scale, seed=37)
        for prompts in (prompts_of([16, 40, 3], seed=41), prompts_of([21], seed=43)):
            tag = f"{scale}_{len(prompts)}"
            env = dict(os.environ, CPM_TERNARY="1")
            p = subprocess.run([s.binary, "generate", "--model", m, "--prompt-ids", "5,6",
                                "--max-tokens", "1"], env=env, capture_output=True, text=True)
            if "Ternary weights (BitCPM4): 14 of 15" not in p.stderr:
                sys.exit(f"[ternary {scale}] the layers were not packed as ternary:\n{p.stderr}")
            eng = s.engine(m, prompts, 6, "--dtype", "bfloat16", tag="eng_" + tag)
            # Two bf16 implementations. With ternary weights a layer's sum s·Σ±x of bf16 values
            # often lies exactly halfway between two bf16 numbers, where f32 and float64
            # accumulation round apart: single logits move by up to ~1.6% here (real-valued
            # weights: ~1e-7, bf16_path). So the bounds are on the distribution and the mean;
            # the kernels' exactness is the next check's business.
            check(f"ternary_{tag}_vs_bf16_reference", eng,
                  s.reference(m, prompts, 6, "--dtype", "bfloat16", tag="ref_" + tag),
                  {"kl_max": 1e-3, "mean_rel_top20": 1e-3}, need_same_tokens=False)
            # The 2-bit kernels rebuild the very bf16 values, so each ISA's codes give its own
            # bf16 kernels' bits: the default ISA's (the AVX-512 codes on vdpbf16ps pairs where
            # the CPU has them, else the AVX2 ones) against CPM_TERNARY=0 there, then the AVX2
            # codes against the AVX2 bf16 kernels (the AVX-512 matmul off on both sides, as
            # vdpbf16ps rounds pairs of products differently from the AVX2 f32 FMA chains); AMX
            # off on both sides (on an Intel CPU with it the bf16 kernels' tiles sum in another
            # order), and the AVX-512 matmul pinned on where the CPU has it (its timed self-check
            # could pick either ISA per process where vdpbf16ps is barely the faster).
            os.environ["CPM_AMX"] = "0"
            os.environ["CPM_AVX512_MATMUL"] = "1"
            try:
                eng = s.engine(m, prompts, 6, "--dtype", "bfloat16", tag="eng_noamx_" + tag)
                os.environ["CPM_TERNARY"] = "0"
                default_bf16 = s.engine(m, prompts, 6, "--dtype", "bfloat16", tag="dbf16_" + tag)
            finally:
                os.environ.pop("CPM_TERNARY", None)
                del os.environ["CPM_AMX"]
                del os.environ["CPM_AVX512_MATMUL"]
            if eng != default_bf16:
                sys.exit(f"[ternary {tag}] the default ISA's 2-bit kernels differ from its bf16 kernels")
            os.environ["CPM_AVX512_MATMUL"] = "0"
            try:
                two_bit = s.engine(m, prompts, 6, "--dtype", "bfloat16", tag="avx2_" + tag)
                os.environ["CPM_TERNARY"] = "0"
                bf16 = s.engine(m, prompts, 6, "--dtype", "bfloat16", tag="bf16_" + tag)
            finally:
                os.environ.pop("CPM_TERNARY", None)
                del os.environ["CPM_AVX512_MATMUL"]
            if two_bit != bf16:
                sys.exit(f"[ternary {tag}] 2-bit kernels differ from the bf16 kernels")
            print(f"[ternary {tag}] identical to the bf16 kernels")


def scenario_q8_0(s):
    # --quantization q8_0 against the reference's own Q8_0 (tests/reference/q8_0.py, written
    # from the format's description): two implementations of one quantized model.
    m = s.make_tiny("q", "--dtype", "bfloat16", seed=47)
    prompts = prompts_of([16, 40, 3], seed=53)
    p = subprocess.run([s.binary, "generate", "--model", m, "--prompt-ids", "5,6", "--max-tokens",
                        "1", "--quantization", "q8_0"], capture_output=True, text=True)
    if "Quantized weights: 15 of 15 linear weights as Q8_0" not in p.stderr:
        sys.exit(f"[q8_0] the weights were not quantized:\n{p.stderr}")
    # f32 activations: the two sides' inputs to each quantization are ~1 ulp apart, and land on
    # different sides of a rounding boundary about once in 10^6 values: here never (~1e-6).
    eng32 = s.engine(m, prompts, 6, "--dtype", "float32", "--quantization", "q8_0",
                     tag="eng_q8_f32")
    check("q8_0_f32_vs_q8_0_f64_reference", eng32,
          s.reference(m, prompts, 6, "--quantization", "q8_0", tag="ref_q8_f64"),
          {"max_abs_top20": 1e-4, "top1": 1.0})
    # bf16 activations: x · 127/amax of bf16 values is often exactly k + 1/2, so a value one bf16
    # step apart on the two sides (an f32 SiLU rounding apart from a float64 one, an f32 sum
    # from a float64 one: both still match within 2e-7 unquantized, bf16_path) takes the other
    # integer, and a quantization step moves the row's next logits by ~2% (seen at 10 of 74
    # rows, one flip each, traced layer by layer). Bounds on the distribution, as for ternary.
    eng = s.engine(m, prompts, 6, "--dtype", "bfloat16", "--quantization", "q8_0", tag="eng_q8")
    check("q8_0_bf16_vs_q8_0_bf16_reference", eng,
          s.reference(m, prompts, 6, "--dtype", "bfloat16", "--quantization", "q8_0",
                      tag="ref_q8_bf16"),
          {"kl_max": 1e-4, "mean_rel_top20": 2e-3, "top1": 1.0}, need_same_tokens=False)
    # What quantizing costs, against the unquantized float64 model: a bound wide enough for a
    # random tiny model (real checkpoints: `cpmserve eval logits -q q8_0` against a reference).
    check("q8_0_bf16_vs_f64_reference", eng, s.reference(m, prompts, 6, tag="ref_f64"),
          {"kl_max": 2e-2}, need_same_tokens=False)


def scenario_hybrid_bf16(s):
    # MiniCPM-V-4.6's language model in bf16 against qwen35_ref.py's bf16 mode, which rounds at
    # HF's points (the convolution before SiLU, beta, every RoPE product and sum, ...): the same
    # points give rows within f32 noise (median ~4e-7 when this check was written); one point
    # rounded elsewhere gave a median of 0.1-0.6 nats on this tiny model (its gains of 2-3 per
    # layer magnify a bf16 step), so the bound is on the median row, as the Q8_0 check's.
    d = os.path.join(s.tmp, "v46b")
    run([s.binary, "make-tiny", "--arch", "minicpmv4_6", d])
    prompts = prompts_of([3, 9, 24, 40], vocab=700, seed=41)
    eng = s.engine(d, prompts, 3, "--dtype", "bfloat16", "--prefill-chunk", "16", tag="v46_bf16")
    ref = s.reference(d, prompts, 3, "--dtype", "bfloat16", tag="v46_bf16_ref",
                      script="qwen35_ref.py")
    check("hybrid_bf16_vs_bf16_reference", eng, ref, {"median_abs_top20": 1e-5},
          need_same_tokens=False)


def scenario_hybrid_q8_0(s):
    # MiniCPM-V-4.6's language model under --quantization q8_0 against qwen35_ref.py's own Q8_0:
    # every projection and the head quantized but the Gated DeltaNet's in_proj_a/b (2 of each
    # linear layer's 5, kept as the checkpoint's), on both sides.
    d = os.path.join(s.tmp, "v46q")
    run([s.binary, "make-tiny", "--arch", "minicpmv4_6", d])
    p = subprocess.run([s.binary, "generate", "--model", d, "--prompt-ids", "5,6", "--max-tokens",
                        "1", "--quantization", "q8_0"], capture_output=True, text=True)
    if "Quantized weights: 51 of 63 linear weights as Q8_0" not in p.stderr:
        sys.exit(f"[hybrid_q8_0] not the expected weights quantized:\n{p.stderr}")
    # Short prompts, batched, and one long one prefilled in chunks. An activation within an f32
    # ulp or so of a rounding boundary k + 1/2 may quantize to the other integer on one side; in
    # this tiny model (gains of 2-3 per layer, so that bugs show) the step it moves then grows
    # to ~0.1-0.3 nats over the sequence's later rows. Seen in 2-25% of rows; so the bound is
    # on the median row: 1.2-1.5e-6 here, where leaving any one kind of weight unquantized on
    # the reference's side (in_proj_z, q_proj, o_proj, the head) gives 5e-2 to 1.3 and no row
    # within 1e-4 (measured when this check was written).
    prompts = prompts_of([3, 4, 5, 6, 7, 8, 9, 10, 20], vocab=700, seed=37)
    eng = s.engine(d, prompts, 3, "--dtype", "float32", "--prefill-chunk", "8",
                   "--quantization", "q8_0", tag="v46_q8")
    ref = s.reference(d, prompts, 3, "--quantization", "q8_0", tag="v46_q8_ref",
                      script="qwen35_ref.py")
    check("hybrid_q8_0_f32_vs_q8_0_f64_reference", eng, ref, {"median_abs_top20": 1e-5},
          need_same_tokens=False)
    # And against the unquantized model the typical row is far off: quantization took effect.
    plain = s.reference(d, prompts, 3, tag="v46_ref", script="qwen35_ref.py")
    moved = compare_logprobs.compare(eng, plain, tie_tol=TIE_TOL)["overall"]["median_abs_top20"]
    if moved < 1e-2:
        sys.exit(f"[hybrid_q8_0] the median row moved only {moved:.2e} from the unquantized model")
    print(f"ok: quantization moved the hybrid's median row by {moved:.2e}")


def expect_failure(cmd, *needles):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode == 0 or p.returncode < 0:
        sys.exit(f"expected a clean non-zero exit, got {p.returncode}: {' '.join(cmd)}\n{p.stderr}")
    for n in needles:
        if n not in p.stderr:
            sys.exit(f"'{n}' missing from the error of {' '.join(cmd)}:\n{p.stderr}")
    print(f"ok ({p.returncode}): {p.stderr.strip().splitlines()[-1]}")


def scenario_cli_errors(s):
    m = s.make_tiny("m", "--dtype", "float32")
    gen = [s.binary, "generate", "--prompt-ids", "1,2,3", "--max-tokens", "2"]
    expect_failure(gen + ["--model", os.path.join(s.tmp, "missing")], "config.json")
    with open(os.path.join(m, "config.json")) as f:
        cfg = json.load(f)
    cfg["num_hidden_layers"] = 3  # the checkpoint has 2
    with open(os.path.join(m, "config.json"), "w") as f:
        json.dump(cfg, f)
    expect_failure(gen + ["--model", m], "model.safetensors", "model.layers.2.")
    cfg["num_hidden_layers"] = 2
    cfg["architectures"] = ["MysteryForCausalLM"]
    with open(os.path.join(m, "config.json"), "w") as f:
        json.dump(cfg, f)
    expect_failure(gen + ["--model", m], "MysteryForCausalLM")
    cfg["architectures"] = ["MiniCPMForCausalLM"]
    with open(os.path.join(m, "config.json"), "w") as f:
        json.dump(cfg, f)
    st = os.path.join(m, "model.safetensors")
    with open(st, "r+b") as f:
        f.truncate(os.path.getsize(st) // 2)
    expect_failure(gen + ["--model", m], "model.safetensors", "truncated")
    m2 = s.make_tiny("m2", "--dtype", "float32")
    expect_failure([s.binary, "generate", "--model", m2, "--prompt-ids", "1,x"], "prompt-ids")
    expect_failure([s.binary, "generate", "--model", m2, "--prompt-ids", "1,99999"], "vocabulary")
    # vLLM's sampling ranges: 0 < top_p <= 1, 0 <= min_p <= 1.
    expect_failure([s.binary, "generate", "--model", m2, "--prompt-ids", "1,2", "--top-p", "0"], "top_p must be in (0, 1]")
    expect_failure([s.binary, "generate", "--model", m2, "--prompt-ids", "1,2", "--min-p", "2"], "--min-p")
    # make-tiny --dims-of: MiniCPM4 / BitCPM4 / MiniCPM-V-4.6 configs, every shape from there.
    tiny = [s.binary, "make-tiny", os.path.join(s.tmp, "dims")]
    cfg["architectures"] = ["Qwen3_5ForCausalLM"]
    with open(os.path.join(m, "config.json"), "w") as f:
        json.dump(cfg, f)
    expect_failure(tiny + ["--dims-of", m], os.path.join(m, "config.json"), "'architectures'")
    expect_failure(tiny + ["--dims-of", os.path.join(s.tmp, "missing")],
                   os.path.join("missing", "config.json"))
    expect_failure(tiny + ["--dims-of", m2, "--real-heads"], "--dims-of")
    expect_failure(tiny + ["--dims-of", m2, "--arch", "minicpm4"], "--dims-of")
    expect_failure(tiny + ["--dims-of", os.path.join(SHARED_MODELS, "MiniCPM-V-4.6"), "--ternary", "row"],
                   "ternary")
    expect_failure(tiny + ["--dims-of", ""], "--dims-of")
    expect_failure([s.binary, "make-tiny", m2, "--dims-of", os.path.join(SHARED_MODELS, "MiniCPM4-0.5B")],
                   m2, "not empty")
    with open(os.path.join(m, "config.json"), "w") as f:
        f.write("{bad")
    expect_failure(tiny + ["--dims-of", m], os.path.join(m, "config.json"), "not valid JSON")
    # A checkpoint written again into its folder replaces the earlier one's shards and index.
    resharded = s.make_tiny("m2", "--dtype", "float32", "--shards", "2")
    s.make_tiny("m2", "--dtype", "float32", seed=5)
    left = sorted(f for f in os.listdir(resharded) if "safetensors" in f)
    if left != ["model.safetensors"]:
        sys.exit(f"make-tiny over a sharded checkpoint left {left}")


def scenario_hybrid_generate(s):
    # MiniCPM-V-4.6's hybrid text model through the same batched generator (state slots).
    d = os.path.join(s.tmp, "v46")
    run([s.binary, "make-tiny", "--arch", "minicpmv4_6", d])
    prompts = prompts_of([9, 30], vocab=700, seed=31)
    eng = s.engine(d, prompts, 4, "--dtype", "float32", "--prefill-chunk", "8", tag="v46")
    out = os.path.join(s.tmp, "v46_ref.json")
    cmd = [sys.executable, os.path.join(REF_DIR, "qwen35_ref.py"), "--model", d, "--generate", "4", "--out", out]
    for p in prompts:
        cmd += ["--prompt-ids", ",".join(map(str, p))]
    run(cmd)
    with open(out) as f:
        ref = json.load(f)
    check("hybrid_generate", eng, ref, F32_BOUNDS)


def write_test_image(path, w, h, seed):
    """An opaque RGB image of LCG noise (no numpy needed)."""
    from PIL import Image
    x, pixels = seed, []
    for _ in range(w * h):
        x = (x * 1103515245 + 12345) % (1 << 31)
        pixels.append(((x >> 8) & 255, (x >> 16) & 255, (x >> 4) & 255))
    img = Image.new("RGB", (w, h))
    img.putdata(pixels)
    img.save(path)
    return path


def check_features(name, eng_path, ref_path, bound=1e-5):
    """The engine's image feature rows (--dump-image-features) against the reference's
    (--features-out), row by row; returns the reference rows."""
    eng_feats, ref_feats = ref_cli.read_feature_rows(eng_path), ref_cli.read_feature_rows(ref_path)
    if len(eng_feats) != len(ref_feats):
        sys.exit(f"[{name}] FAILED: {len(eng_feats)} feature rows vs {len(ref_feats)}")
    worst = max(abs(a - b) for er, rr in zip(eng_feats, ref_feats) for a, b in zip(er, rr))
    print(f"[{name}] image features: {len(eng_feats)} rows, max |diff| {worst:.3e}")
    if worst > bound:
        sys.exit(f"[{name}] FAILED: image features differ by {worst:.3e} > {bound}")
    return ref_feats


def scenario_vision_generate(s):
    # MiniCPM-V-4.6 with images: preprocessing (PIL-exact slicing), the vision tower and mergers,
    # the placeholder layout and the embeddings' rows, against the numpy reference
    # (minicpmv46_vision_ref.py), one prompt with one image and one with two; prefill chunks of
    # 50 tokens cut through the image rows.
    d = os.path.join(s.tmp, "v46")
    run([s.binary, "make-tiny", "--arch", "minicpmv4_6", d])
    images = [write_test_image(os.path.join(s.tmp, f"img{i}.png"), w, h, seed=7 + i)
              for i, (w, h) in enumerate([(200, 150), (900, 500), (60, 400)])]
    prompts = ["<|im_start|>user\n<|image_pad|>\nWhat is this?<|im_end|>\n<|im_start|>assistant\n",
               "<|im_start|>user\n<|image_pad|>\n<|image_pad|>\nCompare.<|im_end|>\n<|im_start|>assistant\n"]
    out = os.path.join(s.tmp, "vis_eng.json")
    feats_out = os.path.join(s.tmp, "vis_eng_features.json")
    cmd = [s.binary, "generate", "--model", d, "--dtype", "float32", "--max-tokens", "4",
           "--dump-logprobs", out, "--all-positions", "--ignore-eos", "--threads", "2",
           "--prefill-chunk", "50", "--dump-image-features", feats_out]
    for p in prompts:
        cmd += ["--prompt", p]
    for path in images:
        cmd += ["--image", path]
    run(cmd)
    with open(out) as f:
        eng = json.load(f)
    ref_out = os.path.join(s.tmp, "vis_ref.json")
    ref_feats_out = os.path.join(s.tmp, "vis_ref_features.json")
    cmd = [sys.executable, os.path.join(REF_DIR, "minicpmv46_vision_ref.py"), "--model", d,
           "--generate", "4", "--images-per-prompt", "1,2", "--out", ref_out,
           "--features-out", ref_feats_out]
    for path in images:
        cmd += ["--image", path]
    for seq in eng["sequences"]:
        cmd += ["--prompt-ids", ",".join(map(str, seq["prompt_ids"]))]
    run(cmd)
    with open(ref_out) as f:
        ref = json.load(f)
    with open(os.path.join(d, "config.json")) as f:
        pad_id = json.load(f)["image_token_id"]
    pads = [seq["prompt_ids"].count(pad_id) for seq in eng["sequences"]]
    print(f"image placeholder tokens per prompt: {pads}")
    # The image features themselves (the vision tower and mergers, f32 vs float64).
    ref_feats = check_features("vision_generate", feats_out, ref_feats_out)
    check("vision_generate", eng, ref, F32_BOUNDS)
    # The bf16 tower (weights, activations and attention in bf16, as a bf16 PyTorch model runs
    # it): the same features within bf16 precision.
    bf16_feats = os.path.join(s.tmp, "vis_bf16_features.json")
    run([s.binary, "generate", "--model", d, "--dtype", "bfloat16", "--max-tokens", "1", "--threads", "2",
         "--dump-image-features", bf16_feats, "--prompt", prompts[0], "--image", images[0]])
    got = ref_cli.read_feature_rows(bf16_feats)  # the one prompt's rows
    want = ref_feats[:len(got)]
    scale = max(abs(v) for row in want for v in row)
    worst = max(abs(a - b) for gr, wr in zip(got, want) for a, b in zip(gr, wr))
    print(f"[vision_generate] bf16 image features: max |diff| {worst:.3e} (features up to {scale:.3f})")
    if len(got) != len(want) or worst > 0.03 * scale:
        sys.exit(f"[vision_generate] FAILED: bf16 features differ by {worst:.3e} > 3% of {scale:.3f}")


def scenario_vision_4x(s):
    # MiniCPM-V-4.6's 4x downsample mode (vLLM's downsample_mode, per request or from the
    # preprocessor config): no ViT merger, every encoder layer on the full patch grid, four times
    # the placeholder tokens; features and logits against the reference's 4x path.
    d = os.path.join(s.tmp, "v46_4x")
    run([s.binary, "make-tiny", "--arch", "minicpmv4_6", d])
    pp_path = os.path.join(d, "preprocessor_config.json")
    with open(pp_path) as f:
        pp = json.load(f)
    pp["downsample_mode"] = "4x"
    with open(pp_path, "w") as f:
        json.dump(pp, f)
    image = write_test_image(os.path.join(s.tmp, "img4x.png"), 300, 180, seed=11)
    prompt = "<|im_start|>user\n<|image_pad|>\nWhat is this?<|im_end|>\n<|im_start|>assistant\n"
    out = os.path.join(s.tmp, "vis4x_eng.json")
    feats_out = os.path.join(s.tmp, "vis4x_eng_features.json")
    run([s.binary, "generate", "--model", d, "--dtype", "float32", "--max-tokens", "3",
         "--dump-logprobs", out, "--all-positions", "--ignore-eos", "--threads", "2",
         "--dump-image-features", feats_out, "--prompt", prompt, "--image", image])
    with open(out) as f:
        eng = json.load(f)
    ref_out = os.path.join(s.tmp, "vis4x_ref.json")
    ref_feats_out = os.path.join(s.tmp, "vis4x_ref_features.json")
    run([sys.executable, os.path.join(REF_DIR, "minicpmv46_vision_ref.py"), "--model", d,
         "--generate", "3", "--images-per-prompt", "1", "--out", ref_out,
         "--features-out", ref_feats_out, "--image", image,
         "--prompt-ids", ",".join(map(str, eng["sequences"][0]["prompt_ids"]))])
    with open(ref_out) as f:
        ref = json.load(f)
    with open(os.path.join(d, "config.json")) as f:
        pad_id = json.load(f)["image_token_id"]
    pads = eng["sequences"][0]["prompt_ids"].count(pad_id)
    print(f"[vision_4x] image placeholder tokens: {pads}")
    check_features("vision_4x", feats_out, ref_feats_out)
    check("vision_4x", eng, ref, F32_BOUNDS)


def scenario_real_heads(s):
    # The released models' head shapes (`make-tiny --real-heads`): MiniCPM4 heads of 64 with 8
    # query heads per KV head, LongRoPE over 32 frequency pairs, short and long factors, f32
    # and bf16 weights; MiniCPM-V-4.6 full-attention heads of 256 (4 per KV head, 64 rotary
    # dims) and Gated DeltaNet heads of 128 across a 64-token chunk boundary.
    m = s.make_tiny("m4", "--dtype", "float32", "--real-heads", seed=41)
    short = prompts_of([1, 40, 61], vocab=800, seed=43)
    check("real_heads_short_factors",
          s.engine(m, short, 3, "--dtype", "float32", "--max-model-len", "64", tag="m4_short"),
          s.reference(m, short, 3, "--max-model-len", "64", tag="m4_short_ref"), F32_BOUNDS)
    long = prompts_of([150, 90], vocab=800, seed=47)
    check("real_heads_long_factors", s.engine(m, long, 4, "--dtype", "float32", "--prefill-chunk", "64", tag="m4_long"),
          s.reference(m, long, 4, tag="m4_long_ref"), F32_BOUNDS)
    # bf16: the top logits here lie mostly in 4-8, where a bf16 ulp is 2^-5, and two bf16 programs whose
    # pre-rounding logits differ in the last bits land an ulp or two apart (measured: every top-20
    # difference a multiple of 2^-6). So the bound is 3 ulps in log-prob, not the tiny model's 1%
    # relative error (its logits stay near 2).
    mb = s.make_tiny("m4_bf16", "--dtype", "bfloat16", "--real-heads", seed=53)
    check("real_heads_bf16", s.engine(mb, short, 3, "--dtype", "bfloat16", "--max-model-len", "64", tag="m4_bf16"),
          s.reference(mb, short, 3, "--max-model-len", "64", "--dtype", "bfloat16", tag="m4_bf16_ref"),
          {"max_abs_top20": 3 * 2 ** -5, "kl_max": 2e-3}, need_same_tokens=False)
    v = os.path.join(s.tmp, "v46")
    run([s.binary, "make-tiny", "--arch", "minicpmv4_6", "--dtype", "float32", "--real-heads", v])
    prompts = prompts_of([5, 130], vocab=700, seed=59)
    check("real_heads_hybrid", s.engine(v, prompts, 4, "--dtype", "float32", "--prefill-chunk", "50", tag="v46"),
          s.reference(v, prompts, 4, tag="v46_ref", script="qwen35_ref.py"), F32_BOUNDS)


def scenario_real_heads_vision(s):
    # MiniCPM-V-4.6's vision path at its real head size (72) and position grid (70 x 70, so the
    # buckets of a 32-patch slice fall between table rows as they do in the released model).
    v = os.path.join(s.tmp, "v46")
    run([s.binary, "make-tiny", "--arch", "minicpmv4_6", "--dtype", "float32", "--real-heads", v])
    image = write_test_image(os.path.join(s.tmp, "wide.png"), 700, 330, seed=11)
    prompt = "<|im_start|>user\n<|image_pad|>\nDescribe it.<|im_end|>\n<|im_start|>assistant\n"
    out, feats = os.path.join(s.tmp, "eng.json"), os.path.join(s.tmp, "eng_features.json")
    run([s.binary, "generate", "--model", v, "--dtype", "float32", "--max-tokens", "3", "--dump-logprobs", out,
         "--all-positions", "--ignore-eos", "--threads", "2", "--dump-image-features", feats,
         "--prompt", prompt, "--image", image])
    with open(out) as f:
        eng = json.load(f)
    ref_out, ref_feats = os.path.join(s.tmp, "ref.json"), os.path.join(s.tmp, "ref_features.json")
    run([sys.executable, os.path.join(REF_DIR, "minicpmv46_vision_ref.py"), "--model", v, "--image", image,
         "--generate", "3", "--out", ref_out, "--features-out", ref_feats,
         "--prompt-ids", ",".join(map(str, eng["sequences"][0]["prompt_ids"]))])
    with open(ref_out) as f:
        ref = json.load(f)
    check_features("real_heads_vision", feats, ref_feats)
    check("real_heads_vision", eng, ref, F32_BOUNDS)


SHARED_MODELS = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "models"))


def folded(dump):
    """The dump with each sequence's generated tokens folded into its prompt (teacher forcing):
    one reference forward then scores every row, where rerunning it for each generated token
    would take minutes at the released sizes; top-1 agreement on every row is greedy agreement."""
    return {"sequences": [{"prompt_ids": q["prompt_ids"] + q["generated_ids"][:-1],
                           "generated_ids": [], "logprobs": q["logprobs"]}
                          for q in dump["sequences"]]}


def released_dims_check(s, name, release, vocab, script):
    """The engine on random weights at `release`'s dimensions (`make-tiny --dims-of` on the
    published config and tokenizer files) against the numpy reference `script`: a 40-token
    prompt prefilled in chunks of 13 (paged attention across blocks, recurrent state carried
    between chunks) and 6 decoded tokens (the decode kernels), in float32 and bfloat16."""
    m = os.path.join(s.tmp, name)
    run([s.binary, "make-tiny", "--dims-of", os.path.join(SHARED_MODELS, release), m, "--seed", "67"])
    prompts = prompts_of([40], vocab=vocab, seed=61)
    refs = {}

    def reference(dump, dtype):  # over the dump's own (folded) tokens, each run once
        ids = dump["sequences"][0]["prompt_ids"]
        if (tuple(ids), dtype) not in refs:
            refs[(tuple(ids), dtype)] = s.reference(m, [ids], 0, "--dtype", dtype, script=script,
                                                    tag=f"{name}_ref_{dtype}_{len(refs)}")
        return refs[(tuple(ids), dtype)]

    f32 = folded(s.engine(m, prompts, 6, "--dtype", "float32", "--prefill-chunk", "13", tag=f"{name}_f32"))
    check(f"{name}_f32", f32, reference(f32, "float64"), F32_BOUNDS)
    # bf16: random weights at this depth amplify rounding (the bf16-emulating reference itself
    # lands 1e-2 to 1e-1 nats of KL from float64), so the bf16 engine is held to that reference's
    # own distance from float64 over the same rows (its own generated tokens, so that the decode
    # rows always count): a bf16 engine as faithful as a bf16 PyTorch model. Top-1 in rows: a
    # row or two either way is one near-tie at this chaos.
    bf16 = folded(s.engine(m, prompts, 6, "--dtype", "bfloat16", "--prefill-chunk", "13", tag=f"{name}_bf16"))
    ref64 = reference(bf16, "float64")
    engine = compare_logprobs.compare(bf16, ref64, tie_tol=TIE_TOL)["overall"]
    emulated = compare_logprobs.compare(reference(bf16, "bfloat16"), ref64, tie_tol=TIE_TOL)["overall"]
    rows = engine["rows"]
    missed, missed_emulated = round((1 - engine["top1"]) * rows), round((1 - emulated["top1"]) * rows)
    print(f"[{name}_bf16] against float64 over {rows} rows: engine kl_mean={engine['kl_mean']:.3e}, "
          f"top-1 missed in {missed} rows; bf16 reference kl_mean={emulated['kl_mean']:.3e}, "
          f"in {missed_emulated}")
    if engine["kl_mean"] > 2 * emulated["kl_mean"] or missed > missed_emulated + 3:
        sys.exit(f"[{name}_bf16] FAILED: the bf16 engine is further from float64 than the bf16 "
                 "reference allows (twice its mean KL, three more top-1 misses)")


def scenario_released_dims(s):
    # MiniCPM4-0.5B: 24 layers, hidden 1024, FFN 4096, 16 query heads of 64 over 2 KV heads,
    # LongRoPE's 32 factor pairs, muP scalings, a 73448-token tied head (its last panel partial).
    released_dims_check(s, "minicpm4", "MiniCPM4-0.5B", 73448, "minicpm_ref.py")
    # BitCPM4-0.5B (the same dimensions, ternary layers with a scale per row): the 2-bit kernels
    # rebuild the very bf16 values, so the run equals the bf16 kernels' (CPM_TERNARY=0) bit for bit.
    m = os.path.join(s.tmp, "bitcpm4")
    run([s.binary, "make-tiny", "--dims-of", os.path.join(SHARED_MODELS, "MiniCPM4-0.5B"), m,
         "--ternary", "row", "--seed", "71"])
    p = subprocess.run([s.binary, "generate", "--model", m, "--prompt-ids", "5,6", "--max-tokens", "1"],
                       capture_output=True, text=True)
    if "Ternary weights (BitCPM4): 168 of 169" not in p.stderr:
        sys.exit(f"[released_dims] BitCPM4: the layers were not packed as ternary:\n{p.stderr}")
    # Both sides on vdpbf16ps: on an AMX CPU the bf16 kernels' tiles sum in another order, and
    # where vdpbf16ps is barely faster than AVX2's FMAs (a Xeon VM: 103 against 90 GFLOP/s) each
    # process's timed self-check could pick either, so the choice is pinned.
    prompts = prompts_of([40], vocab=73448, seed=73)
    os.environ["CPM_AMX"] = "0"
    os.environ["CPM_AVX512_MATMUL"] = "1"
    try:
        two_bit = s.engine(m, prompts, 6, "--prefill-chunk", "13", tag="bitcpm4_2bit")
        os.environ["CPM_TERNARY"] = "0"
        bf16 = s.engine(m, prompts, 6, "--prefill-chunk", "13", tag="bitcpm4_bf16")
    finally:
        os.environ.pop("CPM_TERNARY", None)
        del os.environ["CPM_AMX"]
        del os.environ["CPM_AVX512_MATMUL"]
    if two_bit != bf16:
        sys.exit("[released_dims] BitCPM4: the 2-bit kernels differ from the bf16 kernels")
    print("[released_dims] BitCPM4: the 2-bit kernels' run is the bf16 kernels' bit for bit")


def scenario_released_dims_hybrid(s):
    # MiniCPM-V-4.6's language model: 18 Gated DeltaNet layers (16 + 16 heads of 128, a 4-tap
    # convolution) and 6 gated full-attention layers (8 query heads of 256 over 2 KV heads, 64
    # rotary dims), FFN 3584, a 248094-token tied head; the vision tower is written and loaded
    # at its size too (27 layers of 1152), though this text-only prompt does not run it.
    released_dims_check(s, "minicpmv46", "MiniCPM-V-4.6", 248094, "qwen35_ref.py")


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items() if name.startswith("scenario_")}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in SCENARIOS:
        sys.exit(f"usage: {sys.argv[0]} CPMSERVE SCENARIO  (scenarios: {', '.join(SCENARIOS)})")
    with tempfile.TemporaryDirectory(prefix="cpm_ref_") as tmp:
        SCENARIOS[sys.argv[2]](Scenario(sys.argv[1], tmp))
    print("PASS")


if __name__ == "__main__":
    main()
