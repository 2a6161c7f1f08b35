"""tune.yml's proposal: the chosen configuration as a change of the user's inventory, shown as a diff.

The instance is looked for where Ansible reads a host's variables from, most specific first: the
inventory's ``host_vars/<host>.yml`` (or ``.yaml``, or the files of ``host_vars/<host>/``), the host's
entry in the inventory file, then ``group_vars/<group>`` of the host's groups (the deepest first) and
``group_vars/all``. The first file whose ``dflash_instances`` has the instance is edited in memory with
ruamel.yaml's round-trip mode (comments, order and flow style kept; only the instance's algorithm, ddtree,
pinned attention backend and draft change) and the unified diff against the file on disk is the proposal:
the user reads it and applies it (``git apply`` / ``patch -p1`` from the inventory's parent). Nothing is
written to the inventory. Without such a file (the instances came from extra vars, say) the proposal is
the changed instance as YAML. Pure functions over file text, plus reading the candidate files.

playbooks/tune-apply.yml deploys a run's choice later, as a step of its own (``apply_plan``): the run's folder
says what was chosen, on which host and release; the instance is changed as the proposal changed it, in the
host's inventory instances as they are when the step runs.
"""

from __future__ import annotations

import difflib
import glob
import io
import json
import os

from ansible.module_utils.dflash_bench.tune_rules import as_instance

VAR = "dflash_instances"
CHANGED = ("algorithm", "ddtree", "pin_flags", "draft_model_path")
CLEAR = ("winner", "speculation_does_not_pay")  # the verdicts that name one configuration


def _yaml():
    from ruamel.yaml import YAML  # imported when used: module_utils load without it on the hosts

    y = YAML()  # round-trip
    y.preserve_quotes = True
    y.width = 4096
    return y


def _indent_of(text):
    """(mapping, sequence, offset) indentation of the file's dflash_instances list, as written."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(VAR + ":"):
            for nxt in lines[i + 1:]:
                stripped = nxt.lstrip(" ")
                if stripped.startswith("- "):
                    off = len(nxt) - len(stripped)
                    return 2, off + 2, off
                if stripped and not stripped.startswith("#"):
                    break
    return 2, 4, 2


def candidates(sources, host, groups) -> list:
    """[(path, kind)] in Ansible's order of precedence for host vars (most specific first); kind is
    'vars' (a vars file: dflash_instances at the top) or 'inventory' (an inventory file: under the host)."""
    out, seen = [], set()

    def add(path, kind):
        if os.path.isfile(path) and path not in seen:
            seen.add(path)
            out.append((path, kind))

    def var_files(folder, name):
        for ext in (".yml", ".yaml", ""):
            add(os.path.join(folder, name + ext), "vars")
        sub = os.path.join(folder, name)
        if os.path.isdir(sub):
            for f in sorted(glob.glob(os.path.join(sub, "*.y*ml"))):
                add(f, "vars")

    dirs = []
    for src in sources or []:
        src = os.path.abspath(str(src))
        d = src if os.path.isdir(src) else os.path.dirname(src)
        if d not in dirs:
            dirs.append(d)
    for d in dirs:
        var_files(os.path.join(d, "host_vars"), host)
    for src in sources or []:
        src = os.path.abspath(str(src))
        files = sorted(glob.glob(os.path.join(src, "*.y*ml"))) if os.path.isdir(src) else [src]
        for f in files:
            add(f, "inventory")
    for d in dirs:
        for g in [g for g in reversed(list(groups or [])) if g != "all"] + ["all"]:
            var_files(os.path.join(d, "group_vars"), g)
    return out


def _host_vars_in_inventory(data, host):
    """The mapping of ``host``'s variables in a YAML inventory (all: children: ...: hosts: host: {...})."""
    if not isinstance(data, dict):
        return None
    for group in data.values():
        if not isinstance(group, dict):
            continue
        hosts = group.get("hosts")
        if isinstance(hosts, dict) and isinstance(hosts.get(host), dict):
            return hosts[host]
        found = _host_vars_in_inventory(group.get("children"), host)
        if found is not None:
            return found
    return None


def _find_list(data, kind, host):
    holder = data if kind == "vars" else _host_vars_in_inventory(data, host)
    if isinstance(holder, dict) and isinstance(holder.get(VAR), list):
        return holder[VAR]
    return None


def _apply(entry, cfg):
    """Change the instance mapping ``entry`` (ruamel's) in place to run ``cfg``."""
    new = as_instance(dict(entry), cfg)
    for key in CHANGED:
        if key in new and (key not in entry or entry[key] != new[key]):
            if isinstance(new[key], dict) and isinstance(entry.get(key), dict):
                for k, v in new[key].items():
                    entry[key][k] = v
            else:
                entry[key] = new[key]
        elif key not in new and key in entry:
            del entry[key]


