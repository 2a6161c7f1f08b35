"""Controller-side validation of the instances: every error at once, naming host, instance and field.

Pure functions, no Ansible import."""

from __future__ import annotations

from ansible.module_utils.dflash_common import sglang as _sg
from ansible.module_utils.dflash_instances import checks as dflash_checks
from ansible.module_utils.dflash_instances import fields as _fields
from ansible.module_utils.dflash_instances import tp as _tp
from ansible.module_utils.dflash_instances.model import (
    attention_backend_errors,
    hybrid_instance_errors,
    version_errors,
)
from ansible.module_utils.dflash_models import sources as _sources
from ansible.module_utils.dflash_release.gates_config import gate_errors

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


def python_tag_error(sg, python_tag):
    """Why sglang ``sg`` has no wheel for the layers' Python (``python_tag``, e.g. cp310), or None."""
    if not python_tag or not sg.python_wheels or python_tag in sg.python_wheels:
        return None
    return (f"sglang {sg.version} has no wheel for {python_tag} (its wheels: {', '.join(sg.python_wheels)}; "
            f"Requires-Python {sg.python}): give the layers a Python it supports and set dflash_tree_python_tag "
            "to match")


def validate_instances(host, instances, fingerprint, host_facts, rule_names=(), host_disabled_rules=(),
                       protect_home=True, gpu_checker=None, service_user="sglang", server_flags=None,
                       sglang_version=None, prefix=None, removed=(), server_flags_by_version=None, python_tag=None):
    """All placement errors for one host, each naming host, instance and field. [] = valid.

    sglang_version: the host's (dflash_sglang_version; the default version when None); an instance's own
    ``sglang_version`` wins. server_flags_by_version: {version: flags} of the other versions the instances name
    (``server_flags`` is the host version's). python_tag: the CPython tag of the layers (dflash_tree_python_tag),
    checked against each version's wheels.
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

    host_version = str(sglang_version) if sglang_version else _sg.default_version()
    flags_of = dict(server_flags_by_version or {})
    flags_of[host_version] = server_flags
    names, ports, gpu_owner = {}, {}, {}
    for idx, raw in enumerate(instances):
        if not isinstance(raw, dict):
            errors.append(f"{host}: instance #{idx + 1}: must be a mapping, got {type(raw).__name__}")
            continue
        e = []

        def add(field, msg, _raw=raw, _idx=idx, _e=e):
            _e.append(_fields._err(host, _raw, _idx, field, msg))

        unknown = sorted(set(raw) - _fields.INSTANCE_KEYS)
        for key in unknown:
            add(key, f"unknown field (known: {', '.join(sorted(_fields.INSTANCE_KEYS))})")
        inst = _fields.effective_instance(raw)

        # sglang version: the instance's own, else the host's
        version = _fields.instance_version(raw, host_version)
        sg = None
        if raw.get("sglang_version") not in (None, "") and not isinstance(raw.get("sglang_version"), str):
            add("sglang_version", f"must be a version string like \"0.5.17\" (quoted), got {raw.get('sglang_version')!r}")
        elif _sg.version_error(version):
            if raw.get("sglang_version") not in (None, ""):
                add("sglang_version", _sg.version_error(version))
        else:
            sg = _sg.facts(version)
            why = python_tag_error(sg, python_tag)
            if why:
                add("sglang_version", why)

        # name
        name = raw.get("name")
        if not isinstance(name, str) or not _fields.NAME_RE.match(name):
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
        gpus_ok = isinstance(gpus, list) and gpus and all(_fields._is_int(g) and g >= 0 for g in gpus)
        if not gpus_ok:
            add("gpus", f"must be a non-empty list of GPU indexes (integers >= 0), got {gpus!r}")
        elif len(set(gpus)) != len(gpus):
            add("gpus", f"lists a GPU twice: {gpus}")
            gpus_ok = False

        # tp
        tp = inst.get("tp")
        if not _fields._is_int(tp) or tp < 1:
            add("tp", f"must be a positive integer, got {tp!r}")
        elif gpus_ok and tp != len(gpus) * _tp.nnodes_of(raw):
            add("tp", f"tp {tp} does not match the {len(gpus)} GPU(s) {gpus}"
                      f"{f' x nnodes {_tp.nnodes_of(raw)}' if _tp.nnodes_of(raw) > 1 else ''}: tensor parallelism "
                      "uses exactly one GPU per rank (set tp to len(gpus) x nnodes or leave it unset)")

        # port
        port = raw.get("port")
        if not _fields._is_int(port):
            add("port", f"must be an integer, got {port!r}")
        elif not _fields.PORT_MIN <= port <= _fields.PORT_MAX:
            add("port", f"{port} is out of range {_fields.PORT_MIN}..{_fields.PORT_MAX} (the server runs as a "
                        "non-root user without CAP_NET_BIND_SERVICE)")
        else:
            if port in ports:
                add("port", f"port {port} is also used by {_fields._label(instances[ports[port]], ports[port])}")
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
        if algo not in _fields.ALGORITHMS:
            add("algorithm", f"{raw.get('algorithm')!r} is not one of {', '.join(_fields.ALGORITHMS)}")
        fb_error = _fields.fallback_error(raw, algo)
        if fb_error:
            add("fallback", fb_error)
        draft = raw.get("draft_model_path")
        # model_source / draft_source mappings: fetched and stored by the models stage (roles/dflash_models),
        # which fills model_path / draft_model_path with the stored copies before the flags are derived
        fetched_model = _sources.is_fetched(raw.get("model_source"))
        fetched_draft = _sources.is_fetched(raw.get("draft_source"))
        for field, msg in _sources.instance_errors(raw):
            add(field, msg)
        if algo in ("DFLASH", "DDTREE") and not draft and not fetched_draft:
            add("draft_model_path", f"{algo} needs a draft model (draft_model_path or draft_source is empty)")

        # paths
        model = raw.get("model_path")
        for field, path in (("model_path", model), ("draft_model_path", draft if algo != "NONE" else None),
                            ("model_source", None if fetched_model else raw.get("model_source"))):
            if field == "model_path" and not path:
                if not fetched_model:
                    add(field, "is required (or a model_source to fetch it from)")
                continue
            if not path:
                continue
            if dflash_checks.tilde_problem(path):
                add(field, dflash_checks.tilde_problem(path))
                continue
            if not isinstance(path, str) or not path.startswith("/"):
                add(field, f"must be an absolute path, got {path!r}")
                continue
            if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in path):
                add(field, f"{path!r} contains whitespace or a control character, which cannot be passed "
                           "through $DFLASH_ARGS")
                continue
            problem = dflash_checks.resolved_path_problem(field, path, (paths.get(path) or {}).get("realpath"), protect_home,
                                            _fields.HOME_PREFIXES, prefix,
                                            staged=field == "model_path" and bool(raw.get("model_source")),
                                            tmpfs_prefixes=_fields.TMPFS_PREFIXES, homes=host_facts.get("homes"))
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
            for key in sorted(set(raw["ddtree"]) - _fields.DDTREE_KEYS):
                add(f"ddtree.{key}", f"unknown field (known: {', '.join(sorted(_fields.DDTREE_KEYS))})")
        elif raw.get("ddtree") is not None:
            add("ddtree", f"must be a mapping, got {raw.get('ddtree')!r}")
        budget, topk, mode = dd.get("budget"), dd.get("topk"), dd.get("mode")
        if not _fields._is_int(budget) or budget < 1:
            add("ddtree.budget", f"must be a positive integer, got {budget!r}")
        if not _fields._is_int(topk) or topk < 1:
            add("ddtree.topk", f"must be a positive integer, got {topk!r}")
        if mode not in _fields.DDTREE_MODES:
            add("ddtree.mode", f"{mode!r} is not one of {', '.join(_fields.DDTREE_MODES)}")
        draft_seen = (paths.get(draft) or {}).get("exists", True) if isinstance(draft, str) else False
        if algo == "DDTREE" and draft and draft_seen:
            size, source = _fields.block_size_for(inst, drafts.get(draft))
            # the patched server's rule (0002/0102): one step verifies the root + budget nodes, and
            # that verify block must fit the draft's block, as DFlash's linear verify does
            if _fields._is_int(budget) and budget >= 1 and budget + 1 > size:
                add("ddtree.budget", f"budget {budget} + 1 (the root) = {budget + 1} verify tokens exceeds the "
                                     f"draft's block size {size} (from {source}); use budget <= {size - 1}, "
                                     f"or a DFlash draft trained with a block_size of at least {budget + 1}")
            derr = (drafts.get(draft) or {}).get("error")
            if derr:
                add("draft_model_path", f"cannot read the draft's config.json: {derr}")
        # hybrid targets (the target's config.json, dflash_instances/model.py): refuse only what cannot work
        tfacts = _fields._target_facts_of(inst, host_facts)
        if tfacts.get("error"):
            add("model_path", f"cannot read the target's config.json: {tfacts['error']}")
        if sg is not None:
            sms = sorted({s[0] for g in (fingerprint or {}).get("gpus") or [] if g.get("index") in (gpus or [])
                          for s in [_fields._sm_of(g)] if s}) if gpus_ok else []
            for field, msg in (hybrid_instance_errors(inst, tfacts, sg) + attention_backend_errors(inst, tfacts, sg)
                               + version_errors(inst, tfacts, sg, sms, drafts.get(draft) if isinstance(draft, str)
                                                else None)):
                add(field, msg)

        # numbers
        mfs = raw.get("mem_fraction_static")
        if mfs is not None and (isinstance(mfs, bool) or not isinstance(mfs, (int, float)) or not 0 < mfs < 1):
            add("mem_fraction_static", f"must be a number between 0 and 1 (exclusive), got {mfs!r}")
        ctx = raw.get("context_length")
        if ctx is not None and (not _fields._is_int(ctx) or ctx < 1):
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
                    add, flags_of.get(version), version, _fields.MANAGED_FLAGS)
        env = raw.get("env") or {}
        if not isinstance(env, dict):
            add("env", f"must be a mapping of variable names to strings, got a {type(env).__name__}")
            env = {}
        dflash_checks.check_env(env, add, _fields.MANAGED_ENV)
        dflash_checks.check_secrets(raw, add)
        if raw.get("host") is not None and dflash_checks.host_error(raw.get("host")):
            add("host", dflash_checks.host_error(raw.get("host")))
        dflash_checks.current_conflicts(name, port if _fields._is_int(port) else None, gpus if gpus_ok else [],
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
        if rp is not None and not (isinstance(rp, str) and _fields.REASONING_PARSER_RE.match(rp)):
            add("reasoning_parser", f"must be a parser name of sglang's --reasoning-parser (e.g. qwen3), got {rp!r}")
        for field, msg in gate_errors(raw.get("smoke_gates")):
            add(field, msg)

        # GPUs: shared between instances, then present / healthy / free via the fingerprint
        if gpus_ok:
            for g in gpus:
                if g in gpu_owner:
                    add("gpus", f"GPU {g} is also used by {_fields._label(instances[gpu_owner[g]], gpu_owner[g])}")
                else:
                    gpu_owner[g] = idx
            if gpu_checker is not None and fingerprint is not None:
                label = name if isinstance(name, str) and name else f"#{idx + 1}"
                for msg in gpu_checker(fingerprint, [{"instance": label, "gpus": list(gpus),
                                                      "allow_busy": inst["allow_busy_gpus"],
                                                      "unit": f"dflash-{label}.service"}]):
                    # the inventory field is allow_busy_gpus
                    add("gpus", msg.replace("allow_busy: true", "allow_busy_gpus: true"))
        for field, msg in _tp.validate_instance(raw, inst, fingerprint, host_facts, instances):  # dflash_instances/tp.py
            add(field, msg)
        errors.extend(e)
    return errors



def default_gpu_checker():
    """check_requested_gpus from the fingerprint stage (module_utils/dflash_fingerprint/)."""
    from ansible.module_utils.dflash_fingerprint.gate import check_requested_gpus
    return check_requested_gpus
