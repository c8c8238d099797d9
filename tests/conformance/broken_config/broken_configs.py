"""Runs `cpmserve generate` on tiny checkpoints whose config.json has one field broken.

usage: broken_configs.py CPMSERVE WORK_DIR
Each field (nested ones too, the first two items of lists) of the minicpm4 and minicpmv4_6 tiny
models' config.json is replaced by null, a string, -1 or 10^12, or removed.
A run must exit 0, or 1 with an "error:" line naming config.json or the checkpoint file; a
signal or any other exit code fails the test.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from json_mutations import REMOVE, mutated, paths  # noqa: E402

CPMSERVE, WORK = sys.argv[1], sys.argv[2]
VALUES = [None, "x", -1, 10**12]

failures = []
runs = 0
shutil.rmtree(WORK, ignore_errors=True)
for arch in ["minicpm4", "minicpmv4_6"]:
    model = os.path.join(WORK, arch)
    subprocess.run([CPMSERVE, "make-tiny", "--arch", arch, model], check=True,
                   capture_output=True)
    config_path = os.path.join(model, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    for path in paths(config, list_items=2):
        for value in VALUES + [REMOVE]:
            with open(config_path, "w") as f:
                json.dump(mutated(config, path, value), f)
            runs += 1
            r = subprocess.run([CPMSERVE, "generate", "--model", model, "--prompt-ids", "1,2,3",
                                "--max-tokens", "2", "--threads", "1"],
                               capture_output=True, text=True, timeout=120)
            what = f"{arch} {'/'.join(map(str, path))} = {'removed' if value is REMOVE else value!r}"
            if r.returncode == 0:
                continue
            errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
            named = any("config.json" in e or ".safetensors" in e for e in errors)
            if r.returncode != 1 or not named:
                failures.append(f"{what}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    with open(config_path, "w") as f:
        json.dump(config, f)
for f in failures[:30]:
    print("FAIL", f)
print(f"{runs} broken configs, {len(failures)} failures")
sys.exit(1 if failures else 0)
