"""Jinja filters of the instances stage: thin wrappers over module_utils/dflash_instances/."""

from __future__ import annotations

import os

import ansible.module_utils

# The repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils.dflash_common import disk as _dsk
from ansible.module_utils.dflash_common import secrets as _ds
from ansible.module_utils.dflash_common import sglang as _sg
from ansible.module_utils.dflash_common.jinja import plain as _plain
from ansible.module_utils.dflash_instances import checks as _ck
from ansible.module_utils.dflash_instances import flags as _di_flags
from ansible.module_utils.dflash_instances import host as _di_host
from ansible.module_utils.dflash_instances import inventory as _inv
from ansible.module_utils.dflash_instances import rules as _di_rules
from ansible.module_utils.dflash_instances import server_flags as _sf
from ansible.module_utils.dflash_instances import validate as _di_validate
from ansible.module_utils.dflash_service.backend import default_service_manager


def _removed(instances, host_facts, remove_absent, remove):
    """Instance names whose removal the user asked for (explicitly, or all absent ones)."""
    names = {i.get("name") for i in instances or [] if isinstance(i, dict)}
    current = set(((host_facts or {}).get("current") or {}).get("instances") or {})
    return set(remove or []) | ((current - names) if _inv.as_bool(remove_absent) else set())


def dflash_sglang_versions(instances, host_version=None):
    """The sglang versions a host runs: its own (dflash_sglang_version) first, then those its instances choose
    (``sglang_version``), each once. Versions the toolkit does not support are left out (validation names them)."""
    host_version = str(_plain(host_version) or _sg.default_version())
    out = [host_version]
    for inst in _plain(instances) if isinstance(_plain(instances), list) else []:
        v = inst.get("sglang_version") if isinstance(inst, dict) else None
        if isinstance(v, str) and v not in out and _sg.version_error(v) is None:
            out.append(v)
    return out


def dflash_sglang_host_facts(_unused=None):
    """{version: facts} of every supported sglang version, as host modules take them (the wait: the smoke test's
    meta_info names, the diagnosis' remedies)."""
    return _sg.host_facts()


def dflash_sglang_version_errors(version, host, field="dflash_sglang_version"):
    """[message] when ``version`` (the host's choice) is not a supported sglang version."""
    why = _sg.version_error(_plain(version))
    return [f"{host}: field '{field}': {why}"] if why else []


def _flags_by_version(instances, host_version, flags_dir):
    """{version: flags} of every other version the instances choose, from <flags_dir>/<version>/server-flags.txt."""
    out = {}
    if not flags_dir:
        return out
    for v in dflash_sglang_versions(instances, host_version)[1:]:
        out[v], _why = _sf.load_flags(os.path.join(str(flags_dir), v, "server-flags.txt"))
    return out


def dflash_instances_errors(instances, host, fingerprint, host_facts, rules, host_disabled_rules=(),
                            protect_home=True, service_user="sglang", server_flags_file=None,
                            sglang_version=None, prefix=None, remove_absent=False, remove=(), server_flags_dir=None,
                            python_tag=None):
    """All placement errors of one host (list of strings; empty = valid). ``sglang_version``: the host's;
    ``server_flags_dir``: files/patches/sglang (the flags of the other versions its instances choose)."""
    rules = _plain(rules) or []
    instances, host_facts = _plain(instances), _plain(host_facts)
    host_version = str(_plain(sglang_version) or _sg.default_version())
    known, _source = _sf.load_flags(str(server_flags_file)) if server_flags_file else (None, "")
    remove = _plain(remove) if isinstance(_plain(remove), list) else []
    errors = _di_rules.check_rules_table(rules)
    errors += dflash_sglang_version_errors(host_version, host)
    errors += _di_validate.validate_instances(
        str(host), instances, _plain(fingerprint), host_facts,
        [r["name"] for r in rules], _plain(host_disabled_rules) or [], bool(protect_home),
        gpu_checker=_di_validate.default_gpu_checker(), service_user=str(service_user), server_flags=known,
        sglang_version=host_version, prefix=str(prefix) if prefix else None,
        removed=_removed(instances if isinstance(instances, list) else [], host_facts, remove_absent, remove),
        server_flags_by_version=_flags_by_version(instances, host_version, server_flags_dir),
        python_tag=str(_plain(python_tag)) if python_tag else None)
    return errors


