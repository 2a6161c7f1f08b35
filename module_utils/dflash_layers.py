"""Venv layers: validation, content addressing, building with uv, pruning, offline wheelhouse.

Pure logic with no Ansible import. The host-side module (library/dflash_layers.py) and the
controller-side module (library/dflash_wheelhouse.py) are thin wrappers over this file; pytest
imports it directly.

A layer is one venv. An overlay layer's site-packages come first on sys.path and a
``_dflash_parent.pth`` file appends its parent's site-packages (``site.addsitedir``, so the
parent's own .pth files, including its own parent link, are processed too): the overlay's
packages win, everything else is still found below it.

Layer path: ``<prefix>/layers/<name>-<hash12>``, hash = sha256 over the normalised spec, the
parent's hash, the interpreter's implementation and major.minor and, when installing from the
wheelhouse, the sha256 of every wheel installed. A layer is built in
``<prefix>/layers/.tmp-<name>-<hash12>-<rand>``, its marker ``.dflash-layer.json`` written last,
then renamed into place; only a directory holding a marker with the expected hash is trusted.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from urllib.parse import unquote

FORMAT = 1
MARKER = ".dflash-layer.json"
PARENT_PTH = "_dflash_parent.pth"
TMP_PREFIX = ".tmp-"
LOCK_FILE = ".dflash-layers.lock"

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,47}$")
_REQ_RE = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"(?P<extras>\[\s*[A-Za-z0-9._-]+(?:\s*,\s*[A-Za-z0-9._-]+)*\s*\])?\s*"
    r"==\s*(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*$"
)
_CUDA_RE = re.compile(r"^\d{1,2}\.\d{1,2}$")
_KNOWN_KEYS = {
    "name", "python", "parent", "requirements", "index_url", "extra_index_urls", "find_links",
    "no_index", "no_deps", "index_strategy", "env", "cuda", "existing_path",
}
_INDEX_STRATEGIES = ("first-index", "unsafe-first-match", "unsafe-best-match")


class LayerError(Exception):
    """A layer could not be validated, resolved or built; the message names layer and field."""


# --------------------------------------------------------------------------- specs

def canonical_name(name):
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirement(text):
    """Parse a pinned ``name[extras]==version`` string -> (canonical name, extras tuple, version).

    Raises ValueError for anything that is not an exact pin (ranges, markers, URLs, bare names)."""
    match = _REQ_RE.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"{text!r} is not pinned as 'name==version'")
    extras = ()
    if match.group("extras"):
        extras = tuple(sorted({canonical_name(e.strip()) for e in match.group("extras")[1:-1].split(",")}))
    return canonical_name(match.group("name")), extras, match.group("version")


def format_requirement(name, extras, version):
    return f"{name}[{','.join(extras)}]=={version}" if extras else f"{name}=={version}"


def _str_list(value):
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


def validate_layers(layers):
    """All problems of a ``dflash_venv_layers`` list at once: a list of messages naming the layer
    and the field. Empty list = valid."""
    errors = []
    if not isinstance(layers, list) or not layers:
        return ["dflash_venv_layers: must be a non-empty list of layers"]
    seen = {}
    for idx, layer in enumerate(layers):
        where = f"dflash_venv_layers[{idx}]"
        if not isinstance(layer, dict):
            errors.append(f"{where}: must be a mapping, got {type(layer).__name__}")
            continue
        name = layer.get("name")
        if isinstance(name, str) and _NAME_RE.match(name):
            where = f"dflash_venv_layers[{idx}] ({name})"
            if name in seen:
                errors.append(f"{where}: name: duplicate of dflash_venv_layers[{seen[name]}]")
            else:
                seen[name] = idx
        else:
            errors.append(f"{where}: name: {name!r} must match {_NAME_RE.pattern}")
        for key in sorted(set(layer) - _KNOWN_KEYS):
            errors.append(f"{where}: {key}: unknown field (known: {', '.join(sorted(_KNOWN_KEYS))})")
        existing = layer.get("existing_path")
        python = layer.get("python")
        if existing is not None:
            if not isinstance(existing, str) or not existing.startswith("/"):
                errors.append(f"{where}: existing_path: {existing!r} must be an absolute path")
            if layer.get("requirements"):
                errors.append(f"{where}: requirements: a layer with existing_path is used as it is; "
                              "put requirements in an overlay layer")
            if layer.get("parent"):
                errors.append(f"{where}: parent: a layer with existing_path cannot have a parent")
        elif not isinstance(python, str) or not python.strip():
            errors.append(f"{where}: python: required (an interpreter name on the host such as "
                          "python3.12, or an absolute path)")
        parent = layer.get("parent")
        if parent is not None and (not isinstance(parent, str) or parent not in seen
                                   or seen.get(parent) == idx):
            errors.append(f"{where}: parent: {parent!r} must name a layer listed before this one")
        reqs = layer.get("requirements", [])
        if not isinstance(reqs, list):
            errors.append(f"{where}: requirements: must be a list of 'name==version' strings")
        else:
            names = {}
            for ridx, req in enumerate(reqs):
                try:
                    rname = parse_requirement(req)[0]
                except ValueError as exc:
                    errors.append(f"{where}: requirements[{ridx}]: {exc}")
                    continue
                if rname in names:
                    errors.append(f"{where}: requirements[{ridx}]: {rname} pinned twice")
                names[rname] = ridx
        for key in ("index_url",):
            val = layer.get(key)
            if val is not None and (not isinstance(val, str) or not val.strip()):
                errors.append(f"{where}: {key}: must be a non-empty string")
        for key in ("extra_index_urls", "find_links"):
            val = layer.get(key)
            if val is not None and (isinstance(val, str) or not isinstance(val, list)
                                    or not all(isinstance(v, str) and v for v in val)):
                errors.append(f"{where}: {key}: must be a list of non-empty strings")
        for key in ("no_index", "no_deps"):
            val = layer.get(key)
            if val is not None and not isinstance(val, bool):
                errors.append(f"{where}: {key}: must be true or false")
        strategy = layer.get("index_strategy")
        if strategy is not None and strategy not in _INDEX_STRATEGIES:
            errors.append(f"{where}: index_strategy: {strategy!r} not one of {', '.join(_INDEX_STRATEGIES)}")
        env = layer.get("env")
        if env is not None and (not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
                for k, v in env.items())):
            errors.append(f"{where}: env: must be a mapping of variable name to string")
        cuda = layer.get("cuda")
        if cuda is not None and (not isinstance(cuda, str) or not _CUDA_RE.match(cuda)):
            errors.append(f"{where}: cuda: {cuda!r} must be a 'major.minor' string such as '12.8'")
    return errors


def normalise_layer(layer):
    """The canonical form of one layer spec (what the hash covers)."""
    reqs = sorted(format_requirement(*parse_requirement(r)) for r in layer.get("requirements") or [])
    return {
        "name": layer["name"],
        "python": None if layer.get("existing_path") else str(layer.get("python")).strip(),
        "parent": layer.get("parent") or None,
        "requirements": reqs,
        "index_url": layer.get("index_url") or None,
        "extra_index_urls": _str_list(layer.get("extra_index_urls")),
        "find_links": _str_list(layer.get("find_links")),
        "no_index": bool(layer.get("no_index", False)),
        "no_deps": bool(layer.get("no_deps", False)),
        "index_strategy": layer.get("index_strategy") or None,
        "env": {str(k): str(v) for k, v in sorted((layer.get("env") or {}).items())},
        "cuda": layer.get("cuda") or None,
        "existing_path": (layer.get("existing_path") or "").rstrip("/") or None,
    }


def _sha256_json(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def layer_hash(spec, parent_hash=None, interpreter=None, wheel_sha256s=None, existing_freeze=None):
    """sha256 over the normalised spec + parent's hash + interpreter (implementation, major.minor)
    + installed wheel sha256s (wheelhouse mode) + the freeze of an existing venv."""
    interp = None
    if interpreter:
        interp = {"implementation": interpreter.get("implementation"),
                  "version": ".".join(str(interpreter.get("version", "")).split(".")[:2])}
    return _sha256_json({
        "format": FORMAT,
        "spec": spec,
        "parent_hash": parent_hash,
        "interpreter": interp,
        "wheels": sorted(wheel_sha256s) if wheel_sha256s is not None else None,
        "existing": sorted(existing_freeze) if existing_freeze is not None else None,
    })


def layer_dirname(name, digest):
    return f"{name}-{digest[:12]}"


def parent_pth(site_dirs):
    """Content of the .pth that links an overlay to its parent (parent dirs appended after the
    overlay's own site-packages; the parent's .pth files are processed too)."""
    lines = ["# dflash-deploy: parent layer(s); appended after this venv's own site-packages\n"]
    for d in site_dirs:
        lines.append(f"import site; site.addsitedir({d!r})\n")
    return "".join(lines)


def index_args(spec):
    """uv index/find-links/strategy/no-deps arguments of a layer (no requirements)."""
    args = []
    if spec["no_index"]:
        args.append("--no-index")
    if spec["index_url"]:
        args += ["--index-url", spec["index_url"]]
    for url in spec["extra_index_urls"]:
        args += ["--extra-index-url", url]
    for link in spec["find_links"]:
        args += ["--find-links", link]
    if spec["index_strategy"]:
        args += ["--index-strategy", spec["index_strategy"]]
    if spec["no_deps"]:
        args.append("--no-deps")
    return args


def requirements_args(spec, wheel_files=None):
    """uv pip install arguments (after ``--python <venv>``) for a layer: from its index settings, or
    exactly the locked wheel files (offline, no index, no resolution) in wheelhouse mode."""
    if wheel_files is not None:
        return ["--offline", "--no-index", "--no-deps", *wheel_files]
    return index_args(spec) + list(spec["requirements"])


def parse_freeze(text):
    """``name==version`` lines of a freeze, canonical names, sorted."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "==" in line:
            name, _, ver = line.partition("==")
            out.append(f"{canonical_name(name.strip())}=={ver.strip()}")
        else:
            out.append(line)
    return sorted(out)


