"""MiniCPM4 / BitCPM4 (MiniCPMForCausalLM) as transformers' own LlamaForCausalLM.

For transformers releases without a native MiniCPM (5.17 has none) where the hub repo's remote
code (modeling_minicpm.py, written for transformers 4.x) is absent or does not load. MiniCPM is
Llama plus three constant scalings (../shared/docs/specs/minicpm4.md §2), folded into the
weights here: the input embedding x scale_emb; o_proj and down_proj x scale_depth /
sqrt(num_hidden_layers) (the residual branches); an untied head E / (hidden_size /
dim_model_base). Everything else (RMSNorm, GQA attention, rotate-half RoPE, LongRoPE's short /
long factors and magnitude factor, SiLU MLP) is transformers' Llama code, LongRoPE as it
implements it for Phi-3: the long factors for a forward whose positions pass
original_max_position_embeddings (vLLM and cpmserve decide once, from max_model_len).

Used by scripts/hf_reference_dump.py and tests/reference/hf_ref.py; the folding is checked in
tests/reference/self_test.py against the numpy reference. Imports torch and transformers only
when a model is loaded.
"""
import json
import os


def fold_minicpm_scalings(cfg, W):
    """{name: tensor} of a MiniCPM checkpoint -> the same model as plain Llama weights (numpy
    arrays or torch tensors; float64 keeps the folding exact)."""
    residual = cfg.get("scale_depth", 1.0) / cfg["num_hidden_layers"] ** 0.5
    state = {name: w * residual if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")) else w
             for name, w in W.items()}
    embed = W["model.embed_tokens.weight"]
    state["model.embed_tokens.weight"] = embed * cfg.get("scale_emb", 1.0)
    untied = cfg.get("tie_word_embeddings", True) is False and "lm_head.weight" in W
    head = W["lm_head.weight"] if untied else embed
    state["lm_head.weight"] = head / (cfg["hidden_size"] / cfg.get("dim_model_base", cfg["hidden_size"]))
    return state


def llama_config(cfg):
    """transformers.LlamaConfig of the folded model (untied head, LongRoPE where configured)."""
    import transformers
    rope = cfg.get("rope_scaling") or {}
    rope_parameters = {"rope_type": "default", "rope_theta": float(cfg.get("rope_theta") or 10000.0)}
    extra = {}
    if rope.get("rope_type", rope.get("type")) == "longrope":
        original = rope["original_max_position_embeddings"]
        rope_parameters.update({"rope_type": "longrope", "short_factor": rope["short_factor"],
                                "long_factor": rope["long_factor"], "original_max_position_embeddings": original,
                                "factor": cfg["max_position_embeddings"] / original})
        extra["original_max_position_embeddings"] = original
    eos = cfg.get("eos_token_id")
    kwargs = dict(
        vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"], intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["num_hidden_layers"], num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
        max_position_embeddings=cfg["max_position_embeddings"], rms_norm_eps=cfg["rms_norm_eps"],
        hidden_act=cfg.get("hidden_act", "silu"), tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        bos_token_id=cfg.get("bos_token_id"), eos_token_id=eos, rope_parameters=rope_parameters)
    try:                                   # Phi-3's top-level field, where the release accepts it
        config = transformers.LlamaConfig(**kwargs, **extra)
    except TypeError:
        config = transformers.LlamaConfig(**kwargs)
    config._attn_implementation = "eager"
    return config


def read_weights(model_dir):
    """{name: float64 torch tensor} from model.safetensors or its sharded index."""
    import torch
    from safetensors.torch import load_file
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    W = {}
    for name in files:
        W.update({k: v.to(torch.float64) for k, v in load_file(os.path.join(model_dir, name)).items()})
    return W


def load(model_dir, dtype):
    """-> (LlamaForCausalLM in eval mode, info {missing_keys, unexpected_keys, attention_scaling})
    for a local MiniCPM checkpoint directory; dtype is a torch dtype."""
    import transformers
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    model = transformers.LlamaForCausalLM(llama_config(cfg)).to(dtype)
    state = fold_minicpm_scalings(cfg, read_weights(model_dir))
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
    if os.path.exists(os.path.join(model_dir, "generation_config.json")):
        model.generation_config = transformers.GenerationConfig.from_pretrained(model_dir)
    model.eval()
    info = {"missing_keys": sorted(k for k in missing if "rotary" not in k), "unexpected_keys": sorted(unexpected),
            "attention_scaling": float(getattr(model.model.rotary_emb, "attention_scaling", 1.0))}
    return model, {k: v for k, v in info.items() if v != []}
