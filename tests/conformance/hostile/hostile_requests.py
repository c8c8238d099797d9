"""Hostile requests against a cpmserve server on 127.0.0.1:PORT serving the tiny model "tiny".

1. Every field of valid chat, completion, tokenize, detokenize and responses requests replaced
   by values of each wrong type, extremes, or removed.
2. Malformed bodies (not JSON, truncated, deeply nested, not an object).
3. Pathological values: huge counts, 100k-key objects, regexes and schemas whose automata
   explode, decompression-bomb images, megabyte prompts.
4. Streams and plain requests from 8 threads for a while, a quarter of the clients hanging up
   mid-request.
Every answer must be a 200 or a 4xx carrying {"error": {"message", "type", "code"}}; never a
5xx, never a dropped connection; exit 1 if any answer was not, after all have run.
"""
import base64
import http.client
import json
import os
import random
import socket
import struct
import sys
import threading
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from json_mutations import REMOVE, mutated, paths  # noqa: E402

PORT = int(sys.argv[1])
failures = []
sent = [0]


def send(path, body=None, raw=None, timeout=300):
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    data = raw if raw is not None else json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = resp.read()
    conn.close()
    return resp.status, out


def check(what, status, out):
    if 200 <= status < 300:
        return
    if 400 <= status < 500:
        try:
            err = json.loads(out)["error"]
            if isinstance(err["message"], str) and "type" in err and err["code"] == status:
                return
        except (ValueError, KeyError, TypeError):
            pass
    failures.append(f"{what}: {status} {out[:200]!r}")


def request(what, path, body=None, raw=None):
    sent[0] += 1
    try:
        status, out = send(path, body, raw)
    except (OSError, http.client.HTTPException) as e:
        failures.append(f"{what}: {e!r}")
        return
    check(what, status, out)


def png(width, height, payload):
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(payload)) +
            chunk(b"IEND", b""))


def data_url(image):
    return "data:image/png;base64," + base64.b64encode(image).decode()


