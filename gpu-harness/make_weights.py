#!/usr/bin/env python3
"""Real random weights for the test models (gpu-harness/make_models.py families dense-rw, hybrid-rw).

sglang's `--load-format dummy` fills every parameter alike with values in +-1e-3: the embedding and
the LM head are the same matrix, and the model barely reads its context (a dense dummy answers in
2-token cycles, a hybrid one echoes the prompt's last token). Identical greedy ids from such a
model prove little. These weights make every output depend on the whole context:

* each parameter has its own seed (sha256 of the base seed and the parameter's checkpoint name),
  so the tensors are reproducible one by one and independent of the order they are made in;
* scaled so activations stay O(1) through the layers: linear weights N(0, 1/fan_in), norm weights
  1 + N(0, 0.05), q/k norms about 2 (sharper attention over the context), an untied LM head with
  logits of about 4 standard deviations (clear top-1 gaps), Gated DeltaNet decays exp(A) in
  [0.05, 1] so the recurrent state remembers over many tokens;
* names and shapes are those of the Hugging Face checkpoints of Qwen3ForCausalLM and
  Qwen3_5ForConditionalGeneration (model.language_model.*, model.visual.*, lm_head), which sglang's
  loaders read; tests/fixtures/models/hf_param_shapes.json records transformers 5.6.0's own list for
  the two -rw configs, and `--check` compares against transformers when it is importable.

Written as float32 safetensors (the format is written here: 8-byte header length, JSON header,
raw little-endian data), on the GPU when there is one (seconds for 2 x 1.7 GB).

usage: make_weights.py MODEL_DIR [--seed N] [--device cuda] [--check]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import struct
import sys

import torch

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


# ------------------------------------------------------------------ names and shapes


def _dense_layer(p, t, i):
    h, hd = t["hidden_size"], t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"]
    nh, nkv = t["num_attention_heads"], t["num_key_value_heads"]
    q_out = nh * hd * (2 if t.get("attn_output_gate") else 1)
    return {
        f"{p}.layers.{i}.self_attn.q_proj.weight": [q_out, h],
        f"{p}.layers.{i}.self_attn.k_proj.weight": [nkv * hd, h],
        f"{p}.layers.{i}.self_attn.v_proj.weight": [nkv * hd, h],
        f"{p}.layers.{i}.self_attn.o_proj.weight": [h, nh * hd],
        f"{p}.layers.{i}.self_attn.q_norm.weight": [hd],
        f"{p}.layers.{i}.self_attn.k_norm.weight": [hd],
    }


def _linear_layer(p, t, i):
    h = t["hidden_size"]
    nk, nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
    dk, dv, kernel = t["linear_key_head_dim"], t["linear_value_head_dim"], t["linear_conv_kernel_dim"]
    conv = 2 * nk * dk + nv * dv
    return {
        f"{p}.layers.{i}.linear_attn.dt_bias": [nv],
        f"{p}.layers.{i}.linear_attn.A_log": [nv],
        f"{p}.layers.{i}.linear_attn.conv1d.weight": [conv, 1, kernel],
        f"{p}.layers.{i}.linear_attn.norm.weight": [dv],
        f"{p}.layers.{i}.linear_attn.out_proj.weight": [h, nv * dv],
        f"{p}.layers.{i}.linear_attn.in_proj_qkv.weight": [conv, h],
        f"{p}.layers.{i}.linear_attn.in_proj_z.weight": [nv * dv, h],
        f"{p}.layers.{i}.linear_attn.in_proj_b.weight": [nv, h],
        f"{p}.layers.{i}.linear_attn.in_proj_a.weight": [nv, h],
    }


def _text(p, t):
    h, inter, v = t["hidden_size"], t["intermediate_size"], t["vocab_size"]
    out = {f"{p}.embed_tokens.weight": [v, h]}
    types = t.get("layer_types") or ["full_attention"] * t["num_hidden_layers"]
    for i, kind in enumerate(types):
        out.update(_linear_layer(p, t, i) if kind == "linear_attention" else _dense_layer(p, t, i))
        out.update({
            f"{p}.layers.{i}.mlp.gate_proj.weight": [inter, h],
            f"{p}.layers.{i}.mlp.up_proj.weight": [inter, h],
            f"{p}.layers.{i}.mlp.down_proj.weight": [h, inter],
            f"{p}.layers.{i}.input_layernorm.weight": [h],
            f"{p}.layers.{i}.post_attention_layernorm.weight": [h],
        })  # fmt: skip
    out[f"{p}.norm.weight"] = [h]
    return out


def _vision(p, vc):
    h, inter, c = vc["hidden_size"], vc["intermediate_size"], vc.get("in_channels", 3)
    ps, tps, m = vc["patch_size"], vc["temporal_patch_size"], vc["spatial_merge_size"]
    merged = h * m * m
    out = {f"{p}.patch_embed.proj.weight": [h, c, tps, ps, ps], f"{p}.patch_embed.proj.bias": [h],
           f"{p}.pos_embed.weight": [vc["num_position_embeddings"], h]}  # fmt: skip
    for j in range(vc["depth"]):
        b = f"{p}.blocks.{j}"
        out.update({f"{b}.norm1.weight": [h], f"{b}.norm1.bias": [h], f"{b}.norm2.weight": [h], f"{b}.norm2.bias": [h],
                    f"{b}.attn.qkv.weight": [3 * h, h], f"{b}.attn.qkv.bias": [3 * h],
                    f"{b}.attn.proj.weight": [h, h], f"{b}.attn.proj.bias": [h],
                    f"{b}.mlp.linear_fc1.weight": [inter, h], f"{b}.mlp.linear_fc1.bias": [inter],
                    f"{b}.mlp.linear_fc2.weight": [h, inter], f"{b}.mlp.linear_fc2.bias": [h]})  # fmt: skip
    out.update({f"{p}.merger.norm.weight": [h], f"{p}.merger.norm.bias": [h],
                f"{p}.merger.linear_fc1.weight": [merged, merged], f"{p}.merger.linear_fc1.bias": [merged],
                f"{p}.merger.linear_fc2.weight": [vc["out_hidden_size"], merged],
                f"{p}.merger.linear_fc2.bias": [vc["out_hidden_size"]]})  # fmt: skip
    if vc.get("deepstack_visual_indexes"):
        raise ValueError("deepstack mergers are not written here: keep deepstack_visual_indexes empty")
    return out


def param_shapes(cfg):
    """{checkpoint name: shape} of a Qwen3ForCausalLM or Qwen3_5ForConditionalGeneration config."""
    arch = (cfg.get("architectures") or [""])[0]
    if arch == "Qwen3ForCausalLM":
        out = _text("model", cfg)
    elif arch == "Qwen3_5ForConditionalGeneration":
        out = {**_vision("model.visual", cfg["vision_config"]), **_text("model.language_model", cfg["text_config"])}
    else:
        raise ValueError(f"no weight table for architecture {arch!r}")
    text = cfg.get("text_config") or cfg
    if text.get("tie_word_embeddings") or cfg.get("tie_word_embeddings"):
        raise ValueError("test models need an untied LM head (tie_word_embeddings: false)")
    out["lm_head.weight"] = [text["vocab_size"], text["hidden_size"]]
    return out


# ------------------------------------------------------------------ values


def param_seed(base_seed, name):
    return int(hashlib.sha256(f"{base_seed}:{name}".encode()).hexdigest()[:15], 16)


def init_rule(name, shape):
    """(kind, a, b) for a parameter: normal(mean a, std b), or log-uniform A_log in [a, b]."""
    leaf = name.rsplit(".", 1)[-1]
    if name.endswith("A_log"):
        return "log_uniform", 0.05, 1.0
    if name.endswith("dt_bias"):
        return "normal", 0.0, 0.5
    if leaf == "bias":
        return "normal", 0.0, 0.02
    if len(shape) == 1:  # norm weights
        if ".q_norm." in name or ".k_norm." in name:
            return "normal", 2.0, 0.1
        return "normal", 1.0, 0.05
    if "embed_tokens" in name:
        return "normal", 0.0, 1.0
    if name == "lm_head.weight":
        return "normal", 0.0, 4.0 / math.sqrt(shape[1])
    if "conv1d" in name:
        return "normal", 0.0, 0.5
    if "patch_embed" in name or "pos_embed" in name:
        return "normal", 0.0, 0.02
    return "normal", 0.0, 1.0 / math.sqrt(shape[1])  # linear [out, in]


def make_tensor(name, shape, base_seed=0, device="cpu", dtype=torch.float32):
    kind, a, b = init_rule(name, shape)
    g = torch.Generator(device=device).manual_seed(param_seed(base_seed, name))
    if kind == "log_uniform":
        u = torch.rand(shape, generator=g, device=device, dtype=torch.float32)
        t = torch.log(a + (b - a) * u)
    else:
        t = torch.randn(shape, generator=g, device=device, dtype=torch.float32) * b + a
    return t.to(dtype)


# ------------------------------------------------------------------ safetensors


def save_safetensors(path, tensors, metadata=None):
    """Write {name: tensor} as one .safetensors file (tensors in name order)."""
    header, offset = {}, 0
    names = sorted(tensors)
    for n in names:
        t = tensors[n]
        size = t.numel() * t.element_size()
        header[n] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for n in names:
            t = tensors[n].detach().contiguous().cpu()
            if t.dtype == torch.bfloat16:
                t = t.view(torch.int16)
            t.numpy().tofile(fh)
    os.replace(tmp, path)
    return offset


def read_safetensors_header(path):
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        return json.loads(fh.read(n))


def write_weights(model_dir, base_seed=0, device=None):
    """Random weights for model_dir/config.json -> model_dir/model.safetensors; returns a summary."""
    with open(os.path.join(model_dir, "config.json")) as fh:
        cfg = json.load(fh)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    shapes = param_shapes(cfg)
    tensors = {n: make_tensor(n, s, base_seed, device) for n, s in shapes.items()}
    size = save_safetensors(os.path.join(model_dir, "model.safetensors"), tensors,
                            {"format": "pt", "dflash_deploy": f"random weights, seed {base_seed}"})  # fmt: skip
    # the folder now holds real weights in float32: record it where loaders look
    for key in ("torch_dtype", "dtype"):
        cfg[key] = "float32"
    if "text_config" in cfg:
        cfg["text_config"]["torch_dtype"] = "float32"
    with open(os.path.join(model_dir, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    return {"dir": model_dir, "params": len(tensors), "numel": sum(t.numel() for t in tensors.values()),
            "bytes": size, "seed": base_seed, "device": str(device)}  # fmt: skip


def check_against_transformers(model_dir):
    """Names and shapes against transformers' own model class (None when transformers is absent)."""
    try:
        import transformers
    except ImportError:
        return None
    with open(os.path.join(model_dir, "config.json")) as fh:
        cfg = json.load(fh)
    hf_cfg = transformers.AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = getattr(transformers, cfg["architectures"][0])(hf_cfg)
    theirs = {k: list(v.shape) for k, v in model.state_dict().items()}
    ours = param_shapes(cfg)
    return {"transformers": transformers.__version__,
            "missing": sorted(set(theirs) - set(ours)), "extra": sorted(set(ours) - set(theirs)),
            "shape_mismatch": sorted(k for k in set(ours) & set(theirs) if ours[k] != theirs[k])}  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", nargs="+")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None)
    ap.add_argument("--check", action="store_true", help="compare names/shapes with transformers first")
    a = ap.parse_args(argv)
    rc = 0
    for d in a.model_dir:
        if a.check:
            res = check_against_transformers(d)
            print(json.dumps({"check": d, "result": res}), flush=True)
            if res and (res["missing"] or res["extra"] or res["shape_mismatch"]):
                rc = 1
                continue
        print(json.dumps(write_weights(d, a.seed, a.device)), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
