"""The fallback rules engine: the rules are data (roles/dflash_instances/vars/main.yml), this evaluates them.

Pure functions, no Ansible import."""

from __future__ import annotations

import re

from ansible.module_utils.dflash_common import sglang as _sg
from ansible.module_utils.dflash_common.argv import flag_values
from ansible.module_utils.dflash_instances import fields as _fields
from ansible.module_utils.dflash_instances import tp as _tp
from ansible.module_utils.dflash_instances.model import radix_cache_disabled, user_args

# --------------------------------------------------------------------------- rules

def _gpus_of(fingerprint, gpus):
    out = []
    for g in (fingerprint or {}).get("gpus") or []:
        if g.get("index") in (gpus or []):
            out.append(g)
    return out


def _probe_get(probe, *keys):
    cur = probe
    for k in keys:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(k)
    return cur


def _probe_ok(entry):
    """True when a probe entry says the import worked, False when it failed, None when unknown."""
    if not isinstance(entry, dict):
        return None
    for key in ("ok", "importable", "available"):
        if isinstance(entry.get(key), bool):
            return entry[key]
    if entry.get("error"):
        return False
    if entry.get("version"):
        return True
    return None


def _first_bool(entry, keys):
    if not isinstance(entry, dict):
        return None
    for key in keys:
        if isinstance(entry.get(key), bool):
            return entry[key]
    return None


