"""Instances: placement validation, fallback rules, sglang argument lists, host facts.

Pure functions, no Ansible import. Used on the controller by filter_plugins/dflash_instances.py
(validation, rules, arguments) and on the host by library/dflash_instances_facts.py (read-only
host facts: listening ports and their owners, model/draft paths, the draft's block size, the
final layer's CUDA libraries and nvcc, installed dflash-*.service units).
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess

try:  # the unit of a process (cgroup, or runner-managed on hosts without systemd): dflash_runner.py
    # (unit_from_cgroup stays importable from here: the tests call it through this module)
    from ansible.module_utils.dflash_runner import process_unit, unit_from_cgroup
except ImportError:
    from dflash_runner import process_unit, unit_from_cgroup  # noqa: F401
try:  # tensor parallel / multi-node fields, their checks, rule facts and flags: dflash_tp.py
    from ansible.module_utils import dflash_tp as _tp
except ImportError:
    import dflash_tp as _tp
try:  # the instance's smoke_gates field (module_utils/dflash_gates_config.py)
    from ansible.module_utils.dflash_gates_config import gate_errors
except ImportError:
    from dflash_gates_config import gate_errors
try:  # the target's config.json: hybrid (linear-attention) targets
    from ansible.module_utils.dflash_model import hybrid_instance_errors, radix_cache_disabled, target_facts
except ImportError:
    from dflash_model import hybrid_instance_errors, radix_cache_disabled, target_facts
try:  # flags against the parser, env, secrets, bind address, resolved paths; free space
    from ansible.module_utils import dflash_checks, dflash_diskspace, dflash_secrets
except ImportError:
    import dflash_checks
    import dflash_diskspace
    import dflash_secrets


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
    "smoke_gates",
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


def split_flags(args):
    """['--a', 'x', '--b=y', '--c'] -> {'--a': 'x', '--b': 'y', '--c': None} (last wins)."""
    out = {}
    i = 0
    args = list(args or [])
    while i < len(args):
        tok = str(args[i])
        if tok.startswith("--"):
            if "=" in tok:
                k, v = tok.split("=", 1)
                out[k] = v
            elif i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
                out[tok] = str(args[i + 1])
                i += 1
            else:
                out[tok] = None
        i += 1
    return out


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


# --------------------------------------------------------------------------- validation

def is_ours(listener, service_user="sglang"):
    """A listening socket held by one of our dflash-* units.

    The socket's process is mapped to its unit through /proc/<pid>/cgroup; when that process
    cannot be read (e.g. root without CAP_SYS_PTRACE in a container), a socket owned by the
    dedicated service user counts as ours: nothing else runs as that user.
    """
    unit = listener.get("unit")
    if unit:
        return str(unit).startswith("dflash-")
    return bool(service_user) and listener.get("user") == service_user


def validate_instances(host, instances, fingerprint, host_facts, rule_names=(), host_disabled_rules=(),
                       protect_home=True, gpu_checker=None, service_user="sglang", server_flags=None,
                       sglang_version="0.5.11", prefix=None, removed=()):
    """All placement errors for one host, each naming host, instance and field. [] = valid.

    host_facts: what library/dflash_instances_facts.py gathered on the host:
      {listeners: [{port, addr, pid, comm, unit}], paths: {path: {exists, isdir, realpath, ...}},
       drafts: {path: {block_size, block_size_source, error}}, current: {id, instances: {name: {port, gpus}}}}
    gpu_checker: check_requested_gpus(fingerprint, requests) from dflash_fingerprint.
    server_flags: {flag: (dest, kind)} of the pinned sglang (dflash_server_flags), None = not checked.
    removed: instances the user asked to remove (their ports and GPUs are free after the activation).
    """
    errors = []
    host_facts = host_facts or {}
    paths = host_facts.get("paths") or {}
    drafts = host_facts.get("drafts") or {}
    rule_names = set(rule_names or ())
    if instances is None:
        return errors
    if not isinstance(instances, list):
        return [f"{host}: field 'dflash_instances': must be a list of instances, got {type(instances).__name__}"]

    for rule in host_disabled_rules or ():
        if rule_names and rule not in rule_names:
            errors.append(f"{host}: field 'dflash_instances_disabled_rules': unknown rule '{rule}' "
                          f"(known: {', '.join(sorted(rule_names))})")

    names, ports, gpu_owner = {}, {}, {}
    for idx, raw in enumerate(instances):
        if not isinstance(raw, dict):
            errors.append(f"{host}: instance #{idx + 1}: must be a mapping, got {type(raw).__name__}")
            continue
        e = []

        def add(field, msg, _raw=raw, _idx=idx, _e=e):
            _e.append(_err(host, _raw, _idx, field, msg))

        unknown = sorted(set(raw) - INSTANCE_KEYS)
        for key in unknown:
            add(key, f"unknown field (known: {', '.join(sorted(INSTANCE_KEYS))})")
        inst = effective_instance(raw)

        # name
        name = raw.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            add("name", f"{name!r} is not a valid instance name: lower-case letters, digits, '-' and '_', "
                        "starting with a letter or digit, at most 48 characters (it becomes the unit "
                        "name dflash-<name>.service)")
        elif name.startswith("stage-"):
            add("name", f"'{name}' must not start with 'stage-' (dflash-stage-*.service are the "
                        "model staging units)")
        elif name == "guard":
            add("name", "'guard' is taken: dflash-guard.service is the toolkit's boot guard")
        elif name in names:
            add("name", f"duplicate name '{name}' (also instance #{names[name] + 1})")
        else:
            names[name] = idx

        # gpus
        gpus = raw.get("gpus")
        gpus_ok = isinstance(gpus, list) and gpus and all(_is_int(g) and g >= 0 for g in gpus)
        if not gpus_ok:
            add("gpus", f"must be a non-empty list of GPU indexes (integers >= 0), got {gpus!r}")
        elif len(set(gpus)) != len(gpus):
            add("gpus", f"lists a GPU twice: {gpus}")
            gpus_ok = False

        # tp
        tp = inst.get("tp")
        if not _is_int(tp) or tp < 1:
            add("tp", f"must be a positive integer, got {tp!r}")
        elif gpus_ok and tp != len(gpus) * _tp.nnodes_of(raw):
            add("tp", f"tp {tp} does not match the {len(gpus)} GPU(s) {gpus}"
                      f"{f' x nnodes {_tp.nnodes_of(raw)}' if _tp.nnodes_of(raw) > 1 else ''}: tensor parallelism "
                      "uses exactly one GPU per rank (set tp to len(gpus) x nnodes or leave it unset)")

        # port
        port = raw.get("port")
        if not _is_int(port):
            add("port", f"must be an integer, got {port!r}")
        elif not PORT_MIN <= port <= PORT_MAX:
            add("port", f"{port} is out of range {PORT_MIN}..{PORT_MAX} (the server runs as a "
                        "non-root user without CAP_NET_BIND_SERVICE)")
        else:
            if port in ports:
                add("port", f"port {port} is also used by {_label(instances[ports[port]], ports[port])}")
            else:
                ports[port] = idx
            for lis in host_facts.get("listeners") or []:
                if lis.get("port") == port and not is_ours(lis, service_user):
                    who = ", ".join(x for x in (
                        f"pid {lis['pid']}" if lis.get("pid") else "",
                        str(lis.get("comm") or ""),
                        f"unit {lis['unit']}" if lis.get("unit") else "",
                        f"user {lis['user']}" if lis.get("user") and not lis.get("unit") else "") if x)
                    add("port", f"port {port} is already listening on the host ({lis.get('addr')}:{port}"
                                f"{', ' + who if who else ''}) and it is not one of our dflash-* units")
                    break

        # algorithm + draft
        algo = inst["algorithm"]
        if algo not in ALGORITHMS:
            add("algorithm", f"{raw.get('algorithm')!r} is not one of {', '.join(ALGORITHMS)}")
        draft = raw.get("draft_model_path")
        if algo in ("DFLASH", "DDTREE") and not draft:
            add("draft_model_path", f"{algo} needs a draft model (draft_model_path is empty)")

        # paths
        model = raw.get("model_path")
        for field, path in (("model_path", model), ("draft_model_path", draft if algo != "NONE" else None),
                            ("model_source", raw.get("model_source"))):
            if field == "model_path" and not path:
                add(field, "is required")
                continue
            if not path:
                continue
            if not isinstance(path, str) or not path.startswith("/"):
                add(field, f"must be an absolute path, got {path!r}")
                continue
            if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in path):
                add(field, f"{path!r} contains whitespace or a control character, which cannot be passed "
                           "through $DFLASH_ARGS")
                continue
            problem = dflash_checks.resolved_path_problem(field, path, (paths.get(path) or {}).get("realpath"), protect_home,
                                            HOME_PREFIXES, prefix,
                                            staged=field == "model_path" and bool(raw.get("model_source")),
                                            tmpfs_prefixes=TMPFS_PREFIXES)
            if problem:
                if problem.startswith("model_source: "):
                    add("model_source", problem[len("model_source: "):])
                else:
                    add(field, problem)
                continue
            if field == "model_path" and raw.get("model_source"):
                continue  # staged by dflash-stage-<name>.service: may be absent now (e.g. after a reboot)
            pf = paths.get(path)
            if pf is None:
                add(field, f"{path} was not checked on the host (internal error: path facts missing)")
            elif not pf.get("exists"):
                add(field, f"{path} does not exist on the host")
            elif not pf.get("isdir"):
                add(field, f"{path} is not a directory")

        # ddtree
        dd = inst["ddtree"]
        if isinstance(raw.get("ddtree"), dict):
            for key in sorted(set(raw["ddtree"]) - DDTREE_KEYS):
                add(f"ddtree.{key}", f"unknown field (known: {', '.join(sorted(DDTREE_KEYS))})")
        elif raw.get("ddtree") is not None:
            add("ddtree", f"must be a mapping, got {raw.get('ddtree')!r}")
        budget, topk, mode = dd.get("budget"), dd.get("topk"), dd.get("mode")
        if not _is_int(budget) or budget < 1:
            add("ddtree.budget", f"must be a positive integer, got {budget!r}")
        if not _is_int(topk) or topk < 1:
            add("ddtree.topk", f"must be a positive integer, got {topk!r}")
        if mode not in DDTREE_MODES:
            add("ddtree.mode", f"{mode!r} is not one of {', '.join(DDTREE_MODES)}")
        draft_seen = (paths.get(draft) or {}).get("exists", True) if isinstance(draft, str) else False
        if algo == "DDTREE" and draft and draft_seen:
            size, source = block_size_for(inst, drafts.get(draft))
            # the patched server's rule (0002/0102): one step verifies the root + budget nodes, and
            # that verify block must fit the draft's block, as DFlash's linear verify does
            if _is_int(budget) and budget >= 1 and budget + 1 > size:
                add("ddtree.budget", f"budget {budget} + 1 (the root) = {budget + 1} verify tokens exceeds the "
                                     f"draft's block size {size} (from {source}); use budget <= {size - 1}, "
                                     f"or a DFlash draft trained with a block_size of at least {budget + 1}")
            derr = (drafts.get(draft) or {}).get("error")
            if derr:
                add("draft_model_path", f"cannot read the draft's config.json: {derr}")
        # hybrid targets (the target's config.json, dflash_model.py): refuse only what cannot work
        tfacts = _target_facts_of(inst, host_facts)
        if tfacts.get("error"):
            add("model_path", f"cannot read the target's config.json: {tfacts['error']}")
        for field, msg in hybrid_instance_errors(inst, tfacts):
            add(field, msg)

        # numbers
        mfs = raw.get("mem_fraction_static")
        if mfs is not None and (isinstance(mfs, bool) or not isinstance(mfs, (int, float)) or not 0 < mfs < 1):
            add("mem_fraction_static", f"must be a number between 0 and 1 (exclusive), got {mfs!r}")
        ctx = raw.get("context_length")
        if ctx is not None and (not _is_int(ctx) or ctx < 1):
            add("context_length", f"must be a positive integer, got {ctx!r}")
        if not isinstance(raw.get("allow_busy_gpus", False), bool):
            add("allow_busy_gpus", f"must be true or false, got {raw.get('allow_busy_gpus')!r}")

        # args / pins / env
        extra = raw.get("extra_args") or []
        if not isinstance(extra, list):
            add("extra_args", f"must be a list of strings, got {extra!r}")
            extra = []
        for i, arg in enumerate(extra):
            if not isinstance(arg, (str, int, float)) or isinstance(arg, bool):
                add(f"extra_args[{i}]", f"must be a string, got {arg!r}")
            elif str(arg) == "" or any(c.isspace() for c in str(arg)):
                add(f"extra_args[{i}]", f"{str(arg)!r} is empty or contains whitespace: give each argument as "
                                        "its own list item (the unit passes them through $DFLASH_ARGS)")
        pins = raw.get("pin_flags") or {}
        if not isinstance(pins, dict):
            add("pin_flags", f"must be a mapping {{flag: value}}, got {pins!r}")
            pins = {}
        for flag, value in pins.items():
            if not isinstance(flag, str) or not flag.startswith("--") or any(c.isspace() for c in flag):
                add("pin_flags", f"{flag!r} is not a flag (it must start with '--' and have no whitespace)")
            elif value is not None and not isinstance(value, bool) and any(c.isspace() for c in str(value)):
                add(f"pin_flags.{flag}", f"value {str(value)!r} contains whitespace")
        dflash_checks.check_flags({"extra_args": [a for a in extra if isinstance(a, (str, int, float))],
                     "pin_flags": {k: v for k, v in pins.items() if isinstance(k, str) and k.startswith("--")}},
                    add, server_flags, sglang_version, MANAGED_FLAGS)
        env = raw.get("env") or {}
        if not isinstance(env, dict):
            add("env", f"must be a mapping of variable names to strings, got a {type(env).__name__}")
            env = {}
        dflash_checks.check_env(env, add, MANAGED_ENV)
        dflash_checks.check_secrets(raw, add)
        if raw.get("host") is not None and dflash_checks.host_error(raw.get("host")):
            add("host", dflash_checks.host_error(raw.get("host")))
        dflash_checks.current_conflicts(name, port if _is_int(port) else None, gpus if gpus_ok else [],
                          inst["allow_busy_gpus"], host_facts.get("current"),
                          {i.get("name") for i in instances if isinstance(i, dict)}, set(removed or ()), add)
        disabled = raw.get("disabled_rules") or []
        if not isinstance(disabled, list):
            add("disabled_rules", f"must be a list of rule names, got {disabled!r}")
            disabled = []
        for rule in disabled:
            if rule_names and rule not in rule_names:
                add("disabled_rules", f"unknown rule '{rule}' (known: {', '.join(sorted(rule_names))})")

        # reasoning models and the smoke gates
        rp = raw.get("reasoning_parser")
        if rp is not None and not (isinstance(rp, str) and REASONING_PARSER_RE.match(rp)):
            add("reasoning_parser", f"must be a parser name of sglang's --reasoning-parser (e.g. qwen3), got {rp!r}")
        for field, msg in gate_errors(raw.get("smoke_gates")):
            add(field, msg)

        # GPUs: shared between instances, then present / healthy / free via the fingerprint
        if gpus_ok:
            for g in gpus:
                if g in gpu_owner:
                    add("gpus", f"GPU {g} is also used by {_label(instances[gpu_owner[g]], gpu_owner[g])}")
                else:
                    gpu_owner[g] = idx
            if gpu_checker is not None and fingerprint is not None:
                label = name if isinstance(name, str) and name else f"#{idx + 1}"
                for msg in gpu_checker(fingerprint, [{"instance": label, "gpus": list(gpus),
                                                      "allow_busy": inst["allow_busy_gpus"],
                                                      "unit": f"dflash-{label}.service"}]):
                    # the inventory field is allow_busy_gpus
                    add("gpus", msg.replace("allow_busy: true", "allow_busy_gpus: true"))
        for field, msg in _tp.validate_instance(raw, inst, fingerprint, host_facts, instances):  # dflash_tp.py
            add(field, msg)
        errors.extend(e)
    return errors


def _target_facts_of(inst, host_facts):
    """The target's config facts gathered on the host (model_path, else the staged model_source)."""
    targets = (host_facts or {}).get("targets") or {}
    return targets.get(inst.get("model_path")) or targets.get(inst.get("model_source")) or {}