def propose(sources, host, groups, instance, cfg, current_instances, rel_to=None) -> dict:
    """-> {changed, file, diff, instances (the host's dflash_instances with the change, for apply), snippet,
    note}. ``cfg``: the chosen configuration (normalized); ``instance``: its base instance's name."""
    current = [dict(i) for i in current_instances or [] if isinstance(i, dict)]
    inv = next((i for i in current if i.get("name") == instance), None)
    if inv is None:
        return {"changed": False, "file": None, "diff": "", "instances": current, "snippet": "",
                "note": f"the inventory has no instance {instance!r} (the release's base instance) to change"}
    new_inst = as_instance(inv, cfg)
    instances = [new_inst if i.get("name") == instance else i for i in current]
    changed = any(inv.get(k) != new_inst.get(k) for k in CHANGED)
    snippet = _dump_snippet(new_inst)
    if not changed:
        return {"changed": False, "file": None, "diff": "", "instances": instances, "snippet": snippet,
                "note": f"instance {instance} already runs this configuration: nothing to change"}
    try:
        from ruamel.yaml.error import YAMLError

        y = _yaml()
    except ImportError:  # a controller without it (the GPU machine's): the instance, not a diff
        return {"changed": True, "file": None, "diff": "", "instances": instances, "snippet": snippet,
                "note": "ruamel.yaml is not installed on this controller (uv sync): set the instance as below"}
    for path, kind in candidates(sources, host, groups):
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            data = y.load(text)
        except (OSError, ValueError, YAMLError):  # unreadable or not YAML (an INI inventory): not the one
            continue
        lst = _find_list(data, kind, host)
        entry = next((e for e in lst or [] if isinstance(e, dict) and e.get("name") == instance), None)
        if entry is None:
            continue
        _apply(entry, cfg)
        y.indent(*_indent_of(text))
        y.explicit_start = text.lstrip().startswith("---")
        buf = io.StringIO()
        y.dump(data, buf)
        rel = os.path.relpath(path, rel_to) if rel_to else path
        diff = "".join(difflib.unified_diff(text.splitlines(keepends=True), buf.getvalue().splitlines(keepends=True),
                                            fromfile=f"a/{rel}", tofile=f"b/{rel}"))
        return {"changed": True, "file": rel, "diff": diff, "instances": instances, "snippet": snippet,
                "note": f"in {rel}: instance {instance}"}
    return {"changed": True, "file": None, "diff": "", "instances": instances, "snippet": snippet,
            "note": (f"no inventory file of {host} defines instance {instance} in {VAR} (extra vars, a plugin "
                     "inventory?): set it as below")}


def chosen(run, choice) -> tuple:
    """(the chosen configuration as run.json's plan has it, "") or (None, why there is nothing to change)."""
    best = (choice.get("best") or {}).get("name")
    if choice.get("verdict") not in CLEAR:
        return None, "no clear choice: nothing to change"
    cfg = next((c for c in (run.get("plan") or {}).get("configurations") or [] if c.get("name") == best), None)
    if cfg is None or cfg.get("running"):
        return None, f"the best is the running instance {best} as it is: nothing to change"
    return cfg, ""


def _read_json(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def apply_plan(run_dir, host, instances, current_release) -> dict:
    """tune-apply.yml's step: the host's dflash_instances running the choice of the tune run in ``run_dir``, or
    every reason not to deploy it. ``current_release``: the id of the release the host runs now (None: none).
    -> {errors, instances, lines}; errors name the host and say what to do."""
    errors = []
    try:
        run = _read_json(os.path.join(run_dir, "run.json"))
        results = _read_json(os.path.join(run_dir, "results.json"))
    except (OSError, ValueError) as exc:
        return {"errors": [(f"{host}: {run_dir}: not a finished tune run ({exc}): give the folder tune.yml wrote, "
                           "e.g. -e tune_run=reports/tune/<run>")], "instances": list(instances or []), "lines": []}
    name, run_host = run.get("run"), run.get("host")
    if run_host != host:
        errors.append(f"{host}: tune run {name} measured {run_host}, not this host: limit the play to it (-l {run_host})")
    measured = (run.get("release") or {}).get("id")
    if measured != current_release:
        errors.append(f"{host}: tune run {name} measured release {measured}; the host runs "
                      f"{current_release or 'no release'} now, so the figures may no longer hold: tune again")
    choice = results.get("choice") or {}
    cfg, why = chosen(run, choice)
    if cfg is None:
        errors.append(f"{host}: tune run {name}: {why} ({choice.get('text') or choice.get('verdict')})")
    base = run.get("base_instance")
    current = [dict(i) for i in instances or [] if isinstance(i, dict)]
    inv = next((i for i in current if i.get("name") == base), None)
    if inv is None:
        errors.append(f"{host}: the inventory has no instance {base!r} (tune run {name}'s base instance) to change")
    if errors:
        return {"errors": errors, "instances": current, "lines": []}
    new = as_instance(inv, cfg)
    if not any(inv.get(k) != new.get(k) for k in CHANGED):
        return {"errors": [(f"{host}: instance {base} already runs {cfg['name']} in the inventory: nothing to deploy "
                           "(a plain deploy.yml deploys the inventory as written)")], "instances": current, "lines": []}
    return {"errors": [], "instances": [new if i.get("name") == base else i for i in current],
            "lines": [f"{host}: instance {base} -> {cfg['name']}: {choice.get('text')}",
                      ("deploy.yml deploys it now as a new release, every gate; the inventory files are unchanged: "
                      f"apply {os.path.join(run_dir, 'inventory.diff')}, or the next plain deploy.yml puts the "
                      "old configuration back")]}


def _dump_snippet(inst) -> str:
    import yaml  # PyYAML (Ansible's own dependency): the snippet needs no round trip

    return yaml.safe_dump([{k: v for k, v in inst.items() if k not in ("api_key", "admin_api_key")}],
                          sort_keys=False, default_flow_style=False)