def rule_context(instance, fingerprint, probe, host_facts, sg=None):
    """The flat facts the rule conditions may name (docs/fallbacks.md lists them). ``sg``: the facts of the sglang
    version the instance runs (dflash_common/sglang.py; the default version when None)."""
    inst = _fields.effective_instance(instance)
    sg = sg or _sg.facts()
    fp = fingerprint or {}
    hf = host_facts or {}
    gpus = _gpus_of(fp, inst.get("gpus"))
    sms = [s for s in (_fields._sm_of(g) for g in gpus) if s]
    toolkits = []
    for tk in fp.get("cuda_toolkits") or []:
        v = _fields.version_tuple(tk.get("version"))
        if v:
            toolkits.append((v, tk.get("path")))
    default_tk = None
    for v, path in toolkits:
        if path and path.rstrip("/") == "/usr/local/cuda":
            default_tk = v
    if default_tk is None and _fields.version_tuple(fp.get("nvcc_version")):
        default_tk = _fields.version_tuple(fp.get("nvcc_version"))
    if default_tk is None and toolkits:
        default_tk = max(toolkits)[0]
    overlay = hf.get("overlay") or {}
    onvcc = overlay.get("nvcc") or {}
    overlay_v = _fields.version_tuple(onvcc.get("version"))
    best = None
    for v, path in toolkits:
        if best is None or v > best[0]:
            best = (v, path)
    if overlay_v and (best is None or overlay_v >= best[0]):
        best = (overlay_v, onvcc.get("home"))

    xg = _probe_get(probe, "xgrammar")
    xg_ok = _probe_ok(xg)
    st = None
    if isinstance(xg, dict):
        for key in ("structural_tag", "has_structural_tag", "StructuralTag"):
            if isinstance(xg.get(key), bool):
                st = xg[key]
        if st is None and xg_ok is False and "StructuralTag" in str(xg.get("error") or ""):
            st = False
    torch = _probe_get(probe, "torch") or fp.get("torch") or {}
    dd = inst.get("ddtree") or {}
    block, block_src = _fields.block_size_for(inst, (hf.get("drafts") or {}).get(inst.get("draft_model_path")))
    budget = dd.get("budget") if _fields._is_int(dd.get("budget")) else None
    model = str(inst.get("model_path") or "")
    on_tmpfs = model.startswith(_fields.TMPFS_PREFIXES) or bool((hf.get("paths") or {}).get(model, {}).get("tmpfs"))

    def fmt(v):
        return f"{v[0]}.{v[1]}" if v else None

    ctx = {
        "gpu.sm": [fmt(s) for s in sms],
        "gpu.sm_major": sorted({s[0] for s in sms}),
        "gpu.name": [g.get("name") for g in gpus],
        "cuda.jit_default": fmt(default_tk),
        "cuda.best": fmt(best[0]) if best else None,
        "cuda.best_home": best[1] if best else None,
        "cuda.toolkits": [fmt(v) for v, _ in toolkits],
        "overlay.nvcc": fmt(overlay_v),
        "overlay.nvcc_home": onvcc.get("home"),
        "driver.cuda": fp.get("driver_cuda_version"),
        "torch.cuda": torch.get("cuda") if isinstance(torch, dict) else None,
        "xgrammar.importable": xg_ok,
        "xgrammar.version": xg.get("version") if isinstance(xg, dict) else None,
        "xgrammar.structural_tag": st,
        "xgrammar.error": (xg.get("error") or None) if isinstance(xg, dict) else None,
        "flashinfer.importable": _probe_ok(_probe_get(probe, "flashinfer")),
        "torch.importable": _probe_ok(_probe_get(probe, "torch")),
        "sgl_kernel.fa3": _first_bool(_probe_get(probe, "sgl_kernel"), ("fa3", "flash_ops", "fa3_available"))
        if _first_bool(_probe_get(probe, "sgl_kernel"), ("fa3", "flash_ops", "fa3_available")) is not None
        else (hf.get("sgl_kernel") or {}).get("fa3"),
        "instance.name": inst.get("name"),
        "instance.algorithm": inst.get("algorithm"),
        "instance.speculative": inst.get("algorithm") in ("DFLASH", "DDTREE"),
        "instance.model_path": model,
        "instance.model_on_tmpfs": on_tmpfs,
        "instance.model_source": inst.get("model_source"),
        "instance.tp": inst.get("tp"),
        "instance.block_size": block if inst.get("algorithm") in ("DFLASH", "DDTREE") else None,
        "instance.block_size_source": block_src if inst.get("algorithm") in ("DFLASH", "DDTREE") else None,
        "instance.ddtree_budget": budget if inst.get("algorithm") == "DDTREE" else None,
        "instance.ddtree_verify_tokens": budget + 1 if budget and inst.get("algorithm") == "DDTREE" else None,
        "instance.radix_cache_disabled": radix_cache_disabled(inst),
        "target.architecture": _fields._target_facts_of(inst, hf).get("architecture"),
        "target.hybrid": _fields._target_facts_of(inst, hf).get("hybrid"),
        "target.linear_attention": _fields._target_facts_of(inst, hf).get("linear_attention"),
        "target.radix_with_spec": _fields._target_facts_of(inst, hf).get("radix_with_spec"),
    }
    args = user_args(inst)
    ctx.update({
        # what the instance's own flags (extra_args, pin_flags) choose, for the version rules
        "instance.attention_backend": (flag_values(args, "--attention-backend") or [None])[-1],
        "instance.linear_attn_flashinfer": any("flashinfer" in flag_values(args, f) for f in (
            "--linear-attn-backend", "--linear-attn-decode-backend", "--linear-attn-verify-backend")),
        "instance.mamba_ssm_dtype": (flag_values(args, "--mamba-ssm-dtype") or [None])[-1],
    })
    ctx.update(_tp.rule_facts(inst, fp))  # tp.* (dflash_instances/tp.py)
    ctx.update(sglang_facts(sg, sorted({s[0] for s in sms})))
    return ctx