def dist_info_listing(site_dirs):
    """Freeze-equivalent listing of installed distributions from *.dist-info / *.egg-info names."""
    out = set()
    for d in site_dirs:
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        for entry in entries:
            for suffix in (".dist-info", ".egg-info"):
                if entry.endswith(suffix):
                    stem = entry[: -len(suffix)]
                    name, _, ver = stem.partition("-")
                    out.add(f"{canonical_name(name)}=={ver}" if ver else canonical_name(name))
    return sorted(out)


# --------------------------------------------------------------------------- pruning

def _manifest_layer_paths(manifest):
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    if isinstance(layers, dict):
        layers = list(layers.values())
    paths = set()
    for item in layers or []:
        if isinstance(item, str):
            paths.add(os.path.normpath(item))
        elif isinstance(item, dict) and item.get("path"):
            paths.add(os.path.normpath(str(item["path"])))
    if isinstance(manifest, dict) and manifest.get("venv"):
        paths.add(os.path.normpath(str(manifest["venv"])))
    return paths


def _manifest_sort_key(manifest):
    seq = manifest.get("sequence")
    return (seq if isinstance(seq, int) else -1, str(manifest.get("created") or ""), str(manifest.get("id") or ""))


def prune_candidates(layer_dirs, releases_manifests, keep, protect=(), parents=None):
    """Layer directories to remove: those that none of the last ``keep`` releases refers to.

    layer_dirs: absolute paths of ``<prefix>/layers/<name>-<hash12>`` directories (dot-entries such
    as in-progress ``.tmp-*`` builds are never returned). releases_manifests: release manifests
    (dicts with ``layers``: a list of ``{path: ...}`` or of paths, and/or ``venv``; ordered by
    ``sequence``, then ``created``, then ``id``). ``protect``: paths always kept (the layers of the
    run in progress). ``parents``: {layer dir: [parent layer dirs]} (from the markers) so that a kept
    overlay also keeps the layers below it. keep < 1 keeps every release given.
    """
    manifests = sorted((m for m in releases_manifests if isinstance(m, dict)), key=_manifest_sort_key)
    kept = manifests if keep is None or int(keep) < 1 else manifests[-int(keep):]
    referenced = set()
    for manifest in kept:
        referenced |= _manifest_layer_paths(manifest)
    referenced |= {os.path.normpath(str(p)) for p in protect}
    parents = {os.path.normpath(k): [os.path.normpath(p) for p in v] for k, v in (parents or {}).items()}
    todo = list(referenced)
    while todo:
        for parent in parents.get(todo.pop(), []):
            if parent not in referenced:
                referenced.add(parent)
                todo.append(parent)
    out = []
    for path in layer_dirs:
        norm = os.path.normpath(str(path))
        if os.path.basename(norm).startswith("."):
            continue
        if norm not in referenced:
            out.append(norm)
    return sorted(out)