def dflash_inventory_errors(instances, host, hostvars):
    """Errors of the host's inventory as a whole (instance list, removals, shared settings), from what the
    user set (``hostvars[inventory_hostname]``: inventory, extra vars; not role defaults)."""
    names = list(hostvars.keys()) if hasattr(hostvars, "keys") else []
    settings = {k: _plain(hostvars[k]) for k in (*_inv.SHARED, "dflash_instances_bind_host") if k in names}
    return _inv.inventory_errors(str(host), _plain(instances), settings, names, _nulls(hostvars, names))


def _nulls(hostvars, names):
    """The list inputs the inventory set to null. A value that does not resolve here (it templates a role
    default, e.g. dflash_prefix) is not null: its own stage reads it."""
    out = []
    for k in _inv.NULL_REFUSED:
        try:
            null = k in names and _plain(hostvars[k]) is None
        except Exception:  # noqa: BLE001 - Ansible's undefined markers raise their own types
            null = False
        if null:
            out.append(k)
    return out


def dflash_remove_errors(remove, host, instances, host_facts, known_elsewhere=()):
    """Names of dflash_remove_instances that neither this host nor another host of the run has ever had."""
    return _inv.remove_errors(str(host), _plain(remove), _plain(instances) if isinstance(_plain(instances), list) else [],
                              _plain(host_facts), _plain(known_elsewhere) or [])


def dflash_instances_known(host_facts):
    """The instance names a host knows (current release, installed units, every release on it)."""
    return _inv.known_instances(_plain(host_facts))


def dflash_disk_errors(disk_facts, host, need_free_mib=1024):
    """A filesystem the deploy writes to (prefix, /var/cache, Ansible's temporary directory) that is full."""
    try:
        need = int(need_free_mib)
    except (TypeError, ValueError):
        return []  # dflash_inventory_errors names the bad value
    return _dsk.space_errors(_plain(disk_facts) or [], str(host), need)


def dflash_instances_warnings(instances, host, host_facts, bind_host="127.0.0.1", server_flags_file=None,
                              remove_absent=False, remove=()):
    """Things that do not stop the deploy but the user should read: a server bound wide without an API key,
    flags that cannot be checked, instances kept because nobody asked to remove them."""
    instances, host_facts = _plain(instances), _plain(host_facts) or {}
    out = []
    if not isinstance(instances, list):
        return out
    for inst in instances:
        if isinstance(inst, dict) and isinstance(inst.get("name"), str):
            w = _ck.bind_warning(inst["name"], inst.get("host") or bind_host, inst.get("port"),
                                 bool(inst.get("api_key")))
            if w:
                out.append(f"{host}: {w}")
    if server_flags_file:
        known, why = _sf.load_flags(str(server_flags_file))
        if known is None:
            out.append(f"{host}: server flags in extra_args / pin_flags are not checked against sglang's parser: {why}")
    names = {i.get("name") for i in instances if isinstance(i, dict)}
    removed = _removed(instances, host_facts, remove_absent, _plain(remove) or [])
    for other in sorted(set((host_facts.get("current") or {}).get("instances") or {}) - names - removed):
        out.append(f"{host}: instance '{other}' is installed but no longer in dflash_instances: it keeps serving "
                   "(carried into the new release unchanged); to remove it, add it to dflash_remove_instances or set "
                   "dflash_remove_absent: true")
    return out


def dflash_instances_flags(instances, rules, fingerprint, probe, host_facts, tree, host_disabled_rules=(),
                           bind_host="0.0.0.0", host_version=None, runtimes=None):
    """The dflash_flags fact: {instance: {args, env, applied, skipped, removed_cause, sglang_version, ...}}.
    ``runtimes``: {version: {probe, tree, venv}} of every version the host runs (dflash_runtimes)."""
    return _di_flags.plan_flags(_plain(instances), _plain(rules), _plain(fingerprint), _plain(probe),
                          _plain(host_facts), _plain(tree), _plain(host_disabled_rules) or [], str(bind_host),
                          str(_plain(host_version)) if host_version else None, _plain(runtimes) or None)


def dflash_instances_runtime_paths(runtime):
    """{layer_path, sgl_kernel_file} of one version's runtime (dflash_runtimes[version]: its final layer and
    probe), for the host facts of that version's CUDA pieces and FA3."""
    rt = _plain(runtime) or {}
    layers = rt.get("layers") or []
    return {"layer_path": (layers[-1] or {}).get("path") if layers else rt.get("venv"),
            "sgl_kernel_file": ((rt.get("probe") or {}).get("sgl_kernel") or {}).get("file")}


def dflash_instances_report(flags):
    return _di_flags.flags_report(_plain(flags))


