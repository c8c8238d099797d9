"""Compare an engine log-prob dump with a reference dump (same JSON shape) and check bounds.

Dump shape: {"sequences": [{"prompt_ids": [...], "generated_ids": [...], "logprobs": [[V], ...],
             optional "logprob_positions": [...]}]}  (other top-level keys are ignored)
Rows: without "logprob_positions", row i is position i of prompt+generated (all prompt positions,
then one per generated token except the last). With it, row i < len(list) is for absolute position
list[i]; any further rows are the generated rows, at consecutive positions from
max(len(prompt), list[-1] + 1). Row t = log-probs of token t+1 given tokens 0..t.

Sequences are matched by index (their prompt_ids must agree). A row is compared only where both
dumps have it and the tokens it is conditioned on agree (positions before the first divergence of
the generated ids). Metrics per sequence and overall: top-1 agreement, top-5 / top-20 set overlap
(fractions, mean over rows), max |d logprob| over the reference's top-20 ids and over the whole
vocab, max / mean relative error of the reference's top-20 probabilities |p_eng - p_ref| / p_ref,
KL(ref || eng) per row (mean, max), generated ids exact match and first divergence index.

CLI: compare_logprobs.py ENGINE.json REF.json [--max-abs-logprob 2e-3] [--max-abs-logprob-full off]
     [--max-rel-top20 0.01] [--require-top1 1.0] [--require-top5-overlap off]
     [--require-top20-overlap 1.0] [--max-kl off] [--require-generated-match] [--json METRICS.json]
Exit 0 if every bound holds, 1 naming the failed bounds, 2 on unusable input.
Module: compare(engine_dump, ref_dump) -> metrics dict; check_bounds(metrics, bounds) -> failures.
Must not depend on cpmserve code; numpy + stdlib only.
"""
import argparse
import json
import sys

import numpy as np

DEFAULT_BOUNDS = {"max_abs_logprob": 2e-3, "max_abs_logprob_full": None, "max_rel_top20": 0.01,
                  "require_top1": 1.0, "require_top5_overlap": None, "require_top20_overlap": 1.0,
                  "max_kl": None, "require_generated_match": False}


def row_positions(seq):
    """Absolute position of each logprob row of one dumped sequence."""
    n_rows, P = len(seq["logprobs"]), len(seq["prompt_ids"])
    listed = seq.get("logprob_positions")
    if listed is None:
        return list(range(n_rows))
    listed = [int(p) for p in listed]
    if len(listed) > n_rows:
        raise ValueError(f"logprob_positions lists {len(listed)} positions for {n_rows} rows")
    start = max(P, listed[-1] + 1) if listed else P
    return listed + [start + i for i in range(n_rows - len(listed))]


def top_ids(row, k):
    return np.argsort(-row, kind="stable")[:k]           # ties -> lower id first


def set_overlap(ref, eng, r_ids, e_ids, tie_tol):
    """Shared members of two top-k sets. With tie_tol > 0, a swap across the k-th place counts as
    shared when both swapped ids lie within tie_tol of the k-th value in the other's ranking
    (numerically tied entries, whose order no implementation can be held to)."""
    r, e = set(r_ids), set(e_ids)
    shared = len(r & e)
    if tie_tol > 0:
        e_near = sum(1 for i in e - r if ref[i] >= ref[r_ids[-1]] - tie_tol)
        r_near = sum(1 for i in r - e if eng[i] >= eng[e_ids[-1]] - tie_tol)
        shared += min(e_near, r_near)
    return shared


