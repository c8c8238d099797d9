#!/usr/bin/env python3
"""Write a cpmserve reference dump (src/eval/README.md) from a transformers model.

For every prompt: the top-K of log_softmax(logits) at the last prompt position, the logits'
log-sum-exp and, with --greedy-tokens N, a greedy continuation of up to N tokens. The output is
what `cpmserve eval logits|greedy --reference` and `cpmserve validate --reference` read.

  python3 scripts/hf_reference_dump.py --model /models/MiniCPM4-0.5B --prompts prompts.txt \
      --out ref.jsonl --dtype bfloat16 --greedy-tokens 32

Prompts file: one prompt per line, either plain text or a JSON object with "prompt" and/or
"prompt_ids" (and optional "id", "chat"); a reference dump is itself a valid prompts file.
Needs torch and transformers. MiniCPM4 ships its own modeling code (remote code is trusted
unless --no-trust-remote-code); where that code is absent or fails to load (it was written for
transformers 4.x) and the release has no native MiniCPM, or with --minicpm-as-llama, MiniCPM4
runs as transformers' Llama with its scalings folded into the weights (minicpm_as_llama.py
beside this script; `meta.model_class` records which). MiniCPM-V-4.6 is transformers' own
class (>= 5.7). Attention is forced to the eager implementation so that the reference does not
depend on which fused kernels happen to be installed.
"""
import argparse
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import minicpm_as_llama  # noqa: E402


def read_prompts(path):
    prompts = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            if line.lstrip().startswith("{"):
                obj = json.loads(line)
                if "prompt" not in obj and "prompt_ids" not in obj:
                    sys.exit(f"{path}:{n}: needs \"prompt\" or \"prompt_ids\"")
                spec = {k: obj.get(k) for k in ("id", "prompt", "prompt_ids", "chat")}
            else:
                spec = {"id": None, "prompt": line, "prompt_ids": None, "chat": None}
            if spec["id"] is None:
                spec["id"] = f"p{len(prompts)}"
            prompts.append(spec)
    return prompts


def encode(tokenizer, spec, chat_default):
    """Token ids exactly as cpmserve's PreparePrompts makes them (ids given win over text)."""
    chat = chat_default if spec["chat"] is None else bool(spec["chat"])
    if spec["prompt_ids"]:
        return [int(t) for t in spec["prompt_ids"]], chat
    text = spec["prompt"]
    if chat:
        # Render first, then encode without special tokens: the template carries BOS and the
        # role markers itself, as apply_chat_template(tokenize=True) and vLLM's chat path do.
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"], chat
    return tokenizer(text, add_special_tokens=True)["input_ids"], chat


def architecture(path):
    config = os.path.join(path, "config.json")
    if not os.path.exists(config):
        return None                        # a hub id: transformers resolves it
    with open(config) as f:
        return (json.load(f).get("architectures") or [None])[0]


def load_model(path, dtype, trust, as_llama):
    """-> (model, class name): the causal-LM class, for MiniCPM-V-4.6 (an image-text-to-text
    model that AutoModelForCausalLM does not map) its conditional-generation class, and for
    MiniCPM4 without usable modeling code the folded Llama."""
    minicpm = architecture(path) == "MiniCPMForCausalLM"
    native = hasattr(transformers, "MiniCPMForCausalLM")
    if minicpm and (as_llama or (not native and not trust)):
        return minicpm_as_llama.load(path, getattr(torch, dtype))[0], "LlamaForCausalLM (MiniCPM scalings folded)"
    # transformers 5 renamed torch_dtype to dtype.
    dtype_arg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    kwargs = {dtype_arg: getattr(torch, dtype), "trust_remote_code": trust, "attn_implementation": "eager"}
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except Exception as e:  # noqa: BLE001 - e.g. MiniCPM4's remote code against a newer transformers
        if minicpm and not native:
            print(f"MiniCPM4's modeling code did not load ({type(e).__name__}: {e}); running it as "
                  f"transformers' Llama with the scalings folded in", file=sys.stderr)
            return minicpm_as_llama.load(path, getattr(torch, dtype))[0], "LlamaForCausalLM (MiniCPM scalings folded)"
        if minicpm or not isinstance(e, ValueError):
            raise
        model = AutoModelForImageTextToText.from_pretrained(path, **kwargs)
    return model, type(model).__name__