def dflash_instances_unresolved(instances, host):
    """Fields whose value cannot be resolved (an undefined variable: a vault not loaded, a typo in a
    lookup), named by host, instance and field before anything else touches the instances. Ansible 2.19
    resolves the values of a variable when they are read, so each one is read here on its own."""
    if not isinstance(instances, (list, tuple)):
        return []
    errors = []
    for idx, inst in enumerate(instances):
        if not hasattr(inst, "keys"):
            continue
        try:
            name = _plain(inst.get("name"))
            label = f"instance '{name}'" if isinstance(name, str) and name else f"instance #{idx + 1}"
        except Exception:  # noqa: BLE001 - the name itself unresolved: said below
            label = f"instance #{idx + 1}"
        for key in list(inst.keys()):
            try:
                _plain(inst[key])
            except Exception as exc:  # noqa: BLE001 - Ansible's undefined markers raise their own types
                why = str(getattr(exc, "message", "") or exc).splitlines()[0]
                errors.append(f"{host}: {label}: field '{key}': cannot be resolved ({why}): define it, or give "
                              "ansible-playbook the vault password when it comes from a vault (--ask-vault-pass, "
                              "vault_password_file)")
    return errors


def dflash_inventory_placeholders(hostvars, host, group_hosts=None, names=()):
    """'fill in ...' for each value of the example inventory (inventory/production) left as it was shipped: the
    host's placeholder name, the router/Prometheus hosts' (``group_hosts``), every 'fill in: <what>' string in
    the variables ``names``. A value that cannot be resolved yet (a vault not loaded) is left to the validation,
    which names it."""
    values = {}
    for name in names or ():
        try:
            raw = hostvars.get(name)
            if raw is None:
                continue
            if isinstance(raw, (list, tuple)):  # read item by item: one unresolved field must not hide the rest
                items = []
                for item in raw:
                    if hasattr(item, "keys"):
                        kept = {}
                        for key in list(item.keys()):
                            try:
                                kept[str(key)] = _plain(item[key])
                            except Exception:  # noqa: BLE001, S112 - unresolved: the validation names it
                                continue
                        items.append(kept)
                    else:
                        items.append(_plain(item))
                values[name] = items
            else:
                values[name] = _plain(raw)
        except Exception:  # noqa: BLE001, S112 - unresolved: the validation names it
            continue
    return _inv.placeholder_errors(str(host), values, _plain(group_hosts or {}))


def dflash_instances_unit_files(instances, staged_dir, unit_dir):
    """[{instance, src, dest}] of the rendered units the release stage's activation puts live."""
    return _di_host.unit_files(_plain(instances), str(staged_dir), str(unit_dir))


def dflash_instances_toolkit_files(units, prefix, unit_dir, service_manager, instances, module_utils_dir,
                                   guard_unit=""):
    """{directories, files, absent} for dflash_files: launcher, boot guard (systemd), the rendered units."""
    return _di_host.toolkit_files(str(prefix), str(unit_dir), str(service_manager) == "systemd", _plain(instances),
                                  _plain(units), str(module_utils_dir), str(guard_unit))


def dflash_instances_public(instances):
    """The instances without their secrets (API keys dropped, credential env values masked): what
    loops, module parameters and messages may carry."""
    return _ds.public_instances(_plain(instances))


def dflash_instances_secrets(instances):
    """{instance: {VAR: value}}: API keys and credential env variables, for the env file only."""
    return _ds.all_secrets(_plain(instances))


class FilterModule:
    def filters(self):
        return {
            "dflash_instances_errors": dflash_instances_errors,
            "dflash_inventory_errors": dflash_inventory_errors,
            "dflash_disk_errors": dflash_disk_errors,
            "dflash_remove_errors": dflash_remove_errors,
            "dflash_instances_known": dflash_instances_known,
            "dflash_instances_warnings": dflash_instances_warnings,
            "dflash_instances_flags": dflash_instances_flags,
            "dflash_instances_report": dflash_instances_report,
            "dflash_instances_unit_files": dflash_instances_unit_files,
            "dflash_instances_toolkit_files": dflash_instances_toolkit_files,
            "dflash_instances_unresolved": dflash_instances_unresolved,
            "dflash_inventory_placeholders": dflash_inventory_placeholders,
            "dflash_instances_public": dflash_instances_public,
            "dflash_instances_secrets": dflash_instances_secrets,
            "dflash_sglang_versions": dflash_sglang_versions,
            "dflash_instances_runtime_paths": dflash_instances_runtime_paths,
            "dflash_sglang_host_facts": dflash_sglang_host_facts,
            # ansible_facts -> systemd | runner: dflash_service_manager's default (instances and release roles)
            "dflash_service_manager_default": default_service_manager,
        }
