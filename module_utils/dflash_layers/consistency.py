"""Consistency of a layered environment, ``pip check``-like, across every layer at once.

Every distribution an interpreter can import (its whole ``sys.path``: the overlay's site-packages,
then the parents' added by their ``.pth`` links, then the patched tree in front when given) is
read with ``importlib.metadata``; for each one that wins (the first of its name on ``sys.path``),
every requirement whose marker holds for that interpreter must be met by the winning
distribution of that name. Each unmet requirement is reported with its owner (name, version,
where it lives). Extras are not followed (as ``pip check``). Pure logic, no Ansible import.
"""

from __future__ import annotations

import importlib.metadata
import os

from ansible.module_utils.dflash_layers.pep440 import parse_version
from ansible.module_utils.dflash_layers.pep508 import InvalidRequirement, Requirement, canonical_name


def _location(dist):
    try:  # a PathDistribution locates files relative to the directory holding its .dist-info
        return os.path.normpath(str(dist.locate_file("")))
    except (AttributeError, NotImplementedError, TypeError):
        return None


def installed_distributions(paths):
    """``[{name, key, version, requires, requires_python, provides_extra, location, shadowed_by}]`` for every distribution found on
    ``paths`` in that order; the first of a name wins, later ones get ``shadowed_by`` = its location."""
    out, first = [], {}
    for entry in paths:
        if not entry or not os.path.isdir(entry):
            continue
        for dist in importlib.metadata.distributions(path=[entry]):
            name = dist.metadata.get("Name") if dist.metadata is not None else None
            if not name:
                continue
            key = canonical_name(name)
            item = {"name": name, "key": key, "version": dist.version, "requires": list(dist.requires or []),
                    "requires_python": dist.metadata.get("Requires-Python"),
                    "provides_extra": list(dist.metadata.get_all("Provides-Extra") or []),
                    "location": _location(dist) or entry, "shadowed_by": None}
            if key in first:
                item["shadowed_by"] = first[key]["location"]
            else:
                first[key] = item
            out.append(item)
    return out


def check(dists, env, names=None):
    """Unmet requirements of the winning distributions (``dists`` as from installed_distributions;
    ``env`` = the interpreter's marker environment). ``names``: only check these owners (keys).

    Returns ``[{owner, owner_version, owner_location, requirement, key, found, found_location,
    problem: missing|conflict|invalid, message}]``, sorted by owner then requirement."""
    winners = {}
    for d in dists:
        if not d.get("shadowed_by") and d["key"] not in winners:
            winners[d["key"]] = d
    wanted = {canonical_name(n) for n in names} if names is not None else None
    problems = []
    for key, owner in sorted(winners.items()):
        if wanted is not None and key not in wanted:
            continue
        who = f"{owner['name']} {owner['version']}"
        for text in owner["requires"]:
            base = {"owner": owner["name"], "owner_version": owner["version"],
                    "owner_location": owner["location"], "requirement": text}
            try:
                req = Requirement(text)
            except InvalidRequirement as exc:
                problems.append({**base, "key": None, "found": None, "found_location": None,
                                 "problem": "invalid", "message": f"{who}: unreadable requirement: {exc}"})
                continue
            if not req.applies(env):
                continue
            found = winners.get(req.key)
            if found is None:
                problems.append({**base, "key": req.key, "found": None, "found_location": None,
                                 "problem": "missing",
                                 "message": f"{who} requires {text.split(';')[0].strip()}, which is not installed"})
                continue
            if req.specifier and (parse_version(found["version"]) is None
                                  or not req.specifier.contains(found["version"])):
                problems.append({**base, "key": req.key, "found": found["version"],
                                 "found_location": found["location"], "problem": "conflict",
                                 "message": (f"{who} requires {text.split(';')[0].strip()}, but "
                                             f"{found['name']} {found['version']} is installed "
                                             f"(in {found['location']})")})
    return problems


def shadowed(dists):
    """``[{name, version, location, shadowed_by}]`` of distributions hidden by an earlier one."""
    return [{k: d[k] for k in ("name", "version", "location", "shadowed_by")} for d in dists if d["shadowed_by"]]
