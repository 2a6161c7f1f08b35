"""Action plugin of dflash_models: the controller side of the models stage.

``mode: ensure`` (roles/dflash_models): every fetched source of the host's instances (``model_source`` /
``draft_source`` mappings: the hub at a pinned commit, an archive URL with its sha256, a controller
directory) is fetched into the controller's cache (once for every host and run), checked (sizes and hashes),
described by its manifest and digest; a target and draft that both come from sources are checked as a pair
here, before a byte is pushed; what the host's store lacks is pushed into ``<store>/.incoming-<digest>/``
and committed there by the module (every file's sha256 checked on the host, then renamed into place). Each
step that can take minutes prints a line every ``progress_interval`` seconds: what, how far, how long.
``mode: plan`` only says what each source holds (sizes, for the disk check) and fetches nothing.

Returns ``stored`` ({instance: {model_source|draft_source: host path}}) for module_utils/dflash_models/
sources.py ``with_stored_paths`` and ``models`` (one entry per source: name, digest, path, bytes, fetched,
pushed).
"""

from __future__ import annotations

import json
import os

import ansible.module_utils
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

# the repository's module_utils/ under the name the modules import it by (docs/design.md, "Import path")
_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)

from ansible.module_utils.dflash_common import progress
from ansible.module_utils.dflash_models import fetch, sources
from ansible.module_utils.dflash_models import store as model_store
from ansible.module_utils.dflash_models.pair import pair_errors