def sglang_facts(sg=None, sm_majors=()) -> dict:
    """sglang.* facts of the rules' context: what the instance's sglang version accepts (dflash_common/sglang.py),
    so that a rule's condition and reason name the same backends and pins the validation and the diagnosis do.
    ``sm_majors``: the instance's GPUs' SM majors (the Blackwell attention sets for hybrid GDN targets)."""
    sg = sg or _sg.facts()
    gdn = sorted({b for m in sm_majors for b in (sg.blackwell_hybrid_gdn_attention(m) or ())})
    return {
        "sglang.version": sg.version,
        "sglang.hopper_default_attention": sg.hopper_default_attention,
        "sglang.tree_mask_attention_backends": list(sg.tree_mask_attention_backends),
        "sglang.tree_mask_attention": _sg.either(sg.tree_mask_attention_backends),
        "sglang.pin_xgrammar": sg.pins.get("xgrammar"),
        "sglang.pin_flashinfer": sg.pins.get("flashinfer-python"),
        "sglang.pin_sglang_kernel": sg.pins.get("sglang-kernel"),
        "sglang.mamba_strategy_flag": sg.mamba_strategy_flag,
        "sglang.blackwell_gdn_attention": _sg.either(gdn) if gdn else None,
    }


_OPS = ("eq", "ne", "in", "contains", "version_lt", "version_ge", "is", "set")


def eval_condition(cond, ctx):
    """Evaluate the rules table's condition language. -> (True|False|None, text).

    cond: {all: [...]} | {any: [...]} | {not: cond} | {fact: NAME, OP: VALUE}
    OP: eq, ne, in (value in list), contains (list fact contains value), version_lt, version_ge,
        is (true/false/null identity), set (fact is not null/empty == VALUE).
    None means unknown: a fact the condition needs was not reported.
    """
    if not isinstance(cond, dict):
        raise TypeError(f"condition must be a mapping, got {cond!r}")
    if "all" in cond or "any" in cond:
        kind = "all" if "all" in cond else "any"
        results = [eval_condition(c, ctx) for c in cond[kind]]
        vals = [r[0] for r in results]
        if kind == "all":
            if False in vals:
                return False, next(t for v, t in results if v is False)
            if None in vals:
                return None, next(t for v, t in results if v is None)
            return True, " and ".join(t for _, t in results)
        if True in vals:
            return True, next(t for v, t in results if v is True)
        if None in vals:
            return None, next(t for v, t in results if v is None)
        return False, " and ".join(t for _, t in results)
    if "not" in cond:
        v, t = eval_condition(cond["not"], ctx)
        return (None if v is None else not v), f"not ({t})"
    fact = cond.get("fact")
    ops = [k for k in cond if k in _OPS]
    if not fact or len(ops) != 1 or set(cond) - {"fact", *ops}:
        raise ValueError(f"bad condition {cond!r}: needs 'fact' and exactly one of {', '.join(_OPS)}")
    if fact not in ctx:
        raise ValueError(f"condition names unknown fact '{fact}' (known: {', '.join(sorted(ctx))})")
    op, want = ops[0], cond[ops[0]]
    have = ctx[fact]
    shown = f"{fact}={have!r}"
    if op == "set":
        present = have not in (None, "", [], {})
        return present == bool(want), f"{fact} {'is' if present else 'is not'} set"
    if op == "is":
        if have is None and want is not None:
            return None, f"{fact} is unknown (not reported)"
        return have is want, shown
    if have is None or have == []:
        return None, f"{fact} is unknown (not reported)"
    if op == "eq":
        return have == want, shown
    if op == "ne":
        return have != want, shown
    if op == "in":
        return have in want, shown
    if op == "contains":
        return want in have, shown
    hv, wv = _fields.version_tuple(have), _fields.version_tuple(want)
    if hv is None:
        return None, f"{fact}={have!r} is not a version"
    if op == "version_lt":
        return hv < wv, f"{fact}={have} < {want}" if hv < wv else f"{fact}={have} >= {want}"
    return hv >= wv, f"{fact}={have} >= {want}" if hv >= wv else f"{fact}={have} < {want}"


_TPL = re.compile(r"\{([a-z0-9_]+\.[a-z0-9_]+)\}")


def render_text(text, ctx):
    def sub(m):
        v = ctx.get(m.group(1))
        if isinstance(v, list):
            return ", ".join(str(x) for x in v)
        return str(v)
    return _TPL.sub(sub, str(text or ""))


