"""Host-level inventory checks, in the user's words, before anything on the host changes: the instance
list itself (empty or undefined, e.g. a typo'd variable name), what the user asked to remove, and the
shared settings (prefix, bind address, service manager, disk limit). The per-instance checks are
dflash_instances.validate_instances.

Pure functions, no Ansible import.
"""

from __future__ import annotations

import difflib
import posixpath

from ansible.module_utils.dflash_instances.checks import SYSTEM_DIRS, control_char, host_error, under

# the shared inventory inputs (docs/design.md) a typo'd name is compared with
SHARED = ("dflash_instances", "dflash_prefix", "dflash_remove_absent", "dflash_remove_instances",
          "dflash_service_manager", "dflash_min_free_mib", "dflash_venv_layers")
# list (and mapping) inputs that a bare ``name:`` line in YAML leaves null: said in words, naming the variable,
# before a template elsewhere fails on it without a name
NULL_REFUSED = {
    "dflash_instances": "the list of instances this host serves",
    "dflash_remove_instances": "a list of instance names to remove",
    "dflash_venv_layers": "the list of venv layers",
    "dflash_server_files": "a list of {src, dest}",
    "dflash_instances_disabled_rules": "a list of rule names",
    "dflash_smoke_gates": "a mapping of smoke gate settings",
}
# variables that no longer exist, and what replaced them
RENAMED = {
    "dflash_instances_remove_stale": (
        "instances the inventory no longer lists are kept serving unless removal is asked for: "
        "dflash_remove_absent: true (all of them) or dflash_remove_instances: [names]"),
}
EMPTY_HELP = (
    "set dflash_instances (in host_vars/{host}.yml or group_vars) to the list of instances this host serves "
    "(name, gpus, port, model_path, ...); nothing is changed on the host while it is empty. To take every "
    "instance off the host, list them in dflash_remove_instances")


# role settings (dflash_<role>_*) and facts are never typo candidates
ROLE_PREFIXES = ("dflash_fingerprint", "dflash_instances_", "dflash_layers", "dflash_tree", "dflash_release",
                 "dflash_venv_", "dflash_sglang", "dflash_probe", "dflash_flags", "dflash_units",
                 "dflash_bench", "dflash_router", "dflash_gates")


TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


def as_bool(value):
    """True / False for a boolean, or the words Ansible reads as one (-e key=value gives strings); else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)) and str(value).strip().lower() in TRUE_WORDS + FALSE_WORDS:
        return str(value).strip().lower() in TRUE_WORDS
    return None


def as_int(value):
    """An int, or a string of digits (-e key=value), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def typo_hints(var_names, wanted) -> list:
    """Inventory variables that look like a misspelt ``wanted``: not a variable the toolkit knows."""
    names = [str(n) for n in var_names or []
             if str(n).startswith("dflash") and str(n) not in SHARED and not str(n).startswith(ROLE_PREFIXES)]
    return difflib.get_close_matches(wanted, names, n=3, cutoff=0.8)


def null_errors(host, nulls) -> list:
    """One error per input the inventory set to null (``dflash_instances:`` with nothing after it)."""
    tail = ("; nothing is changed on the host while it is empty. To take every instance off the host, list them in "
            "dflash_remove_instances")
    return [(f"{host}: field '{name}': is null (the line '{name}:' has nothing after it): give "
             f"{NULL_REFUSED.get(name, 'a value')}, or leave the line out{tail if name == 'dflash_instances' else ''}")
            for name in sorted(nulls or ())]


def inventory_errors(host, instances, settings, var_names=(), nulls=()) -> list:
    """Errors of the host's inventory as a whole. ``settings``: {name: value or None} of the shared
    variables (None = not set); ``var_names``: every variable name the host has (typo hints); ``nulls``: the
    inputs the inventory set to null (refused in words, see NULL_REFUSED)."""
    errors = null_errors(host, nulls)
    s = settings or {}
    remove = s.get("dflash_remove_instances")
    remove_absent = s.get("dflash_remove_absent")
    absent_flag = as_bool(remove_absent)
    names = [i.get("name") for i in instances if isinstance(i, dict)] if isinstance(instances, list) else []

    for old, why in RENAMED.items():
        if old in (var_names or ()):
            errors.append(f"{host}: variable '{old}' is no longer used: {why}")

    if remove is not None and (not isinstance(remove, list) or not all(isinstance(n, str) and n for n in remove)):
        errors.append(f"{host}: field 'dflash_remove_instances': must be a list of instance names, got {remove!r}")
        remove = []
    if remove_absent is not None and absent_flag is None:
        errors.append(f"{host}: field 'dflash_remove_absent': must be true or false, got {remove_absent!r}")
    for n in sorted(set(remove or []) & {n for n in names if isinstance(n, str)}):
        errors.append(f"{host}: field 'dflash_remove_instances': '{n}' is also in dflash_instances: an instance is "
                      "either deployed or removed")

    if instances is None or (isinstance(instances, list) and not instances):
        if not remove and "dflash_instances" not in (nulls or ()):
            hints = typo_hints(var_names, "dflash_instances")
            hint = (f" (the inventory sets {', '.join(repr(h) for h in hints)}: a typo for dflash_instances?)"
                    if hints else "")
            errors.append(f"{host}: dflash_instances is empty or not set{hint}: " + EMPTY_HELP.format(host=host))
        if absent_flag:
            errors.append(f"{host}: field 'dflash_remove_absent': with an empty dflash_instances it would remove "
                          "everything; name the instances to remove in dflash_remove_instances instead")
    for wanted in ("dflash_remove_absent", "dflash_remove_instances"):
        if s.get(wanted) is None:
            for h in typo_hints(var_names, wanted):
                errors.append(f"{host}: variable '{h}' is not one the toolkit knows: did you mean {wanted}?")

    prefix = s.get("dflash_prefix")
    if prefix is not None:
        bad = None
        if not isinstance(prefix, str) or not prefix.startswith("/"):
            bad = f"must be an absolute path, got {prefix!r}"
        elif control_char(prefix) or any(c.isspace() for c in prefix):
            bad = "contains whitespace or a control character"
        else:
            norm = posixpath.normpath(prefix)
            if norm == "/" or any(under(norm, d) for d in SYSTEM_DIRS if d != "/var/cache/dflash"):
                bad = f"{prefix} resolves to {norm}, a system directory: use a directory of its own (/opt/dflash)"
        if bad:
            errors.append(f"{host}: field 'dflash_prefix': {bad}")
    sm = s.get("dflash_service_manager")
    if sm is not None and sm not in ("systemd", "runner"):
        errors.append(f"{host}: field 'dflash_service_manager': must be systemd or runner, got {sm!r}")
    bind = s.get("dflash_instances_bind_host")
    if bind is not None and host_error(bind):
        errors.append(f"{host}: field 'dflash_instances_bind_host': {host_error(bind)}")
    free = s.get("dflash_min_free_mib")
    if free is not None and (as_int(free) is None or as_int(free) < 0):
        errors.append(f"{host}: field 'dflash_min_free_mib': must be a whole number of MiB >= 0, got {free!r}")
    return errors