def default_gpu_checker():
    """check_requested_gpus from the fingerprint stage (module_utils/dflash_fingerprint/)."""
    try:
        from dflash_fingerprint.gate import check_requested_gpus
    except ImportError:  # pragma: no cover - inside an AnsiballZ payload
        from ansible.module_utils.dflash_fingerprint.gate import check_requested_gpus
    return check_requested_gpus


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


def rule_context(instance, fingerprint, probe, host_facts, lab_standin=False):
    """The flat facts the rule conditions may name (docs/fallbacks.md lists them)."""
    inst = effective_instance(instance)
    fp = fingerprint or {}
    hf = host_facts or {}
    gpus = _gpus_of(fp, inst.get("gpus"))
    sms = [s for s in (_sm_of(g) for g in gpus) if s]
    toolkits = []
    for tk in fp.get("cuda_toolkits") or []:
        v = version_tuple(tk.get("version"))
        if v:
            toolkits.append((v, tk.get("path")))
    default_tk = None
    for v, path in toolkits:
        if path and path.rstrip("/") == "/usr/local/cuda":
            default_tk = v
    if default_tk is None and version_tuple(fp.get("nvcc_version")):
        default_tk = version_tuple(fp.get("nvcc_version"))
    if default_tk is None and toolkits:
        default_tk = max(toolkits)[0]
    overlay = hf.get("overlay") or {}
    onvcc = overlay.get("nvcc") or {}
    overlay_v = version_tuple(onvcc.get("version"))
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
    block, block_src = block_size_for(inst, (hf.get("drafts") or {}).get(inst.get("draft_model_path")))
    budget = dd.get("budget") if _is_int(dd.get("budget")) else None
    model = str(inst.get("model_path") or "")
    on_tmpfs = model.startswith(TMPFS_PREFIXES) or bool((hf.get("paths") or {}).get(model, {}).get("tmpfs"))

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
        "target.architecture": _target_facts_of(inst, hf).get("architecture"),
        "target.hybrid": _target_facts_of(inst, hf).get("hybrid"),
        "target.linear_attention": _target_facts_of(inst, hf).get("linear_attention"),
        "host.lab_standin": bool(lab_standin),
    }
    ctx.update(_tp.rule_facts(inst, fp))  # tp.* (dflash_tp.py)
    return ctx


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
    hv, wv = version_tuple(have), version_tuple(want)
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
        extra = set(rule) - {"name", "when", "unless", "unless_reason", "flags", "env", "warn", "reason",
                             "prefer", "source"}
        if extra:
            errors.append(f"rule {name}: unknown keys {sorted(extra)}")
    return errors