def row_metrics(ref, eng, tie_tol=0.0):
    k5, k20 = min(5, ref.size), min(20, ref.size)
    r20, e20 = top_ids(ref, k20), top_ids(eng, k20)
    p_ref, p_eng = np.exp(ref[r20]), np.exp(eng[r20])
    with np.errstate(invalid="ignore"):
        kl = float(np.sum(np.exp(ref) * (ref - eng)))
    top1 = int(np.argmax(ref)) == int(np.argmax(eng)) or \
        (tie_tol > 0 and ref[int(np.argmax(eng))] >= ref.max() - tie_tol)
    return {"top1": top1,
            "top5": set_overlap(ref, eng, r20[:k5], e20[:k5], tie_tol) / k5,
            "top20": set_overlap(ref, eng, r20, e20, tie_tol) / k20,
            "abs_top20": float(np.max(np.abs(eng[r20] - ref[r20]))),
            "abs_full": float(np.max(np.abs(eng - ref))),
            "rel": np.abs(p_eng - p_ref) / p_ref,
            "kl": kl}


def summarize(rows):
    """rows: list of (position, row_metrics) -> aggregate dict."""
    if not rows:
        return {"rows": 0}
    ms = [m for _, m in rows]
    rel = np.concatenate([m["rel"] for m in ms])
    worst = max(rows, key=lambda pm: pm[1]["abs_top20"])
    return {"rows": len(ms),
            "top1": float(np.mean([m["top1"] for m in ms])),
            "top5_overlap": float(np.mean([m["top5"] for m in ms])),
            "top20_overlap": float(np.mean([m["top20"] for m in ms])),
            "max_abs_top20": float(max(m["abs_top20"] for m in ms)),
            # The typical row: robust to a few rows thrown off by one rounding decision (Q8_0).
            "median_abs_top20": float(np.median([m["abs_top20"] for m in ms])),
            "max_abs_full": float(max(m["abs_full"] for m in ms)),
            "max_rel_top20": float(rel.max()), "mean_rel_top20": float(rel.mean()),
            "kl_mean": float(np.mean([m["kl"] for m in ms])), "kl_max": float(max(m["kl"] for m in ms)),
            "worst_abs_top20_position": worst[0],
            "top1_mismatch_positions": [p for p, m in rows if not m["top1"]]}


def compare_sequence(eng, ref, tie_tol=0.0):
    if list(eng["prompt_ids"]) != list(ref["prompt_ids"]):
        raise ValueError("prompt_ids differ between engine and reference")
    P = len(ref["prompt_ids"])
    eg, rg = list(eng.get("generated_ids", [])), list(ref.get("generated_ids", []))
    common = min(len(eg), len(rg))
    divergence = next((i for i in range(common) if eg[i] != rg[i]), None)
    limit = P + (divergence if divergence is not None else common)   # rows t < limit see equal tokens
    ref_rows = {p: i for i, p in enumerate(row_positions(ref))}
    rows = []
    for i, pos in enumerate(row_positions(eng)):
        if pos >= limit or pos not in ref_rows:
            continue
        r = np.asarray(ref["logprobs"][ref_rows[pos]], dtype=np.float64)
        e = np.asarray(eng["logprobs"][i], dtype=np.float64)
        if r.shape != e.shape:
            raise ValueError(f"position {pos}: engine row has {e.size} entries, reference {r.size}")
        rows.append((pos, row_metrics(r, e, tie_tol)))
    out = summarize(rows)
    out.update({"generated_match": eg == rg, "first_divergence": divergence,
                "engine_generated": len(eg), "reference_generated": len(rg)})
    return out, rows


def compare(engine_dump, ref_dump, tie_tol=0.0):
    es, rs = engine_dump["sequences"], ref_dump["sequences"]
    if len(es) != len(rs):
        raise ValueError(f"engine has {len(es)} sequences, reference {len(rs)}")
    per_seq, all_rows = [], []
    for e, r in zip(es, rs):
        m, rows = compare_sequence(e, r, tie_tol)
        per_seq.append(m)
        all_rows += rows
    overall = summarize(all_rows)
    overall.pop("top1_mismatch_positions", None)
    overall.pop("worst_abs_top20_position", None)
    overall["generated_match"] = all(m["generated_match"] for m in per_seq)
    return {"sequences": per_seq, "overall": overall}


