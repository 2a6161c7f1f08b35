"""The instance fields: constants, defaults and small helpers shared by validation, rules and flags.

Pure functions, no Ansible import."""

from __future__ import annotations

import re

from ansible.module_utils.dflash_common.argv import split_flags
from ansible.module_utils.dflash_instances import tp as _tp

ALGORITHMS = ("DFLASH", "DDTREE", "NONE")
DDTREE_MODES = ("tree", "shadow-linear")
DEFAULT_BLOCK_SIZE = 16
PORT_MIN = 1024  # the unit runs as a non-root user without CAP_NET_BIND_SERVICE
PORT_MAX = 65535
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,47}$")
VERSION_RE = re.compile(r"(\d+)\.(\d+)")
INSTANCE_KEYS = {
    "name", "gpus", "port", "algorithm", "model_path", "draft_model_path", "tp",
    "mem_fraction_static", "context_length", "ddtree", "allow_busy_gpus", "extra_args", "env",
    "pin_flags", "disabled_rules", "model_source", "host", "api_key", "admin_api_key", "reasoning_parser",
    "smoke_gates", "sglang_version",
} | _tp.TP_KEYS
REASONING_PARSER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
DDTREE_KEYS = {"budget", "topk", "mode"}
DDTREE_DEFAULTS = {"budget": 15, "topk": 8, "mode": "tree"}
# Flags the toolkit derives from instance fields: setting them through extra_args or pin_flags
# would make the field and the command line disagree.
MANAGED_FLAGS = {
    "--model-path": "model_path", "--model": "model_path", "--port": "port",
    "--tp-size": "tp", "--tensor-parallel-size": "tp", "--tp": "tp",
    "--mem-fraction-static": "mem_fraction_static", "--context-length": "context_length",
    "--speculative-algorithm": "algorithm", "--speculative-draft-model-path": "draft_model_path",
    "--speculative-draft-model": "draft_model_path",
    "--speculative-ddtree-budget": "ddtree.budget", "--speculative-ddtree-topk": "ddtree.topk",
    "--speculative-ddtree-mode": "ddtree.mode", "--reasoning-parser": "reasoning_parser",
}
# Environment derived from fields; the user's env may not override them.
MANAGED_ENV = {"CUDA_VISIBLE_DEVICES": "gpus", "CUDA_DEVICE_ORDER": "gpus"}
BLOCK_SIZE_FLAGS = ("--speculative-dflash-block-size", "--speculative-num-draft-tokens")
TMPFS_PREFIXES = ("/dev/shm/", "/run/shm/")
HOME_PREFIXES = ("/home/", "/root/", "/run/user/")


# --------------------------------------------------------------------------- helpers

def version_tuple(value):
    """'12.8' / 'V12.8.93' / 12.8 / 'release 13.0' -> (12, 8); None when no version is in it."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(x, int) for x in value):
        return tuple(value[:2])
    m = VERSION_RE.search(str(value))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _label(inst, idx):
    name = inst.get("name") if isinstance(inst, dict) else None
    return f"instance '{name}'" if isinstance(name, str) and name else f"instance #{idx + 1}"


def _err(host, inst, idx, field, msg):
    return f"{host}: {_label(inst, idx)}: field '{field}': {msg}"


def _sm_of(gpu):
    sm = gpu.get("sm")
    if sm is None and gpu.get("compute_cap") is not None:
        sm = gpu.get("compute_cap")
    v = version_tuple(sm)
    return v


def effective_instance(inst):
    """An instance with the schema's defaults applied (tp, ddtree, lists/maps)."""
    out = dict(inst)
    gpus = inst.get("gpus") if isinstance(inst.get("gpus"), list) else []
    if out.get("tp") is None:
        out["tp"] = len(gpus) * _tp.nnodes_of(inst)
    out["algorithm"] = str(inst.get("algorithm") or "DFLASH").upper()
    dd = dict(DDTREE_DEFAULTS)
    if isinstance(inst.get("ddtree"), dict):
        dd.update({k: v for k, v in inst["ddtree"].items() if v is not None})
    out["ddtree"] = dd
    out["allow_busy_gpus"] = bool(inst.get("allow_busy_gpus", False))
    # a value of the wrong shape is the validation's to report (in words): here it counts as empty
    for key in ("extra_args", "disabled_rules"):
        out[key] = list(inst[key]) if isinstance(inst.get(key), list) else []
    for key in ("env", "pin_flags"):
        out[key] = dict(inst[key]) if isinstance(inst.get(key), dict) else {}
    return out


def pin_args(pins):
    """pin_flags {flag: value} -> argv. True/None -> bare flag, False -> omitted."""
    args = []
    for flag, value in (pins or {}).items():
        if value is False:
            continue
        args.append(str(flag))
        if value is not True and value is not None:
            args.append(str(value))
    return args


def block_size_for(inst, draft_facts):
    """The verify block of a DFlash draft: explicit flag > draft config > 16. -> (size, source)."""
    flags = split_flags(list(inst.get("extra_args") or []) + pin_args(inst.get("pin_flags")))
    for flag in BLOCK_SIZE_FLAGS:
        if flags.get(flag) is not None:
            try:
                return int(flags[flag]), flag
            except ValueError:
                pass
    if draft_facts and draft_facts.get("block_size") is not None:
        return int(draft_facts["block_size"]), draft_facts.get("block_size_source") or "config.json"
    return DEFAULT_BLOCK_SIZE, "sglang's default (no block_size in the draft's config.json)"

def instance_version(inst, host_version):
    """The sglang version an instance runs: its own ``sglang_version``, else the host's (dflash_sglang_version)."""
    own = inst.get("sglang_version") if isinstance(inst, dict) else None
    return str(own) if own not in (None, "") else (str(host_version) if host_version is not None else None)


def _target_facts_of(inst, host_facts):
    """The target's config facts gathered on the host (model_path, else the staged model_source)."""
    targets = (host_facts or {}).get("targets") or {}
    return targets.get(inst.get("model_path")) or targets.get(inst.get("model_source")) or {}