def check_rules_table(rules):
    """Structural errors of the rules table (names unique, conditions well-formed)."""
    errors, seen = [], set()
    dummy = rule_context({"name": "x", "gpus": [0]}, {}, {}, {})
    for i, rule in enumerate(rules or []):
        name = rule.get("name") if isinstance(rule, dict) else None
        if not name:
            errors.append(f"rule #{i + 1}: no name")
            continue
        if name in seen:
            errors.append(f"rule {name}: duplicate name")
        seen.add(name)
        if not rule.get("reason"):
            errors.append(f"rule {name}: no reason")
        for key in ("when", "unless"):
            if key in rule:
                try:
                    eval_condition(rule[key], dummy)
                except (TypeError, ValueError) as exc:
                    errors.append(f"rule {name}: {key}: {exc}")
        if "versions" in rule:
            why = _sg.range_error(rule["versions"]) if isinstance(rule["versions"], str) else "not a string"
            if why:
                errors.append(f"rule {name}: versions: {why}")
        extra = set(rule) - {"name", "when", "unless", "unless_reason", "flags", "env", "warn", "reason",
                             "prefer", "source", "versions"}
        if extra:
            errors.append(f"rule {name}: unknown keys {sorted(extra)}")
    return errors


def evaluate_rules(rules, ctx, disabled=(), user_flags=()):
    """-> (applied [{rule, reason, flags, env, warn, prefer}], skipped [{rule, reason}]).

    A rule applies when the instance's sglang version (``sglang.version`` of ``ctx``) is in its ``versions`` range
    (none: every version), `when` is true and `unless` (the cause was removed) is not; a disabled
    rule or one whose every flag the user set is skipped with the reason.
    """
    applied, skipped = [], []
    user_flags = set(user_flags or ())
    version = ctx.get("sglang.version")
    for rule in rules or []:
        name = rule["name"]
        if name in (disabled or ()):
            skipped.append({"rule": name, "reason": "switched off by the inventory (disabled_rules)"})
            continue
        if rule.get("versions") and version and not _sg.in_range(version, rule["versions"]):
            skipped.append({"rule": name, "reason": f"holds for sglang {rule['versions']}; this instance runs "
                                                    f"sglang {version}"})
            continue
        ok, why = eval_condition(rule.get("when") or {"all": []}, ctx)
        if ok is None:
            skipped.append({"rule": name, "reason": f"not evaluated: {why}"})
            continue
        if not ok:
            skipped.append({"rule": name, "reason": f"condition not met: {why}"})
            continue
        if rule.get("unless"):
            uok, uwhy = eval_condition(rule["unless"], ctx)
            if uok:
                skipped.append({"rule": name, "cause_removed": True,
                                "reason": render_text(rule.get("unless_reason") or f"cause removed: {uwhy}", ctx)})
                continue
        flags = {str(k): (None if v is None else str(v)) for k, v in (rule.get("flags") or {}).items()}
        pinned = [f for f in flags if f in user_flags]
        for f in pinned:
            flags.pop(f)
        if pinned and not flags and not rule.get("env") and not rule.get("warn"):
            skipped.append({"rule": name, "reason": f"the inventory sets {', '.join(pinned)} itself "
                                                    "(pin_flags / extra_args win over rules)"})
            continue
        entry = {"rule": name, "reason": render_text(rule["reason"], ctx), "flags": flags_to_args(flags)}
        if pinned:
            entry["overridden_by_user"] = pinned
        if rule.get("env"):
            entry["env"] = {k: render_text(v, ctx) for k, v in rule["env"].items()}
        if rule.get("warn"):
            entry["warn"] = True
        if rule.get("prefer"):
            entry["prefer"] = render_text(rule["prefer"], ctx)
        applied.append(entry)
    return applied, skipped


def flags_to_args(flags):
    args = []
    for k, v in flags.items():
        args.append(k)
        if v is not None:
            args.append(v)
    return args
