"""The flags fact: each instance's sglang arguments and environment, from its fields and the rules applied.

Pure functions, no Ansible import."""

from __future__ import annotations

from ansible.module_utils.dflash_common import secrets as dflash_secrets
from ansible.module_utils.dflash_common import sglang as _sg
from ansible.module_utils.dflash_common.argv import split_flags
from ansible.module_utils.dflash_common.net import local_url
from ansible.module_utils.dflash_instances import fields as _fields
from ansible.module_utils.dflash_instances import rules as _rules
from ansible.module_utils.dflash_instances import tp as _tp

# --------------------------------------------------------------------------- flags fact

def build_args(inst, fallback_args, bind_host="127.0.0.1"):
    """Exactly what follows `-m sglang.launch_server` (API keys never: the launcher adds them in-process)."""
    inst = _fields.effective_instance(inst)
    host = inst.get("host") or bind_host
    args = ["--model-path", str(inst["model_path"]), "--host", str(host), "--port", str(inst["port"]),
            "--tp-size", str(inst["tp"])]
    if inst.get("mem_fraction_static") is not None:
        args += ["--mem-fraction-static", str(inst["mem_fraction_static"])]
    if inst.get("context_length") is not None:
        args += ["--context-length", str(inst["context_length"])]
    algo = inst["algorithm"]
    if algo in ("DFLASH", "DDTREE"):
        args += ["--speculative-algorithm", algo, "--speculative-draft-model-path", str(inst["draft_model_path"])]
    if algo == "DDTREE":
        dd = inst["ddtree"]
        args += ["--speculative-ddtree-budget", str(dd["budget"]), "--speculative-ddtree-topk", str(dd["topk"]),
                 "--speculative-ddtree-mode", str(dd["mode"])]
    args += _tp.launch_args(inst)  # --enable-metrics, multi-node flags (dflash_instances/tp.py)
    if inst.get("reasoning_parser"):
        # reasoning models (Qwen3.6 thinks first): the reply's thinking goes to reasoning_content
        args += ["--reasoning-parser", str(inst["reasoning_parser"])]
    args += list(fallback_args)
    args += [str(a) for a in inst["extra_args"]]
    args += _fields.pin_args(inst["pin_flags"])
    return args


def build_env(inst, host_facts, tree, rule_env):
    inst = _fields.effective_instance(inst)
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # CUDA indexes = nvidia-smi indexes
           "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in inst["gpus"])}
    libs = ((host_facts or {}).get("overlay") or {}).get("nvidia_lib_dirs") or []
    if libs:
        env["LD_LIBRARY_PATH"] = ":".join(libs)
    if isinstance(tree, dict) and tree.get("path"):
        env["PYTHONPATH"] = str(tree["path"])
    env.update(rule_env or {})
    for k, v in inst["env"].items():
        if not dflash_secrets.is_secret_env(k):  # credentials go to the env file only (dflash_secrets), never into facts
            env[str(k)] = str(v)
    return env


def runtime_of(inst, host_version, probe, host_facts, tree, runtimes):
    """(version, probe, host facts, tree, venv) an instance runs with: its sglang version's runtime
    (``runtimes``: {version: {probe, tree, venv}}, the layers and tree stages' per-version facts; the host facts'
    ``runtimes`` hold that version's final-layer CUDA pieces and FA3), else the host's (``probe``, ``tree``)."""
    version = _fields.instance_version(inst, host_version or _sg.default_version())
    rt = (runtimes or {}).get(version)
    if rt is None:
        return version, probe, host_facts, tree, None
    hf = dict(host_facts or {})
    own = ((host_facts or {}).get("runtimes") or {}).get(version)
    if own is not None:
        hf["overlay"], hf["sgl_kernel"] = own.get("overlay") or {}, own.get("sgl_kernel") or {}
    return version, rt.get("probe"), hf, rt.get("tree"), rt.get("venv")


def plan_instance(inst, rules, fingerprint, probe, host_facts, tree, host_disabled=(), bind_host="127.0.0.1",
                  host_version=None, runtimes=None):
    """One instance's entry of the dflash_flags fact, for the sglang version it runs (``host_version``: the host's,
    ``runtimes``: each version's probe, tree and venv; runtime_of)."""
    inst = _fields.effective_instance(inst)
    version, probe, host_facts, tree, venv = runtime_of(inst, host_version, probe, host_facts, tree, runtimes)
    ctx = _rules.rule_context(inst, fingerprint, probe, host_facts, _sg.facts(version))
    user_flags = set(split_flags([str(a) for a in inst["extra_args"]])) | set(inst["pin_flags"])
    disabled = set(host_disabled or ()) | set(inst["disabled_rules"])
    applied, skipped = _rules.evaluate_rules(rules, ctx, disabled, user_flags)
    fallback, rule_env = [], {}
    for a in applied:
        fallback += a["flags"]
        rule_env.update(a.get("env") or {})
    out = {
        "args": build_args(inst, fallback, bind_host),
        "env": build_env(inst, host_facts, tree, rule_env),
        "applied": applied,
        "skipped": skipped,
        "removed_cause": [s for s in skipped if s.get("cause_removed")],
        "unit": f"dflash-{inst['name']}.service",
        "port": inst["port"],
        # where the instance listens, and how it is reached from its own host (the smoke test, the activation):
        # recorded in the release manifest, so that nothing reads them back out of the arguments
        "host": str(inst.get("host") or bind_host),
        "base_url": local_url(inst.get("host") or bind_host, inst["port"]),
        "gpus": list(inst["gpus"]),
        "algorithm": inst["algorithm"],
        "model_source": inst.get("model_source"),
        "model_path": inst.get("model_path"),
        "secrets": sorted(dflash_secrets.instance_secrets(inst)),
        "sglang_version": version,
    }
    if runtimes:
        # the release runs this instance with its version's venv and tree (dflash_release/manifest.py)
        out["venv"] = venv
        out["tree_path"] = (tree or {}).get("path") if isinstance(tree, dict) else None
    return out


def plan_flags(instances, rules, fingerprint, probe, host_facts, tree, host_disabled=(), bind_host="127.0.0.1",
               host_version=None, runtimes=None):
    return {str(i["name"]): plan_instance(i, rules, fingerprint, probe, host_facts, tree, host_disabled, bind_host,
                                          host_version, runtimes)
            for i in instances or []}


def flags_report(flags):
    """Human lines for the play output: one per instance + one per applied rule."""
    lines = []
    for name, f in sorted((flags or {}).items()):
        lines.append(f"{name}: python -m sglang.launch_server {' '.join(f['args'])}")
        if f.get("sglang_version"):
            lines.append(f"  sglang {f['sglang_version']}" + (f" (venv {f['venv']}, tree {f['tree_path']})"
                                                               if f.get("venv") else ""))
        for a in f["applied"]:
            if a.get("warn"):
                lines.append(f"  WARNING rule {a['rule']}: {a['reason']}")
            else:
                what = " ".join(a["flags"]) or " ".join(f"{k}={v}" for k, v in (a.get("env") or {}).items())
                lines.append(f"  rule {a['rule']}: {what or 'note'} -- {a['reason']}")
            if a.get("prefer"):
                lines.append(f"    prefer: {a['prefer']}")
        for s in f.get("removed_cause") or []:
            lines.append(f"  rule {s['rule']} not needed: {s['reason']}")
    return lines