def layer_dir_of_site(site_dir, layers_dir):
    """``<layers_dir>/<name>-<hash12>`` for a site-packages path inside it, else None."""
    rel = os.path.relpath(os.path.normpath(site_dir), os.path.normpath(layers_dir))
    if rel.startswith(".."):
        return None
    return os.path.join(os.path.normpath(layers_dir), rel.split(os.sep)[0])


_LAYER_DIR_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*-[0-9a-f]{12}$")


def prune_layers(prefix, releases_manifests, keep, protect=(), check_mode=False):
    """Remove layer directories under ``<prefix>/layers`` that the last ``keep`` releases (and
    ``protect``) do not use, with their parents kept through the markers. Returns the removed paths."""
    layers_dir = os.path.join(prefix.rstrip("/"), "layers")
    try:
        names = sorted(os.listdir(layers_dir))
    except OSError:
        return []
    dirs = [os.path.join(layers_dir, n) for n in names
            if _LAYER_DIR_RE.match(n) and os.path.isdir(os.path.join(layers_dir, n))]
    parents = {}
    for d in dirs:
        marker = LayerBuilder.read_marker(d) or {}
        parents[d] = [p for p in (layer_dir_of_site(s, layers_dir) for s in marker.get("parent_site") or []) if p]
    remove = prune_candidates(dirs, releases_manifests, keep, protect, parents)
    if not check_mode:
        for path in remove:
            trash = os.path.join(layers_dir, f"{TMP_PREFIX}prune-{os.path.basename(path)}-{secrets.token_hex(4)}")
            os.rename(path, trash)
            shutil.rmtree(trash, ignore_errors=True)
    return remove


