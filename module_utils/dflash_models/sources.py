"""Where a model or a draft comes from: the ``model_source`` / ``draft_source`` fields of an instance.

A mapping names a source the models stage fetches and stores on the host, content-addressed:

    {hub: Qwen/Qwen3.6-27B, revision: <40-hex commit>}        the Hugging Face hub, pinned to a commit
    {url: https://host/model.tar.gz, sha256: <64 hex>}         an archive (.tar, .tar.gz, .tgz, .zip)
    {controller: /data/models/Qwen3.6-27B}                     a directory on the controller

A string ``model_source`` keeps its other meaning: a directory on the host that a tmpfs ``model_path`` is
staged from (roles/dflash_instances). Pure functions, no Ansible import.
"""

from __future__ import annotations

import posixpath
import re

KINDS = ("hub", "url", "controller")
KEYS = {"hub": {"hub", "revision", "token_env"}, "url": {"url", "sha256"}, "controller": {"controller"}}
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
ARCHIVES = (".tar", ".tar.gz", ".tgz", ".zip")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FIELDS = {"model_source": "model_path", "draft_source": "draft_model_path"}


def is_fetched(spec) -> bool:
    """A source the models stage fetches (a mapping), not a host path."""
    return isinstance(spec, dict)


def kind(spec) -> str | None:
    found = [k for k in KINDS if k in (spec or {})]
    return found[0] if len(found) == 1 else None


def spec_errors(spec) -> list[str]:
    """What is wrong with one source mapping, in words ([] = usable)."""
    if not isinstance(spec, dict):
        return [f"must be a mapping with one of {', '.join(KINDS)}, got {spec!r}"]
    found = [k for k in KINDS if k in spec]
    if len(found) != 1:
        return [(f"needs exactly one of {', '.join(KINDS)} (got {', '.join(found) or 'none'}), e.g. "
                "{hub: Qwen/Qwen3.6-27B, revision: <commit>}, {url: https://.../model.tar.gz, sha256: <hash>} "
                "or {controller: /path/on/the/controller}")]
    k = found[0]
    errors = [f"unknown key '{key}' for a {k} source (known: {', '.join(sorted(KEYS[k]))})"
              for key in sorted(set(spec) - KEYS[k])]
    if k == "hub":
        repo, rev = spec.get("hub"), spec.get("revision")
        if not isinstance(repo, str) or not REPO_RE.match(repo):
            errors.append(f"hub: {repo!r} is not a repository id like 'org/name'")
        if not isinstance(rev, str) or not COMMIT_RE.match(rev):
            errors.append(f"revision: {rev!r} is not a pinned commit: give the 40-hex commit id of the revision "
                          "(a branch or tag moves; the hub page's 'Files and versions' history shows the commit)")
        tok = spec.get("token_env")
        if tok is not None and (not isinstance(tok, str) or not ENV_RE.match(tok)):
            errors.append(f"token_env: {tok!r} is not an environment variable name")
    elif k == "url":
        url, digest = spec.get("url"), spec.get("sha256")
        if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+/\S+$", url):
            errors.append(f"url: {url!r} is not an http(s) URL of a file")
        elif not url.split("?", 1)[0].lower().endswith(ARCHIVES):
            errors.append(f"url: {url} is not an archive of the model's folder ({', '.join(ARCHIVES)})")
        if not isinstance(digest, str) or not SHA256_RE.match(digest.lower()):
            errors.append(f"sha256: {digest!r} is not the 64-hex sha256 of the archive (it is checked after the "
                          "download: `sha256sum model.tar.gz`)")
    else:
        path = spec.get("controller")
        if not isinstance(path, str) or not path.startswith("/") or posixpath.normpath(path) == "/":
            errors.append(f"controller: {path!r} is not an absolute directory path on the controller")
    return errors