def evaluate_rules(rules, ctx, disabled=(), user_flags=()):
    """-> (applied [{rule, reason, flags, env, warn, prefer}], skipped [{rule, reason}]).

    A rule applies when `when` is true and `unless` (the cause was removed) is not; a disabled
    rule or one whose every flag the user set is skipped with the reason.
    """
    applied, skipped = [], []
    user_flags = set(user_flags or ())
    for rule in rules or []:
        name = rule["name"]
        if name in (disabled or ()):
            skipped.append({"rule": name, "reason": "switched off by the inventory (disabled_rules)"})
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


# --------------------------------------------------------------------------- flags fact

def build_args(inst, fallback_args, bind_host="127.0.0.1"):
    """Exactly what follows `-m sglang.launch_server` (API keys never: the launcher adds them in-process)."""
    inst = effective_instance(inst)
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
    args += _tp.launch_args(inst)  # --enable-metrics, multi-node flags (dflash_tp.py)
    if inst.get("reasoning_parser"):
        # reasoning models (Qwen3.6 thinks first): the reply's thinking goes to reasoning_content
        args += ["--reasoning-parser", str(inst["reasoning_parser"])]
    args += list(fallback_args)
    args += [str(a) for a in inst["extra_args"]]
    args += pin_args(inst["pin_flags"])
    return args