TOOL = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}}}}
BASES = {
    "/v1/chat/completions": {
        "model": "tiny", "messages": [{"role": "system", "content": "be brief"},
                                      {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_tokens": 3, "temperature": 0.7, "top_p": 0.9, "top_k": 5, "n": 2, "logprobs": True,
        "top_logprobs": 2, "stop": ["x"], "seed": 3, "stream": False,
        "stream_options": {"include_usage": True}, "response_format": {"type": "json_object"},
        "tools": [TOOL], "tool_choice": "auto", "logit_bias": {"5": 1.0},
        "presence_penalty": 0.1, "frequency_penalty": 0.1, "repetition_penalty": 1.1,
        "min_tokens": 1, "chat_template_kwargs": {"enable_thinking": False},
        "max_completion_tokens": 3, "user": "u", "ignore_eos": True},
    "/v1/completions": {
        "model": "tiny", "prompt": ["hello", [1, 2, 3]], "max_tokens": 3, "echo": True,
        "logprobs": 2, "best_of": 2, "n": 1, "prompt_logprobs": 1, "temperature": 0,
        "stop_token_ids": [7], "include_stop_str_in_output": True, "skip_special_tokens": False},
    "/tokenize": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                  "add_generation_prompt": True},
    "/detokenize": {"model": "tiny", "tokens": [1, 2, 3]},
    "/v1/responses": {"model": "tiny", "input": [{"role": "user", "content": "hi"}],
                      "max_output_tokens": 3, "instructions": "x"},
}
WEIRD = [None, True, False, 0, -1, 1, 2**31, 2**63, -2**63, 1e308, -1e308, 1.5, "", "x",
         "\u0000", [], [None], [[]], {}, {"a": None}, "-1", [1, 1, 1], "9" * 50]


def field_mutations():
    rng = random.Random(1)
    for path, base in BASES.items():
        for field in paths(base):
            for value in WEIRD + [REMOVE]:
                body = mutated(base, field, value)
                if path == "/v1/chat/completions" and rng.random() < 0.3:
                    body["stream"] = True
                elif path == "/v1/chat/completions" and field[0] not in ("stream", "stream_options"):
                    # Options without streaming are vLLM's 400 whatever else the body holds:
                    # left out, so that the other fields' mutations reach their own checks.
                    body.pop("stream_options", None)
                request(f"{path} {field}={value!r:.30}", path, body)


def malformed_bodies():
    for raw in [b"", b"{", b"[]", b"null", b"\"x\"", b"{\"model\": \"tiny\", \"messages\": [}",
                b"\xff\xfe", b"{\"a\":" * 10000, b"[" * 100000, b"{\"a\": 1e400}"]:
        for path in BASES:
            request(f"{path} raw {raw[:20]!r}", path, raw=raw)


def chat(**fields):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    body.update(fields)
    return body


def pathological():
    nested = json.loads('{"type":"array","items":' * 200 + "{}" + "}" * 200)
    bomb = data_url(png(60000, 60000, b"\x00" * (1 << 20)))
    cases = [
        chat(n=100000), chat(max_tokens=10**9), chat(logprobs=True, top_logprobs=100000),
        chat(stop=["a"] * 20000), chat(logit_bias={str(i): 1 for i in range(100000)}),
        chat(temperature=1e30), chat(n=16, max_tokens=8),
        chat(chat_template_kwargs={f"k{i}": i for i in range(50000)}),
        chat(response_format={"type": "json_schema",
                              "json_schema": {"name": "x", "schema": nested}}),
        chat(response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "string", "pattern": "(.{0,50}){0,50}"}}}),
        chat(structured_outputs={"regex": "(x+x+)+y" * 50}),
        chat(structured_outputs={"grammar": "root ::= " + " ".join(['"a"'] * 5000)}),
        chat(messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": bomb}}]}]),
        chat(messages=[{"role": "user", "content": "x" * 2_000_000}]),
        chat(messages=[{"role": "user", "content": "hi"}] * 20000),
        chat(tools=[{"type": "function", "function": {"name": f"f{i}"}} for i in range(3000)],
             tool_choice="required"),
        chat(chat_template="{% for i in range(100000000) %}x{% endfor %}"),
    ]
    for i, body in enumerate(cases):
        request(f"pathological chat #{i}", "/v1/chat/completions", body)
    # Valid JSON nested 100k deep where the server walks values recursively (chat_template_kwargs
    # crashed it by stack overflow before the parser's depth limit).
    deep = "[" * 100000 + "]" * 100000
    tool = {"type": "function", "function": {"name": "f", "parameters": "DEEP"}}
    for i, body in enumerate([chat(chat_template_kwargs={"a": "DEEP"}),
                              chat(vllm_xargs={"a": "DEEP"}), chat(tools=[tool]),
                              chat(messages=[{"role": "user", "content": "hi", "x": "DEEP"}])]):
        raw = json.dumps(body).replace('"DEEP"', deep).encode()
        request(f"deep chat #{i}", "/v1/chat/completions", raw=raw)
    for i, body in enumerate([
            {"model": "tiny", "prompt": [[-1, 5]], "max_tokens": 2},
            {"model": "tiny", "prompt": "hi", "max_tokens": 2, "prompt_logprobs": 100000},
            {"model": "tiny", "prompt": "hi", "use_beam_search": True, "n": 100000},
            {"model": "tiny", "prompt": "hi", "use_beam_search": True, "n": 3, "max_tokens": 3}]):
        request(f"pathological completion #{i}", "/v1/completions", body)
    request("huge detokenize", "/detokenize", {"model": "tiny", "tokens": [2**31 - 1, -7]})


def concurrent(seconds, threads=8):
    def worker(seed):
        rng = random.Random(seed)
        end = time.time() + seconds
        while time.time() < end:
            body = chat(messages=[{"role": "user", "content": "hello " * rng.randrange(1, 40)}],
                        max_tokens=rng.randrange(1, 24), stream=rng.random() < 0.5,
                        n=rng.randrange(1, 3), temperature=rng.random())
            if rng.random() < 0.1:
                body["max_tokens"] = -1  # a 400 among the others
            if rng.random() < 0.25:  # send, maybe read a little, hang up
                data = json.dumps(body).encode()
                try:
                    with socket.create_connection(("127.0.0.1", PORT), timeout=60) as s:
                        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                                  % len(data) + data)
                        if rng.random() < 0.5:
                            s.recv(rng.randrange(1, 300))
                except OSError as e:
                    failures.append(f"hang-up client: {e!r}")
                continue
            request("concurrent", "/v1/chat/completions", body)
    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


start = time.time()
field_mutations()
malformed_bodies()
pathological()
concurrent(20)
request("after all", "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 2})
for f in failures[:40]:
    print("FAIL", f)
print(f"{sent[0]} requests (besides the hang-ups), {len(failures)} failures, "
      f"{time.time() - start:.0f} s")
sys.exit(1 if failures else 0)