def top_logprobs(logits, k):
    """(top-k [[id, logprob]], logsumexp) of one row of raw logits, computed in float32."""
    row = logits.float()
    logprobs = torch.log_softmax(row, dim=-1)
    lse = torch.logsumexp(row, dim=-1).item()
    # Stable descending sort: equal log-probs keep the lower id first, as the C++ side does.
    values, ids = torch.sort(logprobs, descending=True, stable=True)
    k = min(k, row.numel())
    return [[int(i), float(v)] for i, v in zip(ids[:k].tolist(), values[:k].tolist())], lse


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Hugging Face model directory or hub id")
    p.add_argument("--prompts", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    p.add_argument("--device", default="cpu", help="cpu, cuda, npu, ...")
    p.add_argument("--top-k", type=int, default=20, help="log-probs kept per prompt (>= 20)")
    p.add_argument("--greedy-tokens", type=int, default=0, help="greedy continuation length N")
    p.add_argument("--chat", action="store_true", help="render text prompts with the chat template")
    p.add_argument("--no-trust-remote-code", action="store_true")
    p.add_argument("--minicpm-as-llama", action="store_true",
                   help="MiniCPM4: transformers' Llama with MiniCPM's scalings folded in, not its remote code")
    args = p.parse_args()
    if args.top_k < 20:
        sys.exit("--top-k must be at least 20")

    trust = not args.no_trust_remote_code
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=trust)
    model, model_class = load_model(args.model, args.dtype, trust, args.minicpm_as_llama)
    model = model.to(args.device)
    model.eval()
    meta = {"producer": f"transformers {transformers.__version__}", "model": args.model, "model_class": model_class,
            "dtype": args.dtype, "device": args.device, "torch": torch.__version__,
            "top_k": args.top_k, "greedy_tokens": args.greedy_tokens, "chat": args.chat,
            "attn_implementation": "eager"}

    with open(args.out, "w", encoding="utf-8") as out, torch.no_grad():
        for spec in read_prompts(args.prompts):
            ids, chat = encode(tokenizer, spec, args.chat)
            input_ids = torch.tensor([ids], dtype=torch.long, device=args.device)
            attention_mask = torch.ones_like(input_ids)
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[0, -1]
            top, lse = top_logprobs(logits, args.top_k)
            record = {"id": str(spec["id"]), "prompt": spec["prompt"], "prompt_ids": ids,
                      "chat": chat, "top_logprobs": top, "logsumexp": lse, "meta": meta}
            if args.greedy_tokens > 0:
                # Pure greedy whatever generation_config.json asks for (MiniCPM4 ships
                # do_sample=true, temperature 0.8, top_p 0.8): no sampling, no penalties. EOS ids
                # still come from the generation config, and a hit EOS is kept, as cpmserve does.
                generated = model.generate(
                    input_ids=input_ids, attention_mask=attention_mask,
                    max_new_tokens=args.greedy_tokens, min_new_tokens=0, do_sample=False,
                    num_beams=1, temperature=None, top_p=None, top_k=None,
                    repetition_penalty=1.0,
                    pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                    else tokenizer.eos_token_id)
                greedy = generated[0, len(ids):].tolist()
                record["greedy_ids"] = greedy
                record["greedy_text"] = tokenizer.decode(greedy, skip_special_tokens=True)
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            print(f"{record['id']}: {len(ids)} prompt tokens, top-1 {top[0][0]} "
                  f"({top[0][1]:.4f})", file=sys.stderr)


if __name__ == "__main__":
    main()