def build_env(inst, host_facts, tree, rule_env):
    inst = effective_instance(inst)
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


def plan_instance(inst, rules, fingerprint, probe, host_facts, tree, host_disabled=(), lab_standin=False,
                  bind_host="127.0.0.1"):
    """One instance's entry of the dflash_flags fact."""
    inst = effective_instance(inst)
    ctx = rule_context(inst, fingerprint, probe, host_facts, lab_standin)
    user_flags = set(split_flags([str(a) for a in inst["extra_args"]])) | set(inst["pin_flags"])
    disabled = set(host_disabled or ()) | set(inst["disabled_rules"])
    applied, skipped = evaluate_rules(rules, ctx, disabled, user_flags)
    fallback, rule_env = [], {}
    for a in applied:
        fallback += a["flags"]
        rule_env.update(a.get("env") or {})
    return {
        "args": build_args(inst, fallback, bind_host),
        "env": build_env(inst, host_facts, tree, rule_env),
        "applied": applied,
        "skipped": skipped,
        "removed_cause": [s for s in skipped if s.get("cause_removed")],
        "unit": f"dflash-{inst['name']}.service",
        "port": inst["port"],
        "gpus": list(inst["gpus"]),
        "algorithm": inst["algorithm"],
        "model_source": inst.get("model_source"),
        "model_path": inst.get("model_path"),
        "secrets": sorted(dflash_secrets.instance_secrets(inst)),
    }


