"""The remedies' words for the sglang version an instance runs: placeholders ``{sg_*}`` of the rule templates.

The wait hands the diagnosis the version's facts (dflash_common/sglang.py ``Facts.host``: version, pins, the
attention backends DDTREE's verify takes, sglang's Hopper default), from the release manifest's entry of the
instance; without them (a log diagnosed on its own) the words stay generic. Pure functions, no Ansible import.
"""

from __future__ import annotations

from ansible.module_utils.dflash_common.sglang import either


def fill(sglang: dict | None) -> dict:
    """{sg_version, sg_xgrammar_pin, sg_kernel_pair, sg_kernel_pin, sg_tree_mask, sg_tree_mask_not_triton,
    sg_hopper_default, sg_strategy_flag} of one version's facts (``None``: generic words)."""
    sg = sglang if isinstance(sglang, dict) else {}
    version = sg.get("version")
    pins = sg.get("pins") or {}
    tree = list(sg.get("tree_mask_attention_backends") or ("triton", "flashinfer"))
    named = f"sglang {version}" if version else "this sglang"
    xgr, kernel, torch = pins.get("xgrammar"), pins.get("sglang-kernel"), pins.get("torch")
    return {
        "sg_version": named,
        "sg_xgrammar_pin": (f"xgrammar=={xgr} (what {named} pins)" if xgr
                            else "the xgrammar version this sglang pins"),
        "sg_kernel_pair": (f"{named} pairs sglang-kernel {kernel} with torch {torch}" if kernel and torch
                           else "each sglang release pins one sglang-kernel for one torch"),
        "sg_kernel_pin": f"{named} -> sglang-kernel {kernel}" if kernel else "the sglang-kernel this sglang pins",
        "sg_tree_mask": either(tree),
        "sg_tree_mask_not_triton": next((b for b in tree if b != "triton"), "flashinfer"),
        "sg_hopper_default": str(sg.get("hopper_default_attention") or "fa3").upper(),
        "sg_strategy_flag": sg.get("mamba_strategy_flag") or "--mamba-scheduler-strategy",
    }
