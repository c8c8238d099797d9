#!/usr/bin/env python3
"""Second reference: renders the same cases as generate.mjs with jinja2 configured exactly as
transformers' chat_template_utils does (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, json.dumps tojson with ensure_ascii=False, raise_exception,
strftime_now). Where jinja2 and @huggingface/jinja disagree, jinja2 is the truth: the case and
jinja2's result are written to divergences.json, which the C++ test uses instead of expected/.

Usage: python3 jinja2_reference.py [--check]   (--check: exit 1 if divergences.json would change)
Needs python3-jinja2 (Debian), >= 3.1.
"""
import json
import os
import sys
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    if __name__ == "__main__":
        print("skip: jinja2 not installed (Debian: python3-jinja2)")
        sys.exit(77)
    raise

HERE = os.path.dirname(os.path.abspath(__file__))
# Keep in step with OPTION_SETS in generate.mjs.
OPTION_SETS = {
    "nogen": (False, {}),
    "gen": (True, {}),
    "gen_think_off": (True, {"enable_thinking": False}),
    "gen_think_on": (True, {"enable_thinking": True}),
    "gen_vision_id": (True, {"add_vision_id": True, "enable_thinking": False}),
}


class Raised(Exception):
    pass


def make_env():
    def raise_exception(message):
        raise Raised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_all():
    env = make_env()
    templates = json.load(open(os.path.join(HERE, "templates.json"), encoding="utf-8"))
    conversations = json.load(open(os.path.join(HERE, "conversations.json"), encoding="utf-8"))
    out = {}
    for name, spec in templates.items():
        source = open(os.path.join(HERE, spec["file"]), encoding="utf-8").read()
        template = env.from_string(source)
        for conv in conversations:
            for opt_name, (agp, kwargs) in OPTION_SETS.items():
                ctx = dict(messages=conv["messages"], tools=conv.get("tools"), documents=None,
                           add_generation_prompt=agp)
                for tok in ("bos_token", "eos_token"):
                    if tok in spec:
                        ctx[tok] = spec[tok]
                ctx.update(kwargs)
                try:
                    result = {"output": template.render(**ctx)}
                except Raised as e:
                    result = {"raise": str(e)}
                except Exception as e:  # noqa: BLE001 - any render error is a result here
                    result = {"error": f"{type(e).__name__}: {e}"}
                out[f"{name}:{conv['name']}/{opt_name}"] = result
    return out


def same(a, b):
    if "output" in a or "output" in b:
        return a.get("output") == b.get("output")
    if "raise" in a or "raise" in b:
        return a.get("raise") == b.get("raise")
    return True  # both failed with a non-template error; messages differ by design


def main():
    jinja2_results = render_all()
    divergences = {}
    for key, j2 in jinja2_results.items():
        name, case = key.split(":", 1)
        node = json.load(open(os.path.join(HERE, "expected", f"{name}.json"), encoding="utf-8"))
        if case not in node:
            print(f"missing in expected/{name}.json: {case} (run node generate.mjs)")
            return 1
        if not same(j2, node[case]):
            divergences[key] = {"jinja2": j2, "huggingface_jinja": node[case]}
    path = os.path.join(HERE, "divergences.json")
    text = json.dumps(divergences, ensure_ascii=False, indent=1) + "\n"
    if "--check" in sys.argv:
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if old != text:
            print("divergences.json is out of date; rerun jinja2_reference.py")
            return 1
        print(f"jinja2 agrees with expected/ except the {len(divergences)} recorded divergences")
        return 0
    open(path, "w", encoding="utf-8").write(text)
    print(f"{len(jinja2_results)} cases, {len(divergences)} where jinja2 differs -> divergences.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
