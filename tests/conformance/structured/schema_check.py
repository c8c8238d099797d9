"""Random JSON schemas, regexes and grammars of cpmserve's structured outputs against a server.

usage: schema_check.py BASE_URL COUNT

Each request asks the tiny model (random weights) for a reply under one random schema: types,
length, item and numeric bounds, tuples (prefixItems), string patterns and formats, enums and
consts, anyOf, nested objects with required and optional properties, odd property names (a
quote, non-ASCII), additionalProperties of every kind, compact or free whitespace. Every reply
that ends with "stop" must parse as JSON and satisfy its schema by the `jsonschema` package
(draft 2020-12, formats checked), the independent reference. Then COUNT / 4 requests for a
string of each format in turn, likewise checked, COUNT / 4 under a random regex
(structured_outputs regex) and COUNT / 8 under an EBNF grammar (structured_outputs grammar),
each complete reply checked by Python's `re.fullmatch` (a grammar's against the regex it spells
out). Replies cut by max_tokens are counted, not checked. Exits non-zero on the first failure,
or when too few replies completed to mean anything.
"""
import datetime
import json
import random
import re
import sys
import urllib.error
import urllib.request

import jsonschema


# Patterns that mean the same to Python's re and to cpmserve (no '.', whose newline differs; the
# whole text is matched, which implies the search that JSON Schema's pattern asks for).
PATTERNS = [r"^[a-c]{1,3}$", r"[0-9]{2}-[a-z]+", r"(yes|no)!?", r"é+x?", r"a\.b|\d+",
            r"[^\"\\]{0,3}", r'q"\\?', r"(?:[A-Z][a-z]*)( [A-Z][a-z]*)*", r"\w{2,4}\s?",
            r"\n?[\u4e2d\u6587]{1,2}"]


# Formats cpmserve enforces, checked by jsonschema's format checkers (ipv4, ipv6, uuid, email)
# and by Python's datetime and the label rules below.
FORMATS = ["date", "time", "date-time", "uuid", "ipv4", "ipv6", "email", "hostname"]

# EBNF grammars (structured_outputs grammar) and the regexes they spell out, for re.fullmatch.
GRAMMARS = [
    ('root ::= select_statement\n'  # vLLM's structured-output benchmark grammar
     'select_statement ::= "SELECT " column " from " table " where " condition\n'
     'column ::= "col_1 " | "col_2 "\ntable ::= "table_1 " | "table_2 "\n'
     'condition ::= column "= " number\nnumber ::= "1 " | "2 "',
     r"SELECT (col_1 |col_2 ) from (table_1 |table_2 ) where (col_1 |col_2 )= (1 |2 )"),
    ('root ::= item (", " item){0,3}\nitem ::= [a-z]{1,6} | num\nnum ::= "-"? [0-9]{1,3}',
     r"([a-z]{1,6}|-?[0-9]{1,3})(, ([a-z]{1,6}|-?[0-9]{1,3})){0,3}"),
    ("root ::= 'Q: ' [^?\\n]{1,20} '?' # a comment\n",
     r"Q: [^?\n]{1,20}\?"),
]

FORMAT_CHECKER = jsonschema.FormatChecker()


@FORMAT_CHECKER.checks("date-time", raises=ValueError)
def is_date_time(v):
    return isinstance(v, str) and "T" in v and bool(datetime.datetime.fromisoformat(v))


@FORMAT_CHECKER.checks("time", raises=ValueError)
def is_time(v):
    return isinstance(v, str) and datetime.time.fromisoformat(v).tzinfo is not None


@FORMAT_CHECKER.checks("date", raises=ValueError)
def is_date(v):
    return isinstance(v, str) and len(v) == 10 and bool(datetime.date.fromisoformat(v))


@FORMAT_CHECKER.checks("hostname")
def is_hostname(v):
    labels = v.split(".") if isinstance(v, str) else [""]
    return len(v) <= 253 and all(
        0 < len(x) <= 63 and x[0] != "-" and x[-1] != "-" and
        all(c.isascii() and (c.isalnum() or c == "-") for c in x) for x in labels)