# --------------------------------------------------------------------------- host side

def default_runner(argv, env=None, timeout=None):
    """Run argv -> (rc, stdout, stderr)."""
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired as exc:
        return 124, exc.stdout or "", f"timed out after {timeout}s: {' '.join(argv)}"
    return proc.returncode, proc.stdout, proc.stderr


_INTERP_CODE = (
    "import json, platform, sys, sysconfig\n"
    "print(json.dumps({'executable': sys.executable, 'version': platform.python_version(),"
    " 'implementation': sys.implementation.name, 'prefix': sys.prefix, 'base_prefix': sys.base_prefix,"
    " 'site': sorted({sysconfig.get_path('purelib'), sysconfig.get_path('platlib')}),"
    " 'machine': platform.machine(), 'libc': list(platform.libc_ver())}))\n"
)


def inspect_interpreter(python, runner=default_runner, env=None):
    """Facts of an interpreter on this host (version, implementation, site dirs, libc, machine)."""
    exe = python if python.startswith("/") else (shutil.which(python) or python)
    rc, out, err = runner([exe, "-I", "-c", _INTERP_CODE], env=env, timeout=60)
    if rc != 0:
        raise LayerError(f"interpreter {python!r} is not usable on this host (rc {rc}): "
                         f"{(err or out).strip()[-400:]}")
    facts = json.loads(out.strip().splitlines()[-1])
    facts["requested"] = python
    return facts