def plan_flags(instances, rules, fingerprint, probe, host_facts, tree, host_disabled=(), lab_standin=False,
               bind_host="127.0.0.1"):
    return {str(i["name"]): plan_instance(i, rules, fingerprint, probe, host_facts, tree, host_disabled,
                                          lab_standin, bind_host)
            for i in instances or []}


def flags_report(flags):
    """Human lines for the play output: one per instance + one per applied rule."""
    lines = []
    for name, f in sorted((flags or {}).items()):
        lines.append(f"{name}: python -m sglang.launch_server {' '.join(f['args'])}")
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


# --------------------------------------------------------------------------- host facts (read-only)

def parse_proc_net_tcp(text, ipv6=False):
    """Listening sockets of /proc/net/tcp{,6} -> [(port, addr, inode, uid)]."""
    out = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != "0A":  # 0A = TCP_LISTEN
            continue
        addr_hex, port_hex = parts[1].rsplit(":", 1)
        out.append((int(port_hex, 16), _hex_addr(addr_hex, ipv6), parts[9], int(parts[7])))
    return out


def _hex_addr(h, ipv6):
    if not ipv6:
        b = bytes.fromhex(h)[::-1]
        return ".".join(str(x) for x in b)
    raw = bytes.fromhex(h)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    if words == b"\x00" * 16:
        return "::"
    if words[:12] == b"\x00" * 10 + b"\xff\xff":
        return ".".join(str(x) for x in words[12:])
    return ":".join(words[i:i + 2].hex() for i in range(0, 16, 2))