def check_bounds(metrics, bounds):
    """-> list of failure strings (empty = pass)."""
    o, b, fails = metrics["overall"], {**DEFAULT_BOUNDS, **bounds}, []
    if o["rows"] == 0:
        return ["no rows compared"]
    upper = [("max_abs_logprob", "max_abs_top20"), ("max_abs_logprob_full", "max_abs_full"),
             ("max_rel_top20", "max_rel_top20"), ("max_kl", "kl_max")]
    lower = [("require_top1", "top1"), ("require_top5_overlap", "top5_overlap"),
             ("require_top20_overlap", "top20_overlap")]
    for name, key in upper:
        if b[name] is not None and not o[key] <= b[name]:
            fails.append(f"{name}: {key} = {o[key]:.3g} > {b[name]:g}")
    for name, key in lower:
        if b[name] is not None and not o[key] >= b[name]:
            fails.append(f"{name}: {key} = {o[key]:.6f} < {b[name]:g}")
    if b["require_generated_match"] and not o["generated_match"]:
        fails.append("require_generated_match: generated ids differ")
    return fails


def format_table(metrics):
    head = ("seq", "rows", "top1", "top5", "top20", "maxd_top20", "maxd_full", "rel_max", "rel_mean",
            "kl_mean", "kl_max", "gen_match", "diverge")
    lines = ["%-7s %5s %7s %7s %7s %10s %10s %9s %9s %9s %9s %9s %7s" % head]
    named = [(str(i), m) for i, m in enumerate(metrics["sequences"])] + [("overall", metrics["overall"])]
    for name, m in named:
        if m["rows"] == 0:
            lines.append(f"{name:<7} {0:5d}  (no comparable rows)")
            continue
        lines.append("%-7s %5d %7.4f %7.4f %7.4f %10.3e %10.3e %9.3e %9.3e %9.2e %9.2e %9s %7s" % (
            name, m["rows"], m["top1"], m["top5_overlap"], m["top20_overlap"], m["max_abs_top20"],
            m["max_abs_full"], m["max_rel_top20"], m["mean_rel_top20"], m["kl_mean"], m["kl_max"],
            m["generated_match"], "-" if m.get("first_divergence") is None else m["first_divergence"]))
    return "\n".join(lines)


def _bound(text):
    return None if text.lower() in ("off", "none") else float(text)


def main(argv=None):
    p = argparse.ArgumentParser(description="compare engine log-probs with a reference dump")
    p.add_argument("engine")
    p.add_argument("reference")
    for name, value in DEFAULT_BOUNDS.items():
        if name != "require_generated_match":
            p.add_argument("--" + name.replace("_", "-"), type=_bound, default=value,
                           help=f"bound (default {value}; 'off' disables)")
    p.add_argument("--require-generated-match", action="store_true")
    p.add_argument("--json", help="also write the metrics dict here")
    args = p.parse_args(argv)
    try:
        with open(args.engine) as f:
            eng = json.load(f)
        with open(args.reference) as f:
            ref = json.load(f)
        metrics = compare(eng, ref)
    except (OSError, ValueError, KeyError) as err:
        print(f"compare_logprobs: unusable input: {err}", file=sys.stderr)
        return 2
    bounds = {name: getattr(args, name) for name in DEFAULT_BOUNDS}
    fails = check_bounds(metrics, bounds)
    print(format_table(metrics))
    for i, m in enumerate(metrics["sequences"]):
        if m.get("top1_mismatch_positions"):
            print(f"seq {i}: top-1 mismatch at positions {m['top1_mismatch_positions'][:20]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**metrics, "bounds": bounds, "failures": fails}, f, indent=1)
    for msg in fails:
        print("FAIL " + msg)
    print("PASS" if not fails else f"FAILED {len(fails)} bound(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