class LayerBuilder:
    """Ensure the layers under ``<prefix>/layers``; only writes when a layer must be (re)built."""

    def __init__(self, prefix, uv, runner=default_runner, check_mode=False, cache_dir=None,
                 compile_bytecode=True, build_timeout=3600, log=None):
        self.prefix = prefix.rstrip("/")
        self.layers_dir = os.path.join(self.prefix, "layers")
        self.uv = uv
        self.run = runner
        self.check_mode = check_mode
        self.cache_dir = cache_dir
        self.compile_bytecode = compile_bytecode
        self.build_timeout = build_timeout
        self.log = log if log is not None else []

    # -- helpers
    def _uv_env(self, spec):
        env = dict(os.environ)
        env.update({"UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "NO_COLOR": "1"})
        if self.cache_dir:
            env["UV_CACHE_DIR"] = self.cache_dir
        env.update(spec.get("env") or {})
        return env

    def _uv(self, args, spec, what):
        argv = [self.uv, *args]
        rc, out, err = self.run(argv, env=self._uv_env(spec), timeout=self.build_timeout)
        self.log.append({"cmd": argv, "rc": rc})
        if rc != 0:
            raise LayerError(f"layer {spec['name']}: {what} failed (rc {rc}): {' '.join(argv)}\n"
                             f"{(err or out).strip()[-2000:]}")
        return out

    @staticmethod
    def read_marker(path):
        try:
            with open(os.path.join(path, MARKER), encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None

    def leftovers(self):
        try:
            names = os.listdir(self.layers_dir)
        except OSError:
            return []
        return sorted(os.path.join(self.layers_dir, n) for n in names if n.startswith(TMP_PREFIX))

    # -- planning
    def plan(self, layers, wheel_locks=None, wheelhouse=None):
        """Hash every layer (parents first) and decide reuse/build. Writes nothing."""
        errors = validate_layers(layers)
        if errors:
            raise LayerError("; ".join(errors))
        wheel_locks = wheel_locks or {}
        planned = {}
        out = []
        for layer in layers:
            spec = normalise_layer(layer)
            parent = planned.get(spec["parent"]) if spec["parent"] else None
            item = {"name": spec["name"], "spec": spec, "parent": spec["parent"],
                    "cuda": spec["cuda"], "env": spec["env"]}
            if spec["existing_path"]:
                path = spec["existing_path"]
                python = os.path.join(path, "bin", "python")
                if not os.path.exists(python):
                    raise LayerError(f"layer {spec['name']}: existing_path: {python} does not exist")
                interp = inspect_interpreter(python, self.run)
                freeze = self.freeze(python, interp["site"], spec)
                digest = layer_hash(spec, None, interp, None, freeze)
                item.update(path=path, hash=digest, python=python, interpreter=interp,
                            site=interp["site"], action="existing", freeze=freeze)
            else:
                interp = inspect_interpreter(spec["python"], self.run)
                lock = wheel_locks.get(spec["name"]) if wheelhouse else None
                wheels = None
                if lock is not None:
                    wheels = [w["sha256"] for w in lock]
                    item["wheel_files"] = [os.path.join(wheelhouse, w["filename"]) for w in lock]
                digest = layer_hash(spec, parent["hash"] if parent else None, interp, wheels)
                path = os.path.join(self.layers_dir, layer_dirname(spec["name"], digest))
                marker = self.read_marker(path)
                trusted = bool(marker and marker.get("hash") == digest
                               and os.path.exists(os.path.join(path, "bin", "python")))
                item.update(path=path, hash=digest, python=os.path.join(path, "bin", "python"),
                            interpreter=interp, action="reuse" if trusted else "build",
                            parent_site=(parent or {}).get("site_chain", []))
                item["site"] = [self._venv_site(path, interp)]
            item["site_chain"] = item["site"] + list(item.get("parent_site") or [])
            planned[spec["name"]] = item
            out.append(item)
        return out

    @staticmethod
    def _venv_site(path, interp):
        major_minor = ".".join(interp["version"].split(".")[:2])
        impl = "pypy" if interp.get("implementation") == "pypy" else "python"
        return os.path.join(path, "lib", f"{impl}{major_minor}", "site-packages")

    def freeze(self, python, site_dirs, spec):
        rc, out, _err = self.run([self.uv, "pip", "freeze", "--no-config", "--python", python],
                                 env=self._uv_env(spec), timeout=300)
        if rc == 0:
            return parse_freeze(out)
        return dist_info_listing(site_dirs)

    # -- building
    def build(self, item, lock_fh=None):
        spec = item["spec"]
        interp = item["interpreter"]
        rand = secrets.token_hex(4)
        tmp = os.path.join(self.layers_dir, f"{TMP_PREFIX}{spec['name']}-{item['hash'][:12]}-{rand}")
        started = time.monotonic()
        try:
            self._uv(["venv", "--no-config", "--relocatable", "--python", interp["executable"], tmp],
                     spec, "uv venv")
            site = self._venv_site(tmp, interp)
            if not os.path.isdir(site):
                raise LayerError(f"layer {spec['name']}: uv venv made no {site}")
            if item.get("parent_site"):
                with open(os.path.join(site, PARENT_PTH), "w", encoding="utf-8") as fh:
                    fh.write(parent_pth(item["parent_site"]))
            args = ["pip", "install", "--no-config", "--python", os.path.join(tmp, "bin", "python")]
            if self.compile_bytecode:
                args.append("--compile-bytecode")
            reqs = requirements_args(spec, item.get("wheel_files"))
            if spec["requirements"] or item.get("wheel_files"):
                self._uv(args + reqs, spec, "uv pip install")
            freeze = self.freeze(os.path.join(tmp, "bin", "python"), [site], spec)
            marker = {
                "format": FORMAT, "name": spec["name"], "hash": item["hash"], "spec": spec,
                "parent": spec["parent"], "parent_site": item.get("parent_site") or [],
                "interpreter": {k: interp.get(k) for k in ("executable", "version", "implementation")},
                "wheels": sorted(item.get("wheel_files") or []), "freeze": freeze,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_seconds": round(time.monotonic() - started, 3),
            }
            with open(os.path.join(tmp, MARKER + ".part"), "w", encoding="utf-8") as fh:
                json.dump(marker, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(os.path.join(tmp, MARKER + ".part"), os.path.join(tmp, MARKER))
            final = item["path"]
            if os.path.lexists(final):
                # an untrusted directory (no marker / other hash): move it out of the way first
                trash = os.path.join(self.layers_dir, f"{TMP_PREFIX}untrusted-{os.path.basename(final)}-{rand}")
                os.rename(final, trash)
                shutil.rmtree(trash, ignore_errors=True)
            os.rename(tmp, final)
            item["freeze"] = freeze
            item["build_seconds"] = marker["build_seconds"]
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def ensure(self, layers, wheel_locks=None, wheelhouse=None):
        """Plan, remove stale .tmp dirs, build what must be built. Returns (items, changed)."""
        items = self.plan(layers, wheel_locks, wheelhouse)
        stale = self.leftovers()
        to_build = [i for i in items if i["action"] == "build"]
        changed = bool(to_build or stale)
        if self.check_mode or not changed:
            for item in items:
                item["changed"] = item["action"] == "build"
            return items, changed, stale
        os.makedirs(self.layers_dir, mode=0o755, exist_ok=True)
        with open(os.path.join(self.layers_dir, LOCK_FILE), "a", encoding="utf-8") as lock_fh:
            fcntl.flock(lock_fh, fcntl.LOCK_EX)
            for path in self.leftovers():
                shutil.rmtree(path, ignore_errors=True)
            for item in items:
                if item["action"] == "build":
                    # another run may have built it while we waited for the lock
                    marker = self.read_marker(item["path"])
                    if marker and marker.get("hash") == item["hash"]:
                        item["action"] = "reuse"
                    else:
                        self.build(item)
                item["changed"] = item["action"] == "build"
        return items, changed, stale


def layers_fact(items):
    """The ``dflash_layers`` fact: final layer last."""
    return [{
        "name": i["name"], "path": i["path"], "hash": i["hash"], "parent": i["parent"],
        "python": i["python"], "changed": bool(i.get("changed")), "cuda": i.get("cuda"),
        "site_packages": i["site"], "sys_path_order": i["site_chain"], "env": i.get("env") or {},
        "existing": i["action"] == "existing",
    } for i in items]


# --------------------------------------------------------------------------- wheelhouse (controller)

def manylinux_platforms(arch, glibc):
    """Platform tags a host with this glibc accepts, most specific first."""
    try:
        major, minor = (int(x) for x in str(glibc).split(".")[:2])
    except ValueError:
        major, minor = 2, 17
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    old_arches = ("x86_64", "i686")
    out = []
    if major == 2:
        for m in range(minor, 4, -1):
            out.append(f"manylinux_2_{m}_{arch}")
            if m in legacy and (m == 17 or arch in old_arches):
                out.append(f"{legacy[m]}_{arch}")
    out.append(f"linux_{arch}")
    return out


def wheel_tags(filename):
    """Set of (interpreter, abi, platform) tags of a wheel filename."""
    stem = filename.removesuffix(".whl")
    parts = stem.split("-")
    if len(parts) < 5:
        raise ValueError(f"{filename!r} is not a wheel filename")
    pyt, abit, plat = parts[-3], parts[-2], parts[-1]
    return {(i, a, p) for i in pyt.split(".") for a in abit.split(".") for p in plat.split(".")}


def supported_tags(python_version, arch, glibc, implementation="cp"):
    """Ordered list of tags (best first) for a CPython host, without consulting this interpreter."""
    major, minor = (int(x) for x in str(python_version).split(".")[:2])
    plats = manylinux_platforms(arch, glibc)
    cp = f"{implementation}{major}{minor}"
    tags = []
    for plat in plats:
        tags.append((cp, cp, plat))
    for plat in plats:
        tags.append((cp, "abi3", plat))
        for m in range(minor - 1, 1, -1):
            tags.append((f"{implementation}{major}{m}", "abi3", plat))
    for plat in plats:
        tags.append((cp, "none", plat))
    for plat in plats:
        for m in range(minor, -1, -1):
            tags.append((f"py{major}{m}", "none", plat))
        tags.append((f"py{major}", "none", plat))
    tags.append((cp, "none", "any"))
    for m in range(minor, -1, -1):
        tags.append((f"py{major}{m}", "none", "any"))
    tags.append((f"py{major}", "none", "any"))
    return tags


def select_wheel(wheels, tags):
    """Pick the best wheel (dict with ``url``) for the ordered tag list; None when none fits."""
    rank = {t: i for i, t in enumerate(tags)}
    best = None
    for wheel in wheels:
        filename = wheel.get("name") or unquote(wheel["url"].rsplit("/", 1)[-1].split("#")[0])
        try:
            score = min((rank[t] for t in wheel_tags(filename) if t in rank), default=None)
        except ValueError:
            continue
        if score is not None and (best is None or score < best[0]):
            best = (score, filename, wheel)
    if best is None:
        return None
    return best[1], best[2]


def lock_from_pylock(pylock, tags):
    """Lock entries [{name, version, filename, url, sha256, size}] from a parsed pylock.toml."""
    entries = []
    missing = []
    for pkg in pylock.get("packages", []):
        chosen = select_wheel(pkg.get("wheels") or [], tags)
        if chosen is None:
            missing.append(f"{pkg.get('name')}=={pkg.get('version')}")
            continue
        filename, wheel = chosen
        sha = (wheel.get("hashes") or {}).get("sha256")
        if not sha:
            missing.append(f"{pkg.get('name')}=={pkg.get('version')} (no sha256 in the lock)")
            continue
        entries.append({"name": canonical_name(pkg["name"]), "version": str(pkg.get("version")),
                        "filename": filename, "url": wheel["url"], "sha256": sha,
                        "size": wheel.get("size")})
    if missing:
        raise LayerError("no wheel for the host's platform/python: " + ", ".join(missing))
    return sorted(entries, key=lambda e: e["name"])


def target_from_interpreter(interp):
    """Wheel target of a host interpreter (inspect_interpreter's facts)."""
    libc = interp.get("libc") or ["", ""]
    glibc = libc[1] if len(libc) > 1 and libc[0] == "glibc" and libc[1] else "2.17"
    impl = {"cpython": "cp", "pypy": "pp"}.get(interp.get("implementation"), "cp")
    return {"python_version": ".".join(str(interp["version"]).split(".")[:2]), "arch": interp["machine"],
            "glibc": glibc, "implementation": impl}


def wheelhouse_key(spec, target):
    """Key of a layer's lock in the controller wheelhouse: spec + host target (python, platform)."""
    resolve = {k: spec[k] for k in ("requirements", "index_url", "extra_index_urls", "find_links",
                                    "no_index", "no_deps", "index_strategy")}
    return _sha256_json({"format": FORMAT, "resolve": resolve, "target": target})


def compile_args(spec, target, out_path):
    """``uv pip compile`` arguments producing a pylock.toml for the host's target."""
    glibc = str(target["glibc"]).split(".")
    minor = max(17, min(int(glibc[1]) if len(glibc) > 1 else 17, 40))
    args = ["pip", "compile", "--no-config", "--format", "pylock.toml", "-o", out_path, "--quiet",
            "--python-version", str(target["python_version"]),
            "--python-platform", f"{target['arch']}-manylinux_2_{minor}",
            "--only-binary", ":all:", "--no-header", "--no-annotate"]
    return args + index_args(spec)


def sha256_file(path, bufsize=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(bufsize), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url, dest, timeout=600):
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as resp, open(dest, "wb") as out:
        shutil.copyfileobj(resp, out, 1 << 20)


def ensure_wheelhouse(directory, specs, target, uv_command=("uv",), runner=default_runner,
                      fetch=_download, check_mode=False):
    """Controller side: resolve each layer for the host's target once (lock written to
    ``<dir>/locks/<layer>-<key12>.json``: name, version, filename, url, sha256), download missing
    wheels into ``<dir>/files/``, verify every wheel's sha256 (re-download a corrupt one).

    specs: normalised layer specs (existing_path layers are skipped). target: {python_version,
    arch, glibc, implementation}. Returns {"locks": {layer: entries}, "downloaded": [...],
    "resolved": [...], "changed": bool, "bytes": int}."""
    import tomllib

    files_dir = os.path.join(directory, "files")
    locks_dir = os.path.join(directory, "locks")
    tags = supported_tags(target["python_version"], target["arch"], target["glibc"],
                          target.get("implementation", "cp"))
    result = {"locks": {}, "downloaded": [], "resolved": [], "redownloaded": [], "bytes": 0,
              "lock_files": {}}
    if not check_mode:
        os.makedirs(files_dir, exist_ok=True)
        os.makedirs(locks_dir, exist_ok=True)
    with contextlib.ExitStack() as stack:
        if not check_mode:
            lock_fh = stack.enter_context(open(os.path.join(directory, ".lock"), "a", encoding="utf-8"))
            fcntl.flock(lock_fh, fcntl.LOCK_EX)
        for spec in specs:
            if spec.get("existing_path") or not spec["requirements"]:
                continue
            key = wheelhouse_key(spec, target)
            lock_path = os.path.join(locks_dir, f"{spec['name']}-{key[:12]}.json")
            result["lock_files"][spec["name"]] = lock_path
            entries = None
            if os.path.exists(lock_path):
                with open(lock_path, encoding="utf-8") as fh:
                    entries = json.load(fh)["packages"]
            elif check_mode:
                result["resolved"].append(spec["name"])
                continue
            else:
                work = os.path.join(directory, f".resolve-{spec['name']}-{secrets.token_hex(4)}")
                os.makedirs(work)
                try:
                    req_file = os.path.join(work, "requirements.in")
                    with open(req_file, "w", encoding="utf-8") as fh:
                        fh.write("\n".join(spec["requirements"]) + "\n")
                    out = os.path.join(work, "pylock.toml")
                    argv = [*uv_command, *compile_args(spec, target, out), req_file]
                    env = dict(os.environ)
                    env.update(spec.get("env") or {})
                    rc, sout, serr = runner(argv, env=env, timeout=1800)
                    if rc != 0:
                        raise LayerError(f"layer {spec['name']}: resolving for {target} failed (rc {rc}): "
                                         f"{' '.join(argv)}\n{(serr or sout).strip()[-2000:]}")
                    with open(out, "rb") as fh:
                        entries = lock_from_pylock(tomllib.load(fh), tags)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                with open(lock_path + ".part", "w", encoding="utf-8") as fh:
                    json.dump({"format": FORMAT, "layer": spec["name"], "key": key, "target": target,
                               "requirements": spec["requirements"], "packages": entries},
                              fh, indent=1, sort_keys=True)
                os.rename(lock_path + ".part", lock_path)
                result["resolved"].append(spec["name"])
            result["locks"][spec["name"]] = entries
            for entry in entries:
                dest = os.path.join(files_dir, entry["filename"])
                if os.path.exists(dest):
                    if sha256_file(dest) == entry["sha256"]:
                        continue
                    result["redownloaded"].append(entry["filename"])
                if check_mode:
                    result["downloaded"].append(entry["filename"])
                    continue
                part = f"{dest}.part-{secrets.token_hex(4)}"
                try:
                    fetch(entry["url"], part)
                    got = sha256_file(part)
                    if got != entry["sha256"]:
                        raise LayerError(f"{entry['filename']}: sha256 {got} does not match the lock's "
                                         f"{entry['sha256']} ({entry['url']})")
                    os.rename(part, dest)
                finally:
                    if os.path.exists(part):
                        os.unlink(part)
                result["downloaded"].append(entry["filename"])
                result["bytes"] += os.path.getsize(dest)
    result["changed"] = bool(result["downloaded"] or result["resolved"])
    return result


def extract_uv_binary(wheel_path, dest):
    """Write the ``uv`` executable found in a uv wheel to dest (mode 0755). Returns True when written
    (False when dest already holds the same bytes)."""
    import zipfile

    with zipfile.ZipFile(wheel_path) as zf:
        names = [n for n in zf.namelist() if n.endswith(".data/scripts/uv")]
        if not names:
            raise LayerError(f"{wheel_path}: no uv binary (*.data/scripts/uv) in the wheel")
        data = zf.read(names[0])
    if os.path.exists(dest):
        with open(dest, "rb") as fh:
            if hashlib.sha256(fh.read()).digest() == hashlib.sha256(data).digest():
                return False
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    part = f"{dest}.part-{secrets.token_hex(4)}"
    with open(part, "wb") as fh:
        fh.write(data)
    os.chmod(part, 0o755)
    os.rename(part, dest)
    return True


def missing_wheels(wheelhouse, wheels):
    """Filenames of ``wheels`` ([{filename, sha256}]) that ``wheelhouse`` lacks or holds with another
    sha256 (what must be pushed). Reads only."""
    out = []
    for w in sorted({w["filename"]: w for w in wheels}.values(), key=lambda w: w["filename"]):
        path = os.path.join(wheelhouse, w["filename"])
        if not os.path.isfile(path) or sha256_file(path) != w["sha256"]:
            out.append(w["filename"])
    return out


def bundle_wheels(files_dir, filenames, bundle_dir):
    """One uncompressed tar of the given wheels (wheels are zips already) for a single push;
    named by the content so a repeated push reuses it. Returns its path."""
    import tarfile

    names = sorted(set(filenames))
    key = _sha256_json([[n, os.path.getsize(os.path.join(files_dir, n))] for n in names])[:16]
    dest = os.path.join(bundle_dir, f"push-{key}.tar")
    if os.path.exists(dest):
        return dest
    os.makedirs(bundle_dir, exist_ok=True)
    part = f"{dest}.part-{secrets.token_hex(4)}"
    with tarfile.open(part, "w") as tar:
        for n in names:
            tar.add(os.path.join(files_dir, n), arcname=n)
    os.rename(part, dest)
    return dest