def instance_errors(inst, tmpfs_prefixes=("/dev/shm/", "/run/shm/")) -> list[tuple[str, str]]:
    """(field, message) for the source fields of one instance and how they go with the path fields."""
    out = []
    if not isinstance(inst, dict):
        return out
    ms, ds = inst.get("model_source"), inst.get("draft_source")
    if is_fetched(ms):
        out += [("model_source", e) for e in spec_errors(ms)]
        mp = inst.get("model_path")
        if mp and not (isinstance(mp, str) and any(mp.startswith(t) and len(mp) > len(t) for t in tmpfs_prefixes)):
            out.append(("model_path", (f"{mp!r} with a fetched model_source: leave model_path out (the instance "
                                      "reads the stored copy) or put it under /dev/shm (staged from the stored copy)")))
    if ds is not None:
        if not is_fetched(ds):
            out.append(("draft_source", f"must be a mapping with one of {', '.join(KINDS)}, got {ds!r}"))
        else:
            out += [("draft_source", e) for e in spec_errors(ds)]
            if inst.get("draft_model_path"):
                out.append(("draft_model_path", ("is set together with draft_source: leave it out, the instance "
                                                "reads the stored copy of draft_source")))
        if str(inst.get("algorithm") or "DFLASH").upper() == "NONE":
            out.append(("draft_source", "algorithm NONE has no draft: leave draft_source out"))
    return out


def identity(spec) -> dict:
    """What names the source (not its bytes): the controller-side cache key of a fetch."""
    k = kind(spec)
    if k == "hub":
        return {"hub": spec["hub"], "revision": spec["revision"]}
    if k == "url":
        return {"url_sha256": str(spec["sha256"]).lower()}
    return {"controller": posixpath.normpath(spec["controller"])}


def display_name(spec) -> str:
    """A short readable name for the stored copy: the repository's or folder's last part."""
    k = kind(spec)
    raw = spec["hub"] if k == "hub" else spec["controller"] if k == "controller" else spec["url"].split("?", 1)[0]
    base = raw.rstrip("/").rsplit("/", 1)[-1]
    for ext in sorted(ARCHIVES, key=len, reverse=True):
        if base.lower().endswith(ext):
            base = base[: -len(ext)]
            break
    base = re.sub(r"[^A-Za-z0-9._-]", "-", base).strip(".-") or "model"
    return base[:64]


def describe(spec) -> str:
    k = kind(spec)
    if k == "hub":
        return f"hub {spec['hub']}@{spec['revision'][:12]}"
    if k == "url":
        return f"url {spec['url']}"
    return f"controller {spec['controller']}"


def fetched_sources(instances) -> list[tuple[str, str, dict]]:
    """[(instance name, field, spec)] of every fetched source, in inventory order."""
    out = []
    for inst in instances or []:
        if not isinstance(inst, dict):
            continue
        for field in ("model_source", "draft_source"):
            if is_fetched(inst.get(field)):
                out.append((str(inst.get("name")), field, inst[field]))
    return out


def with_stored_paths(instances, stored) -> list:
    """The instances with each fetched source replaced by its stored copy on the host.

    ``stored``: {instance name: {model_source | draft_source: path}}. A model whose ``model_path`` is on
    tmpfs keeps it and is staged from the stored copy (``model_source`` becomes that host path); otherwise
    ``model_path`` is the stored copy. ``draft_model_path`` is the draft's stored copy."""
    out = []
    for inst in instances or []:
        if not isinstance(inst, dict):
            out.append(inst)
            continue
        new = dict(inst)
        paths = (stored or {}).get(str(inst.get("name"))) or {}
        if is_fetched(inst.get("model_source")) and paths.get("model_source"):
            if inst.get("model_path"):
                new["model_source"] = paths["model_source"]
            else:
                new.pop("model_source")
                new["model_path"] = paths["model_source"]
        if is_fetched(inst.get("draft_source")) and paths.get("draft_source"):
            new.pop("draft_source")
            new["draft_model_path"] = paths["draft_source"]
        out.append(new)
    return out
