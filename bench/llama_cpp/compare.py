#!/usr/bin/env python3
"""cpmserve against llama.cpp on this machine, in one run: prefill, decode and serving speed.

Published llama.cpp figures come from other machines; this measures both engines here, on the
same model dimensions (dummy bf16 weights), the same thread count and the same tests, in
interleaved rounds (the order alternates, so a noisy neighbour's minutes fall on both), and
reports each engine's best run and the ratio cpmserve / llama.cpp:
- ppN:         a prompt of N tokens into an empty cache
               (`cpmserve bench --pp N`, `llama-bench -p N`);
- tgN batch 1: N tokens decoded for one sequence (`cpmserve bench --tg N`, `llama-bench -n N`);
- tgN batch B: B sequences decoding N tokens each, tokens/s summed over them
               (`cpmserve bench --batch B`, `llama-batched-bench -npp 1 -ntg N -npl B`);
- with --depth D, each test after D tokens already in every sequence's cache (long contexts:
               `cpmserve bench --depth D`, `llama-bench -d D`, `llama-batched-bench -npp D`);
- serving:     with --serve, each engine's OpenAI server (`cpmserve serve`, `llama-server` with
               one slot per stream) under `cpmserve bench serve` (vLLM's `bench serve` metrics):
               --concurrency streams of random prompts; output tokens/s, median TTFT/TPOT/ITL.
--ternary: BitCPM4-0.5B, the layers ternary (cpmserve's dummy ternary weights, llama.cpp's TQ2_0).
--q8: both engines on Q8_0 weights (`cpmserve bench -q q8_0`; a Q8_0 GGUF, embedding included).
llama.cpp runs with its fastest settings found here (weights read into memory, `-lm none`,
rather than mmap: +10-15% decode); both engines use their default attention.

llama.cpp itself: give `--llama-bin DIR` (with llama-bench, llama-batched-bench and
llama-server), or let this script build it in --work from the llama.cpp source that the npm
package node-llama-cpp carries (a git bundle of a tagged release; the npm registry is reachable
where Debian's apt is), with GGML_NATIVE for this CPU (`--llama-no-amx`: a second build without
its AMX kernels, for VMs where they die with SIGILL). The GGUF comes from make_gguf.py.

Usage (repository root, after scripts/build.sh; the first run builds llama.cpp, ~10 min on 2
cores): bench/llama_cpp/compare.py [--rounds 3] [--serve] [--depth D] [--ternary | --q8]
[--llama-no-amx] [--json out.json]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NODE_LLAMA_CPP = "node-llama-cpp@3.22.1"  # carries llama.cpp's release v0.5.0 (build de3ff81)
LLAMA_TOOLS = ["llama-bench", "llama-batched-bench", "llama-server"]
# Runs of each test per round and engine, the best kept: the first of cpmserve's also warms its
# caches and pages up (llama-bench has a warm-up run of its own; llama-batched-bench runs each
# batch size this many times).
REPEATS = 2


def run(cmd, **kw):
    """Runs `cmd`, returns its stdout; on failure exits with its stderr's tail."""
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"compare: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout


# ---- llama.cpp: source from the npm registry, built here ----

# llama.cpp's AMX int8 kernels (its Q8_0 and other quantized types on Sapphire Rapids and later)
# die with SIGILL at their first tile load on some VMs (2 vCPUs of a Xeon with AMX: a tileloadd
# in libggml-cpu's prompt path, v0.5.0), while its bf16 path never uses AMX. --llama-no-amx
# builds it a second time with GCC's AMX flags off (explicit -mno-* win over -march=native).
NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def build_llama_cpp(work, no_amx=False):
    """bin directory of a native Release build of llama.cpp's benchmarks, built once in `work`."""
    src = os.path.join(work, "llama.cpp")
    build = os.path.join(src, "build-no-amx" if no_amx else "build")
    bin_dir = os.path.join(build, "bin")
    if all(os.path.exists(os.path.join(bin_dir, t)) for t in LLAMA_TOOLS):
        return bin_dir
    if not os.path.isdir(src):
        with tempfile.TemporaryDirectory() as tmp:
            print(f"compare: fetching llama.cpp's source from npm ({NODE_LLAMA_CPP})", flush=True)
            tgz = run(["npm", "pack", NODE_LLAMA_CPP, "--silent"], cwd=tmp).strip().splitlines()[-1]
            with tarfile.open(os.path.join(tmp, tgz)) as tar:
                tar.extract("package/llama/gitRelease.bundle", tmp)
            run(["git", "clone", "--quiet", os.path.join(tmp, "package/llama/gitRelease.bundle"),
                 src])
    print(f"compare: building llama.cpp ({', '.join(LLAMA_TOOLS)})", flush=True)
    launcher = ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    run(["cmake", "-S", src, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
         "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
         "-DLLAMA_BUILD_EXAMPLES=OFF"] + (launcher if shutil.which("ccache") else []) +
        ([f"-DCMAKE_C_FLAGS={NO_AMX_FLAGS}", f"-DCMAKE_CXX_FLAGS={NO_AMX_FLAGS}"]
         if no_amx else []))
    run(["ninja", "-C", build] + LLAMA_TOOLS)
    return bin_dir


