"""The diagnosis of sglang 0.5.17's and 0.5.23's refusals, from the messages as each wheel and the version's patch
series write them (read from them here), and remedies that name the instance's version's pins and options."""

import re
import zipfile

import pytest
from ansible.module_utils.dflash_common import sglang
from ansible.module_utils.dflash_diagnose.engine import diagnose_text
from sglang_wheel import patch_dir, sglang_wheel

H200 = {"gpus": [{"index": 0, "name": "NVIDIA H200", "sm": "9.0"}], "driver_version": "580.159.04"}
B200 = {"gpus": [{"index": 0, "name": "NVIDIA B200", "sm": "10.0"}], "driver_version": "580.95.05"}
PRO6000 = {"gpus": [{"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "sm": "12.0"}]}


def source(version, rel):
    with zipfile.ZipFile(sglang_wheel(version=version)) as z:
        return z.read(rel).decode()


def ddtree_refusals(version):
    """DDTREE's refusals as the version's series raises them: each ValueError's f-string parts joined."""
    text = (patch_dir(version) / "0001-ddtree-register-algorithm.patch").read_text()
    out = []
    for block in re.findall(r"raise ValueError\(\n((?:\+ {12}.*\n)+)", text):
        parts = re.findall(r'f?"((?:[^"\\]|\\.)*)"', block)
        out.append("".join(parts))
    return [m for m in out if m.startswith(("DDTREE does not support", "DDTREE tree mode"))]


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_ddtree_refusals_of_the_series(version):
    msgs = ddtree_refusals(version)
    assert len(msgs) == 5, msgs
    sg = sglang.facts(version).host()
    for msg in msgs:
        d = diagnose_text(f"ValueError: {msg}\n", sglang=sg)
        flag = re.search(r"--[a-z][\w-]+", msg).group(0)
        assert d["cause"] == "incompatible_options" and d["rule"] == "ddtree_option_refused", (msg, d)
        assert f"DDTREE on sglang {version} refuses {flag}" in d["summary"]
        assert f"leave {flag}" in d["remedy"]


def test_0_5_23s_refusal_of_draft_heads():
    text = (patch_dir("0.5.23") / "0102-ddtree-worker-v2.patch").read_text()
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', text[text.index("DDTREE takes a plain DFlash draft") - 1:][:400])
    msg = "".join(parts[:2])
    d = diagnose_text(f"ValueError: {msg}\n", sglang=sglang.facts("0.5.23").host())
    assert d["cause"] == "incompatible_options" and "Domino / selector / LiLiCorr" in d["summary"]
    assert "algorithm DFLASH" in d["remedy"]


@pytest.mark.parametrize(("version", "fp", "got"), [("0.5.17", PRO6000, "fa4"), ("0.5.17", B200, "flashinfer")])
def test_the_blackwell_hybrid_gdn_assertion(version, fp, got):
    """0.5.17's assertion (attention_registry.py), its allowed set as sglang prints a Python set."""
    reg = source(version, "sglang/srt/layers/attention/attention_registry.py")
    assert "backends are supported on Blackwell GPUs for hybrid GDN models. " in reg
    allowed = sglang.facts(version).blackwell_hybrid_gdn_attention(int(fp["gpus"][0]["sm"].split(".")[0]))
    line = (f"AssertionError: Only {set(allowed)!r} backends are supported on Blackwell GPUs for hybrid GDN models. "
            f"Got attention_backend={got}.")
    d = diagnose_text(line + "\n", fingerprint=fp, sglang=sglang.facts(version).host())
    assert d["cause"] == ("flashinfer_arch" if got == "flashinfer" else "incompatible_options"), d
    assert f"sglang {version} refuses" in d["summary"] and "sgl-project/sglang#35080" in d["remedy"]
    assert f"--attention-backend {allowed[0] if allowed[0] == 'triton' else 'triton'}" in d["remedy"]
    assert f"this server runs {got}" in d["summary"]


def test_flashinfer_gdn_without_a_bfloat16_state():
    src = source("0.5.17", "sglang/srt/server_args.py")
    assert '"--linear-attn-decode-backend flashinfer on SM100+ requires "' in src
    line = "ValueError: --linear-attn-decode-backend flashinfer on SM100+ requires --mamba-ssm-dtype bfloat16, got 'float32'"
    d = diagnose_text(line + "\n", fingerprint=PRO6000, sglang=sglang.facts("0.5.17").host())
    assert d["cause"] == "incompatible_options" and d["rule"] == "gdn_flashinfer_bf16_state"
    assert "sglang 0.5.17 refuses FlashInfer's Gated DeltaNet kernels" in d["summary"]
    assert "blackwell-gdn-flashinfer-bf16-state" in d["remedy"]


def test_ddtree_tree_mask_refusal_in_both_wordings():
    old = "ValueError: DDTREE needs a target attention backend that takes a tree mask (triton, flashinfer); got fa3"
    new = ("ValueError: DDTREE needs a target attention backend that takes a tree mask in verify (triton, flashinfer); "
           "the verify would run on fa3. Pass --attention-backend triton.")
    for line, version in ((old, "0.5.11"), (new, "0.5.17")):
        d = diagnose_text(line + "\n", fingerprint=H200, sglang=sglang.facts(version).host())
        assert d["rule"] == "ddtree_tree_mask_backend" and "this server runs fa3" in d["summary"]
        assert f"sglang {version}'s default is FA3" in d["remedy"]