def _read(path, default=None):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return default


def read_listeners(proc="/proc", run_dir="/run/dflash"):
    inodes = {}
    for fname, v6 in (("tcp", False), ("tcp6", True)):
        text = _read(os.path.join(proc, "net", fname))
        if text:
            for port, addr, inode, uid in parse_proc_net_tcp(text, v6):
                inodes.setdefault(inode, []).append((port, addr, uid))
    owners = {}
    if inodes:
        for pid in os.listdir(proc):
            if not pid.isdigit():
                continue
            fd_dir = os.path.join(proc, pid, "fd")
            try:
                fds = os.listdir(fd_dir)
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(os.path.join(fd_dir, fd))
                except OSError:
                    continue
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    owners.setdefault(target[8:-1], int(pid))
    out, seen = [], set()
    for inode, socks in inodes.items():
        pid = owners.get(inode)
        comm = (_read(os.path.join(proc, str(pid), "comm"), "") or "").strip() if pid else None
        unit = process_unit(pid, proc=proc, run_dir=run_dir) if pid else None
        for port, addr, uid in socks:
            key = (port, addr)
            if key in seen:
                continue
            seen.add(key)
            out.append({"port": port, "addr": addr, "pid": pid, "comm": comm or None, "unit": unit,
                        "uid": uid, "user": _user_name(uid)})
    return sorted(out, key=lambda x: (x["port"], x["addr"]))