def make_gguf(a):
    kind = "tq2_0" if a.ternary else "q8_0" if a.q8 else "bf16"
    out = os.path.join(a.work, f"{os.path.basename(os.path.normpath(a.model))}-dummy-{kind}.gguf")
    if not os.path.exists(out):
        run([sys.executable, os.path.join(HERE, "make_gguf.py"), "--model", a.model, "--out", out]
            + (["--ternary"] if a.ternary else []) + (["--q8"] if a.q8 else []))
    return out


# ---- one round of each engine: {test name: tokens/s} ----

def test_name(kind, n, batch=1, depth=0):
    name = f"pp{n}" if kind == "pp" else f"tg{n} batch {batch}"
    return name + (f" @ d{depth}" if depth else "")


def run_cpmserve(a):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        run([a.cpmserve, "bench", "--model", a.model, "--skip-limits", "--repeats", str(REPEATS),
             "--threads", str(a.threads), "--pp"] + [str(p) for p in a.pp] +
            ["--tg", str(a.tg), "--batch"] + [str(b) for b in a.batch] + ["--json", f.name] +
            ["--depth", str(a.depth)] + (["--ternary"] if a.ternary else []) +
            (["-q", "q8_0"] if a.q8 else []))
        results = json.load(open(f.name))["results"]
    out = {}
    for r in results:
        name = r["test"].split("@")[0]  # "pp512" or "pp512@d4096"
        kind, n = name[:2], int(name[2:])
        out[test_name(kind, n, r["batch"], a.depth)] = r["tokens_per_s"]
    return out


def keep_best(out, test, value):
    out[test] = max(value, out.get(test, 0.0))


def run_llama(a, bin_dir, gguf):
    common = ["-m", gguf, "-t", str(a.threads), "-lm", "none"]
    out = {}
    # llama-bench warms up before its repetitions, as cpmserve's first repeat does.
    text = run([os.path.join(bin_dir, "llama-bench"), *common, "-r", str(REPEATS), "-o", "jsonl",
                "-p", ",".join(str(p) for p in a.pp), "-n", str(a.tg), "-d", str(a.depth)])
    for line in text.splitlines():
        r = json.loads(line)
        test = (test_name("pp", r["n_prompt"], depth=a.depth) if r["n_prompt"] > 0
                else test_name("tg", r["n_gen"], depth=a.depth))
        keep_best(out, test, max(r["samples_ts"]))
    batches = [b for b in a.batch if b > 1]
    if batches:
        # Each sequence's prompt is its depth (one token without), decoded after.
        npp = max(1, a.depth)
        ctx = max(batches) * (npp + a.tg + 1) + 64
        text = run([os.path.join(bin_dir, "llama-batched-bench"), *common, "-c", str(ctx),
                    "-b", "2048", "-ub", "512", "-npp", str(npp), "-ntg", str(a.tg),
                    "-npl", ",".join(str(b) for b in batches * REPEATS),
                    "--output-format", "jsonl"])
        for line in text.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                keep_best(out, test_name("tg", r["tg"], r["pl"], a.depth), r["speed_tg"])
    return out


# ---- serving: each engine's server under `cpmserve bench serve` ----

SERVE_METRICS = ["output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms"]


