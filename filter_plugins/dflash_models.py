"""Jinja filters of the models stage (roles/dflash_models): thin wrappers over module_utils/dflash_models/."""

from __future__ import annotations

import os

import ansible.module_utils

# The repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils.dflash_common.jinja import plain as _plain
from ansible.module_utils.dflash_models import sources as _sources

# what the models stage needs of an instance: never its keys or env (they stay out of module parameters)
_FIELDS = ("name", "algorithm", "model_path", "draft_model_path", "model_source", "draft_source")


def dflash_models_sources(instances):
    """The instances reduced to the fields the models stage reads (no api_key, no env: those are never read
    here, so a key from a vault that is not loaded yet does not stop this stage; the validation names it)."""
    out = []
    for item in instances or []:
        if hasattr(item, "keys"):
            out.append({k: _plain(item[k]) for k in _FIELDS if k in item})
    return out


def dflash_models_fetched(instances):
    """Whether any instance names a source to fetch."""
    return bool(_sources.fetched_sources(dflash_models_sources(instances)))


def dflash_models_stored(instances, stored):
    """The instances with each fetched source replaced by its stored copy (sources.with_stored_paths)."""
    return _sources.with_stored_paths(_plain(instances or []), _plain(stored or {}))


def dflash_models_pairs(instances):
    """[{instance, target, draft}] of every speculative instance whose paths are known."""
    out = []
    for i in _plain(instances or []):
        if not isinstance(i, dict) or str(i.get("algorithm") or "DFLASH").upper() == "NONE":
            continue
        target = i.get("model_source") if isinstance(i.get("model_source"), str) else i.get("model_path")
        if isinstance(target, str) and isinstance(i.get("draft_model_path"), str):
            out.append({"instance": str(i.get("name")), "target": target, "draft": i["draft_model_path"]})
    return out


class FilterModule:
    def filters(self):
        return {"dflash_models_sources": dflash_models_sources, "dflash_models_fetched": dflash_models_fetched,
                "dflash_models_stored": dflash_models_stored, "dflash_models_pairs": dflash_models_pairs}