display = Display()


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        task_vars = task_vars or {}
        if args.get("action"):  # the host module's own actions (status, prepare, commit, pairs)
            return dict(result, **self._execute_module(module_name="dflash_models", module_args=dict(args),
                                                       task_vars=task_vars))
        host = task_vars.get("inventory_hostname", "")
        self._host = host
        instances = args.get("instances") or []
        mode = args.get("mode", "ensure")
        cache = os.path.expanduser(str(args.get("cache_dir") or "~/.cache/dflash/models"))
        endpoint = str(args.get("endpoint") or os.environ.get("HF_ENDPOINT") or fetch.DEFAULT_ENDPOINT).rstrip("/")
        store_dir = str(args.get("store") or "")
        try:
            self._interval = float(args.get("progress_interval", 30))
        except (TypeError, ValueError):
            self._interval = 30.0

        errors = []
        for inst in instances:
            for field, msg in sources.instance_errors(inst):
                errors.append(f"{host}: instance {inst.get('name')}: field '{field}': {msg}")
        if errors:
            return dict(result, failed=True, msg="; ".join(errors), errors=errors)

        # one entry per distinct source, whichever instances (and fields) use it
        unique, users = {}, {}
        for name, field, spec in sources.fetched_sources(instances):
            key = json.dumps(sources.identity(spec), sort_keys=True)
            unique.setdefault(key, spec)
            users.setdefault(key, []).append((name, field))
        try:
            if mode == "plan":
                return dict(result, **self._plan(unique, cache, endpoint, store_dir, task_vars))
            described = {key: self._describe(spec, cache, endpoint) for key, spec in unique.items()}
            _remember(cache, {key: {k: m[k] for k in ("digest", "name", "bytes")} for key, m in described.items()})
        except fetch.FetchError as exc:
            return dict(result, failed=True, msg=f"{host}: {exc}")

        # target and draft both fetched: their pair is checked here, before anything is pushed
        by_inst = {}
        for key, who in users.items():
            for name, field in who:
                by_inst.setdefault(name, {})[field] = described[key]
        pair_problems = []
        for name, fields in by_inst.items():
            if "model_source" in fields and "draft_source" in fields:
                t, d = fields["model_source"], fields["draft_source"]
                pair_problems += [f"{host}: instance {name}: draft {d['describe']} does not fit target "
                                  f"{t['describe']}: {e}"
                                  for e in pair_errors(_read_config(t["folder"]), _read_config(d["folder"]))]
        if pair_problems:
            return dict(result, failed=True, msg="; ".join(pair_problems), errors=pair_problems)

        status = self._module("status", task_vars, store=store_dir,
                              entries=[{"digest": m["digest"], "name": m["name"]} for m in described.values()])
        if status.get("failed"):
            return dict(result, failed=True, msg=f"{host}: reading the model store {store_dir}: {status.get('msg')}")
        present = status.get("present") or {}
        missing = [m for m in described.values() if m["digest"] not in present]
        need = sum(m["bytes"] for m in missing)
        if need and need > int(status.get("free_bytes") or 0):
            return dict(result, failed=True,
                        msg=f"{host}: {store_dir} has {progress.human_bytes(status.get('free_bytes'))} free, the models "
                            f"to store need {progress.human_bytes(need)}: free space there or set dflash_models_store")
        changed = False
        for m in described.values():
            m["path"] = present.get(m["digest"]) or os.path.join(store_dir, model_store.store_dirname(m["name"],
                                                                                                    m["digest"]))
            m["pushed"] = False
            if m["digest"] in present:
                display.display(f"{host}: model {m['describe']}: already stored in {m['path']}, nothing to push")
                continue
            if self._task.check_mode:
                display.display(f"{host}: model {m['describe']}: would push {progress.human_bytes(m['bytes'])} "
                                f"to {m['path']} (check mode)")
                changed = True
                continue
            err = self._push(m, store_dir, task_vars)
            if err:
                return dict(result, failed=True, msg=err)
            m["pushed"] = changed = True

        stored = {}
        for key, who in users.items():
            for name, field in who:
                stored.setdefault(name, {})[field] = described[key]["path"]
        models = [{k: m[k] for k in ("name", "digest", "path", "bytes", "files", "fetched", "pushed", "describe")}
                  for m in described.values()]
        return dict(result, changed=changed, stored=stored, models=models)

    # ------------------------------------------------------------------ controller side

    def _plan(self, unique, cache, endpoint, store_dir, task_vars):
        """Bytes each source needs on this host: 0 for a copy the store already holds (known from an earlier
        fetch, the controller cache's index), else its size from the source; nothing is downloaded."""
        index = _index(cache)
        known = {key: index[key] for key in unique if key in index}
        present = {}
        if known and store_dir:
            st = self._module("status", task_vars, store=store_dir,
                              entries=[{"digest": v["digest"], "name": v["name"]} for v in known.values()])
            present = st.get("present") or {}
        sizes, stored = {}, []
        for key, spec in unique.items():
            what = sources.describe(spec)
            if key in known and known[key]["digest"] in present:
                stored.append(what)
                sizes[what] = 0
            else:
                sizes[what] = fetch.expected_size(spec, endpoint, fetch.token_for(spec))
        return {"changed": False, "sizes": sizes, "stored": stored,
                "bytes": sum(v for v in sizes.values() if v), "unknown": [k for k, v in sizes.items() if v is None]}

    def _say(self, text):
        display.display(f"{self._host}: {text}")

    def _describe(self, spec, cache, endpoint):
        """Fetch into the controller cache (with progress), check, and compute the manifest and digest."""
        kind = sources.kind(spec)
        what = sources.describe(spec)
        token = fetch.token_for(spec)
        fetched = False
        if kind == "hub":
            listing = fetch.hub_listing(spec, endpoint, token)
            total = sum(e["size"] for e in listing)
            blobs = os.path.join(fetch.hub_repo_dir(cache, spec["hub"]), "blobs")
            before = fetch.dir_bytes(blobs) if os.path.isdir(blobs) else 0
            folder = progress.run_with_progress(
                lambda: fetch.fetch_hub(spec, cache, endpoint, token, listing),
                lambda: {"done": min(total, fetch.dir_bytes(blobs)) if os.path.isdir(blobs) else 0,
                         "total": total, "unit": "bytes"},
                f"model {what}: downloading from {endpoint}", self._say, self._interval)
            fetched = fetch.dir_bytes(blobs) > before
        elif kind == "url":
            archive, _unpacked = fetch.url_paths(cache, spec)
            total = fetch.url_size(spec["url"])
            part_dir = os.path.dirname(archive)

            def measure():
                parts = [f for f in os.listdir(part_dir) if f.startswith(os.path.basename(archive))] \
                    if os.path.isdir(part_dir) else []
                done = max([os.path.getsize(os.path.join(part_dir, f)) for f in parts] or [0])
                return {"done": done, "total": total, "unit": "bytes"}

            fetched = not os.path.exists(archive)
            folder = progress.run_with_progress(lambda: fetch.fetch_url(spec, cache), measure,
                                                f"model {what}: downloading", self._say, self._interval)
        else:
            folder = spec["controller"]
            if not os.path.isdir(folder):
                raise fetch.FetchError(f"controller: {folder} is not a directory on the controller")
            listing = None
        rels = model_store.model_files(folder)
        total = sum(os.path.getsize(os.path.join(folder, r)) for r in rels)
        hashed = {"n": 0}

        def count(n):
            hashed["n"] += n

        hasher = model_store.HashCache(os.path.join(cache, "sha256.json"))
        sha256s = progress.run_with_progress(
            lambda: hasher.get_many(folder, rels, count),
            lambda: {"done": hashed["n"], "total": total, "unit": "bytes"},
            f"model {what}: checking sha256", self._say, self._interval)
        if kind == "hub":
            problems = fetch.check_hub_files(folder, listing, sha256s)
            if problems:
                raise fetch.FetchError(f"{what}: the downloaded files do not match the hub's listing: "
                                       + "; ".join(problems[:10]))
        manifest = model_store.manifest_of(folder, hashes=sha256s)
        if not manifest:
            raise fetch.FetchError(f"{what}: no files")
        if not any(f["path"] == "config.json" for f in manifest):
            raise fetch.FetchError(f"{what}: no config.json at the top of the model's folder")
        digest = model_store.digest(manifest)
        name = sources.display_name(spec)
        self._say(f"model {what}: {len(manifest)} files, {progress.human_bytes(total)}, digest {digest[:12]}"
                  + (" (downloaded now)" if fetched else " (from the controller's cache)" if kind != "controller"
                     else ""))
        return {"folder": folder, "manifest": manifest, "digest": digest, "name": name, "bytes": total,
                "files": len(manifest), "fetched": fetched, "describe": what,
                "source": dict(sources.identity(spec), kind=kind)}

    # ------------------------------------------------------------------ host side

    def _module(self, action, task_vars, **params):
        return self._execute_module(module_name="dflash_models", module_args=dict(params, action=action),
                                    task_vars=task_vars)

    def _push(self, m, store_dir, task_vars):
        prep = self._module("prepare", task_vars, store=store_dir, digest=m["digest"], manifest=m["manifest"])
        if prep.get("failed"):
            return f"{self._host}: preparing {store_dir} for {m['describe']}: {prep.get('msg')}"
        incoming, have = prep["incoming"], set(prep.get("have") or [])
        todo = [f for f in m["manifest"] if f["path"] not in have]
        total = sum(f["size"] for f in todo)
        state = {"done": 0, "file": ""}

        def push_all():
            for f in todo:
                state["file"] = f["path"]
                self._connection.put_file(os.path.join(m["folder"], f["path"]), os.path.join(incoming, f["path"]))
                state["done"] += f["size"]

        progress.run_with_progress(
            push_all, lambda: {"done": state["done"], "total": total, "unit": "bytes",
                               "note": f"now {state['file']}" if state["file"] else None},
            f"model {m['describe']}: pushing {len(todo)} file(s) to {incoming}", self._say, self._interval)
        self._say(f"model {m['describe']}: checking the pushed copy on the host (sha256 of every file)")
        res = self._module("commit", task_vars, store=store_dir, digest=m["digest"], name=m["name"],
                           manifest=m["manifest"], source=m["source"])
        if res.get("failed"):
            return f"{self._host}: {res.get('msg')}"
        self._say(f"model {m['describe']}: stored in {res['path']}")
        return None


def _index_path(cache):
    return os.path.join(cache, "index.json")


def _index(cache):
    try:
        with open(_index_path(cache), encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _remember(cache, entries):
    """source identity -> {digest, name, bytes}: what a source held when it was last fetched (the plan of a
    later run finds the host's stored copy by it without fetching)."""
    os.makedirs(cache, exist_ok=True)
    data = _index(cache)
    data.update(entries)
    tmp = f"{_index_path(cache)}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, _index_path(cache))


def _read_config(folder):
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        return json.dumps({"_error": str(exc)})