def _user_name(uid):
    try:
        import pwd
        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return None


def tmpfs_mounts(mounts_text):
    out = []
    for line in (mounts_text or "").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "tmpfs":
            out.append(parts[1])
    return out


def path_facts(path, tmpfs=()):
    p = os.path.realpath(path)
    on_tmpfs = any(p == m or p.startswith(m.rstrip("/") + "/") for m in tmpfs if m not in ("/",))
    return {"exists": os.path.exists(path), "isdir": os.path.isdir(path), "tmpfs": on_tmpfs,
            "realpath": p}


def draft_block_size(config_text):
    """block_size of a DFlash draft's config.json text -> (size|None, source, error|None)."""
    try:
        cfg = json.loads(config_text)
    except ValueError as exc:
        return None, None, f"config.json is not JSON: {exc}"
    if not isinstance(cfg, dict):
        return None, None, "config.json is not a JSON object"
    dc = cfg.get("dflash_config")
    for value, source in (((dc or {}).get("block_size") if isinstance(dc, dict) else None,
                           "config.json dflash_config.block_size"),
                          (cfg.get("block_size"), "config.json block_size")):
        if value is not None:
            if _is_int(value) and value > 0:
                return value, source, None
            return None, source, f"{source} is {value!r}, not a positive integer"
    return None, None, None


def nvcc_version_of(nvcc, runner=None):
    runner = runner or (
        lambda argv: subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout)
    try:
        out = runner([nvcc, "--version"])
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", out or "")
    return m.group(1) if m else None


def overlay_cuda(layer_path, runner=None):
    """CUDA pieces shipped as pip packages in a layer venv: nvidia/*/lib dirs and an nvcc."""
    if not layer_path:
        return {}
    sps = sorted(glob.glob(os.path.join(layer_path, "lib", "python3*", "site-packages")))
    libs, nvccs = [], []
    for sp in sps:
        libs += sorted(d for d in glob.glob(os.path.join(sp, "nvidia", "*", "lib")) if os.path.isdir(d))
        nvccs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "bin", "nvcc")))
    best = {}
    for nvcc in nvccs:
        v = nvcc_version_of(nvcc, runner)
        if v and (not best or version_tuple(v) > version_tuple(best["version"])):
            best = {"path": nvcc, "home": os.path.dirname(os.path.dirname(nvcc)), "version": v}
    return {"site_packages": sps, "nvidia_lib_dirs": libs, "nvcc": best or None}