def serve_round(a, server_cmd, port):
    """Starts `server_cmd`, runs the serving benchmark against it, stops it: SERVE_METRICS."""
    server = subprocess.Popen(server_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run([a.cpmserve, "bench", "serve", "--port", str(port), "--tokenizer", a.model,
                 "--ready-check-timeout-sec", "300", "--max-concurrency", str(a.concurrency),
                 "--num-prompts", str(2 * a.concurrency), "--random-input-len",
                 str(a.serve_input), "--random-output-len", str(a.serve_output),
                 "--percentile-metrics", "ttft,tpot,itl", "--save-result", "--result-dir", tmp,
                 "--result-filename", "r.json"])
            result = json.load(open(os.path.join(tmp, "r.json")))
    finally:
        server.terminate()
        server.wait()
    return {k: result[k] for k in SERVE_METRICS}


def serve_cpmserve(a, port):
    return serve_round(a, [a.cpmserve, "serve", a.model, "--load-format", "dummy", "--port",
                           str(port), "--max-num-seqs", str(a.concurrency), "--max-model-len",
                           "2048"] + (["-q", "q8_0"] if a.q8 else []), port)


def serve_llama(a, bin_dir, gguf, port):
    per_slot = a.serve_input + a.serve_output + 16
    return serve_round(a, [os.path.join(bin_dir, "llama-server"), "-m", gguf, "-t",
                           str(a.threads), "-lm", "none", "-np", str(a.concurrency), "-c",
                           str(a.concurrency * per_slot), "--port", str(port)], port)


def print_table(title, what, best, rows):
    print(f"\n{title}\n")
    print(f"| {what} | cpmserve | llama.cpp | cpmserve / llama.cpp |")
    print("|---|---:|---:|---:|")
    for t in rows:
        c, l = best["cpmserve"][t], best["llama.cpp"][t]
        print(f"| {t} | {c:.1f} | {l:.1f} | {c / l:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "..", "shared", "models",
                                                    "MiniCPM4-0.5B"))
    ap.add_argument("--cpmserve", default=os.path.join(ROOT, "build", "cpmserve"))
    ap.add_argument("--llama-bin", help="directory with llama.cpp's built tools (else built)")
    ap.add_argument("--llama-no-amx", action="store_true",
                    help="build llama.cpp without its AMX kernels (where they die with SIGILL)")
    ap.add_argument("--work", default=os.path.expanduser("~/.cache/cpmserve-llama-cpp"),
                    help="where llama.cpp is built and the GGUF is written")
    ap.add_argument("--pp", type=int, nargs="+", default=[512])
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--depth", type=int, default=0,
                    help="tokens already in each sequence's cache when a test starts")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3)
    kind = ap.add_mutually_exclusive_group()
    kind.add_argument("--ternary", action="store_true",
                      help="BitCPM4: ternary layers (cpmserve bench --ternary; TQ2_0 for llama.cpp)")
    kind.add_argument("--q8", action="store_true",
                      help="Q8_0 weights (cpmserve -q q8_0; a Q8_0 GGUF for llama.cpp)")
    ap.add_argument("--serve", action="store_true", help="also compare the servers")
    ap.add_argument("--concurrency", type=int, default=16, help="--serve: streams at once")
    ap.add_argument("--serve-input", type=int, default=32, help="--serve: prompt tokens")
    ap.add_argument("--serve-output", type=int, default=256, help="--serve: output tokens")
    ap.add_argument("--port", type=int, default=8097, help="--serve: the servers' port")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    if not os.path.exists(a.cpmserve):
        sys.exit(f"compare: {a.cpmserve} not found (run scripts/build.sh first)")
    os.makedirs(a.work, exist_ok=True)
    bin_dir = a.llama_bin or build_llama_cpp(a.work, a.llama_no_amx)
    if a.serve and a.ternary:
        sys.exit("compare: --serve serves bf16 or Q8_0 dummy weights only")
    gguf = make_gguf(a)

    offline = {"cpmserve": lambda: run_cpmserve(a),
               "llama.cpp": lambda: run_llama(a, bin_dir, gguf)}
    serving = {"cpmserve": lambda: serve_cpmserve(a, a.port),
               "llama.cpp": lambda: serve_llama(a, bin_dir, gguf, a.port)}
    rounds = {name: [] for name in offline}
    serve_rounds = {name: [] for name in offline}
    for r in range(a.rounds):
        order = list(offline) if r % 2 == 0 else list(reversed(offline))
        for name in order:
            rounds[name].append(offline[name]())
            print(f"round {r + 1} {name}: " +
                  ", ".join(f"{t} {v:.1f}" for t, v in rounds[name][-1].items()), flush=True)
        for name in order if a.serve else []:
            serve_rounds[name].append(serving[name]())
            print(f"round {r + 1} {name} serving: " +
                  ", ".join(f"{k} {v:.1f}" for k, v in serve_rounds[name][-1].items()),
                  flush=True)

    tests = [t for t in rounds["cpmserve"][0] if t in rounds["llama.cpp"][0]]
    best = {name: {t: max(rr[t] for rr in rs) for t in tests} for name, rs in rounds.items()}
    weights = ("ternary layers (llama.cpp: TQ2_0)" if a.ternary else
               "Q8_0 weights" if a.q8 else "bf16 weights")
    print_table(f"{os.path.basename(os.path.normpath(a.model))} dims, dummy {weights}, "
                f"{a.threads} threads, best of {a.rounds} interleaved rounds (tokens/s)",
                "test", best, tests)
    serve_best = {}
    if a.serve:
        # The round with the best output throughput, its latencies with it.
        serve_best = {name: max(rs, key=lambda m: m["output_throughput"])
                      for name, rs in serve_rounds.items()}
        print_table(f"Serving: {a.concurrency} streams, {2 * a.concurrency} requests of "
                    f"{a.serve_input} prompt + {a.serve_output} output tokens, best of "
                    f"{a.rounds} rounds (by output tokens/s)", "metric", serve_best,
                    SERVE_METRICS)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "threads": a.threads, "depth": a.depth,
                       "llama_cpp": NODE_LLAMA_CPP, "llama_no_amx": a.llama_no_amx,
                       "rounds": rounds, "best": best, "serve_rounds": serve_rounds,
                       "serve_best": serve_best}, f, indent=2)


if __name__ == "__main__":
    main()