def schema(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.25:
        kind = rng.choice(["string", "integer", "number", "boolean", "null"])
        s = {"type": kind}
        patterned = kind == "string" and rng.random() < 0.4
        if patterned:
            s["pattern"] = rng.choice(PATTERNS)
        elif kind == "string" and rng.random() < 0.3:
            s["format"] = rng.choice(FORMATS)
            return s
        if kind in ("integer", "number") and rng.random() < 0.5:
            low = rng.randint(-50, 50)
            s[rng.choice(["minimum", "exclusiveMinimum"])] = low
            if rng.random() < 0.7:
                s[rng.choice(["maximum", "exclusiveMaximum"])] = low + rng.randint(2, 200)
            if rng.random() < 0.3:
                s["minimum"] = low + rng.choice([0.5, 0.25, 0.05])  # a bound with a fraction
        if kind == "string" and rng.random() < 0.5:
            # Bounds every pattern meets (each matches strings of 1 to 4 characters).
            s["maxLength"] = rng.randint(4, 6) if patterned else rng.randint(0, 4)
            s["minLength"] = rng.randint(0, 1 if patterned else s["maxLength"])
        return s
    if r < 0.35:
        values = ["a", "bb", 1, 12, None, True, {"k": [1]}, "é"]
        return {"enum": rng.sample(values, rng.randint(1, 4))}
    if r < 0.42:
        return {"const": rng.choice(["x", 3, None, [1, "a"]])}
    if r < 0.55:
        return {"anyOf": [schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    if r < 0.62:
        low = rng.randint(0, 2)
        return {"type": "array", "items": schema(rng, depth + 1), "minItems": low,
                "maxItems": low + rng.randint(0, 2)}
    if r < 0.7:  # a tuple, or a prefix then items
        prefix = [schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]
        s = {"type": "array", "prefixItems": prefix,
             "items": rng.choice([False, schema(rng, depth + 1)])}
        if rng.random() < 0.5:
            s["minItems"] = len(prefix)
        return s
    names = rng.sample(["a", "b", "c", 'd"q', "é"], rng.randint(0, 3))
    s = {"type": "object", "properties": {n: schema(rng, depth + 1) for n in names}}
    if names:
        s["required"] = rng.sample(names, rng.randint(0, len(names)))
    if rng.random() < 0.3:
        s["additionalProperties"] = rng.choice([False, True, schema(rng, depth + 1)])
    return s


class Refused(Exception):
    """The server answered a request with an HTTP error."""


def first_choice(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())["choices"][0]
    except urllib.error.HTTPError as e:
        raise Refused(f"HTTP {e.code} for {json.dumps(body)[:600]}: {e.read()[:300]!r}") from e


def check_json(text, s):
    """None if `text` is JSON valid under schema `s`, else why not."""
    try:
        jsonschema.validate(json.loads(text), s, cls=jsonschema.Draft202012Validator,
                            format_checker=FORMAT_CHECKER)
    except (ValueError, jsonschema.ValidationError) as e:
        return f"reply {text!r} breaks schema {json.dumps(s)}: {e}"
    return None


def chat(content, max_tokens, seed, **constraint):
    return {"model": "tiny", "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 1.0, "seed": seed, **constraint}


def complete_texts(base, cases, max_tokens):
    """Completions under each (structured_outputs, regex) case: how many ended with "stop", each
    checked to match its regex whole; -1 on the first that does not."""
    done = 0
    for seed, (constraint, spelled) in enumerate(cases):
        choice = first_choice(base, "/v1/completions", {
            "model": "tiny", "prompt": "Say", "max_tokens": max_tokens, "temperature": 1.0,
            "seed": seed, "structured_outputs": constraint})
        if choice["finish_reason"] != "stop":
            continue
        if not re.fullmatch(spelled, choice["text"]):
            print(f"reply {choice['text']!r} under {constraint!r} does not match {spelled!r}")
            return -1
        done += 1
    return done


def main():
    base, count = sys.argv[1], int(sys.argv[2])
    rng = random.Random(20261202)
    done = formatted = done_format = done_regex = done_grammar = 0
    try:
        for i in range(count):
            s = schema(rng)
            compact = rng.random() < 0.7
            choice = first_choice(base, "/v1/chat/completions", chat(
                "JSON, please", 120, i,
                structured_outputs={"json": s, "disable_any_whitespace": compact}))
            if choice["finish_reason"] != "stop":
                continue
            if (error := check_json(choice["message"]["content"], s)) is not None:
                print(error)
                return 1
            done += 1
            formatted += '"format"' in json.dumps(s)
        print(f"{done} of {count} replies complete, each valid under its schema "
              f"({formatted} of them with string formats)")
        for i in range(count // 4):
            s = {"type": "string", "format": FORMATS[i % len(FORMATS)]}
            choice = first_choice(base, "/v1/chat/completions", chat(
                "A value", 60, i,
                response_format={"type": "json_schema", "json_schema": {"name": "v", "schema": s}}))
            if choice["finish_reason"] != "stop":
                continue
            if (error := check_json(choice["message"]["content"], s)) is not None:
                print(error)
                return 1
            done_format += 1
        print(f"{done_format} of {count // 4} formatted strings complete, each valid")
        regexes = []
        for _ in range(count // 4):
            pattern = rng.choice(PATTERNS)
            if not pattern.endswith("$"):
                pattern += rng.choice(["", r"(, \d{1,2})*", r"[.?]"])
            regexes.append(({"regex": pattern}, pattern))
        done_regex = complete_texts(base, regexes, 40)
        if done_regex < 0:
            return 1
        print(f"{done_regex} of {len(regexes)} regex replies complete, each a full match")
        grammars = [({"grammar": g}, spelled)
                    for g, spelled in (GRAMMARS[i % len(GRAMMARS)] for i in range(count // 8))]
        done_grammar = complete_texts(base, grammars, 60)
        if done_grammar < 0:
            return 1
        print(f"{done_grammar} of {len(grammars)} grammar replies complete, each derived")
    except Refused as e:
        print(e)
        return 1
    enough = (done >= count // 2 and done_format >= count // 8 and done_regex >= count // 8 and
              done_grammar >= count // 16)
    return 0 if enough else 1


if __name__ == "__main__":
    sys.exit(main())