def sgl_kernel_facts(sgl_kernel_file):
    """Whether the sgl_kernel the probe imported ships FA3 (flash_ops*.so): sglang's Hopper default."""
    if not sgl_kernel_file:
        return {}
    pkg = os.path.dirname(sgl_kernel_file)
    if not os.path.isdir(pkg):
        return {}
    found = sorted(glob.glob(os.path.join(pkg, "flash_ops*.so")) + glob.glob(os.path.join(pkg, "*", "flash_ops*.so")))
    return {"dir": pkg, "fa3": bool(found), "fa3_files": found}


def current_instances(prefix):
    """{id, instances: {name: {port, gpus, unit}}} of the release <prefix>/current points at ({} if none)."""
    if not prefix:
        return {}
    text = _read(os.path.join(prefix, "current", "manifest.json"))
    try:
        m = json.loads(text) if text else {}
    except ValueError:
        return {"error": f"{prefix}/current/manifest.json is not JSON"}
    out = {}
    for name, entry in (m.get("instances") or {}).items():
        port = split_flags(entry.get("args") or []).get("--port")
        gpus = str((entry.get("env") or {}).get("CUDA_VISIBLE_DEVICES") or "")
        out[name] = {"port": int(port) if port and port.isdigit() else None, "unit": entry.get("unit"),
                     "gpus": [int(g) for g in gpus.split(",") if g.strip().isdigit()]}
    return {"id": m.get("id"), "instances": out}


def gather_host_facts(instances, layer_path=None, unit_dir="/etc/systemd/system", proc="/proc", runner=None,
                      sgl_kernel_file=None, prefix=None, space_paths=()):
    paths, drafts, targets = {}, {}, {}
    tmpfs = tmpfs_mounts(_read(os.path.join(proc, "mounts"), ""))
    for inst in instances or []:
        if not isinstance(inst, dict):
            continue
        for key in ("model_path", "draft_model_path", "model_source"):
            p = inst.get(key)
            if isinstance(p, str) and p.startswith("/") and p not in paths:
                paths[p] = path_facts(p, tmpfs)
        d = inst.get("draft_model_path")
        if isinstance(d, str) and d.startswith("/") and d not in drafts:
            text = _read(os.path.join(d, "config.json"))
            if text is None:
                drafts[d] = {"block_size": None, "block_size_source": None,
                             "error": None if not os.path.isdir(d) else "no config.json in the draft directory"}
            else:
                size, source, error = draft_block_size(text)
                drafts[d] = {"block_size": size, "block_size_source": source, "error": error}
        for key in ("model_path", "model_source"):  # a staged model may not be in place yet
            t = inst.get(key)
            if isinstance(t, str) and t.startswith("/") and t not in targets:
                text = _read(os.path.join(t, "config.json"))
                if text is not None:
                    targets[t] = target_facts(text)
    units = sorted(os.path.basename(p) for p in glob.glob(os.path.join(unit_dir, "dflash-*.service")))
    return {
        "listeners": read_listeners(proc),
        "paths": paths,
        "drafts": drafts,
        "targets": targets,
        "units": units,
        "overlay": overlay_cuda(layer_path, runner) if layer_path else {},
        "sgl_kernel": sgl_kernel_facts(sgl_kernel_file),
        "models": _tp.model_facts(instances),  # attention heads for the tp checks (dflash_tp.py)
        "current": current_instances(prefix),
        "disk": [dflash_diskspace.free_space(p) for p in space_paths or ()],
    }


def unit_files(instances, staged_dir, unit_dir):
    """[{instance, src, dest}]: the rendered unit files (in ``staged_dir``) the release stage's activation
    puts live in ``unit_dir``; the staging unit first."""
    out = []
    for inst in instances or []:
        name = str(inst["name"])
        units = ([f"dflash-stage-{name}.service"] if inst.get("model_source") else []) + [f"dflash-{name}.service"]
        out += [{"instance": name, "src": os.path.join(staged_dir, u), "dest": os.path.join(unit_dir, u)}
                for u in units]
    return out