# ----------------------------------------------------------------------------- values left to fill in

# inventory/production ships these: a host name that never resolves, and values that read "fill in: <what>"
PLACEHOLDER_DOMAIN = ".example.invalid"
PLACEHOLDER_PREFIX = "fill in"


def _placeholders_in(value, path):
    """(path, what) of every 'fill in: <what>' string inside a value (mappings and lists walked)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _placeholders_in(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            label = v.get("name") if isinstance(v, dict) and isinstance(v.get("name"), str) else None
            yield from _placeholders_in(v, f"{path}[{label or i}]")
    elif isinstance(value, str) and value.strip().lower().startswith(PLACEHOLDER_PREFIX):
        what = value.strip()[len(PLACEHOLDER_PREFIX):].lstrip(" :-")
        yield path, what or "a value"


def placeholder_errors(host, values, group_hosts=None) -> list[str]:
    """'fill in ...' for every value of the example inventory the user has not replaced yet, before anything
    connects or changes. ``values``: {variable: value} of the host; ``group_hosts``: {group: [hosts]} whose
    placeholder names are said too (the router and Prometheus hosts)."""
    errors = []
    address = values.get("ansible_host") or host
    if str(host).endswith(PLACEHOLDER_DOMAIN) and str(address).endswith(PLACEHOLDER_DOMAIN):
        errors.append(f"{host}: fill in the host: {host} is the example inventory's placeholder and never resolves; "
                      "put your host's name in hosts.yml (and rename its host_vars file to match), or its address "
                      "in ansible_host")
    for group, hosts in sorted((group_hosts or {}).items()):
        for other in hosts or []:
            if str(other).endswith(PLACEHOLDER_DOMAIN) and other != host:
                errors.append(f"{host}: fill in {group}: {other} is the example inventory's placeholder; put your "
                              f"{group} host there, or leave its hosts empty ({{}}) if you have none")
    for name in sorted(values):
        for path, what in _placeholders_in(values[name], name):
            errors.append(f"{host}: fill in {path}: {what}")
    return errors


def known_instances(host_facts) -> list:
    """The instance names a host knows: its current release's, its installed dflash-<name>.service units' (not the
    staging units nor the boot guard) and every release's on it (one already removed included)."""
    hf = host_facts or {}
    units = {u[len("dflash-"):-len(".service")] for u in hf.get("units") or []
             if u.startswith("dflash-") and u.endswith(".service") and not u.startswith("dflash-stage-")
             and u != "dflash-guard.service"}
    current = set(((hf.get("current") or {}).get("instances")) or {})
    return sorted(units | current | set(hf.get("released") or []))


def remove_errors(host, remove, instances, host_facts, known_elsewhere=()) -> list:
    """Names in ``dflash_remove_instances`` this host has never had (nor another host of the run): a misspelt name
    would remove nothing, silently. -> errors naming them and the instances the host has."""
    if not isinstance(remove, list):
        return []  # inventory_errors says what is wrong with its shape
    listed = {i.get("name") for i in instances or [] if isinstance(i, dict)}
    known = set(known_instances(host_facts))
    unknown = [n for n in remove if isinstance(n, str) and n and n not in known and n not in listed
               and n not in set(known_elsewhere or ())]
    if not unknown:
        return []
    hf = host_facts or {}
    serving = sorted(set(((hf.get("current") or {}).get("instances")) or {})
                     | {u[len("dflash-"):-len(".service")] for u in hf.get("units") or []
                        if u.startswith("dflash-") and not u.startswith("dflash-stage-") and u != "dflash-guard.service"})
    earlier = sorted(known - set(serving))
    names = ", ".join(repr(n) for n in unknown)
    what = "is not an instance" if len(unknown) == 1 else "are not instances"
    msg = (f"{host}: field 'dflash_remove_instances': {names} {what} this host has or had (its instances: "
           f"{', '.join(serving) or 'none'}{'; in earlier releases: ' + ', '.join(earlier) if earlier else ''}): "
           "a misspelt name removes nothing; correct it or take it out of the list")
    return [msg]
