"""Venv layers: validation, content addressing, building with uv, pruning.

Over 500 lines on purpose: the spec checks, the content hash and the builder (LayerBuilder) are one contract (the
hash covers exactly what validate/normalise accept and what the builder installs), read and changed together;
the computed overlay (overlay.py), the wheelhouse (wheelhouse.py) and wheels (wheels.py) are already apart.

Pure logic with no Ansible import. The host-side module (library/dflash_layers.py) is a thin
wrapper over this file; pytest imports it directly. What a layer installs is computed
(module_utils/dflash_layers/overlay.py): its requirements' closure less what its parent already provides;
the controller's offline wheelhouse is module_utils/dflash_layers/wheelhouse.py.

A layer is one venv. An overlay layer's site-packages come first on sys.path and a
``_dflash_parent.pth`` file appends its parent's site-packages (``site.addsitedir``, so the
parent's own .pth files, including its own parent link, are processed too): the overlay's
packages win, everything else is still found below it.

Layer path: ``<prefix>/layers/<name>-<hash12>``, hash = sha256 over the normalised spec, the
parent's hash (an existing venv's hash is its freeze, so a base upgraded under us changes every
layer above it), the interpreter's implementation and major.minor and, when installing from the
wheelhouse, the locked closure and the sha256 of every wheel installed (resolving on the host, the
files its local find-links directories hold). A layer is built in
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
import tempfile
import time

from ansible.module_utils.dflash_common import progress as dflash_progress
from ansible.module_utils.dflash_common.disk import no_space_headline, uv_cache_dir
from ansible.module_utils.dflash_common.trash import remove_dirs
from ansible.module_utils.dflash_layers import overlay
from ansible.module_utils.dflash_layers.pep508 import canonical_name
from ansible.module_utils.dflash_layers.wheels import LayerError

# 2: overlays are computed (closure less what the parent provides); existing venvs hashed by what
# they expose (importlib.metadata over their site dirs and .pth links)
FORMAT = 2
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
_PROJECT_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
# the fields of a layer: its own, and uv's resolution options (overlay.UV_OPTIONS)
_KNOWN_KEYS = {
    "name", "python", "parent", "requirements", "no_deps", "env", "cuda", "existing_path", "exclude",
    *overlay.UV_OPTIONS,
}


# --------------------------------------------------------------------------- specs

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
        elif python is None and layer.get("parent"):
            pass  # inherits the parent's interpreter
        elif not isinstance(python, str) or not python.strip():
            errors.append(f"{where}: python: required (an interpreter name on the host such as "
                          "python3.12, or an absolute path; a layer with a parent inherits its parent's)")
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
        for key in overlay.UV_OPTIONS:
            problem = overlay.uv_option_error(key, layer.get(key))
            if problem:
                errors.append(f"{where}: {key}: {problem}")
        val = layer.get("no_deps")
        if val is not None and not isinstance(val, bool):
            errors.append(f"{where}: no_deps: must be true or false")
        env = layer.get("env")
        if env is not None and (not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
                for k, v in env.items())):
            errors.append(f"{where}: env: must be a mapping of variable name to string")
        cuda = layer.get("cuda")
        if cuda is not None and (not isinstance(cuda, str) or not _CUDA_RE.match(cuda)):
            errors.append(f"{where}: cuda: {cuda!r} must be a 'major.minor' string such as '12.8'")
        errors += _exclude_errors(where, layer, reqs if isinstance(reqs, list) else [])
    return errors


def _exclude_errors(where, layer, reqs):
    """``exclude``: [{name, reason}], projects left out of the layer's resolution, each with why."""
    excl = layer.get("exclude")
    if excl is None:
        return []
    if not isinstance(excl, list):
        return [f"{where}: exclude: must be a list of {{name, reason}}"]
    if layer.get("existing_path") is not None and excl:
        return [f"{where}: exclude: a layer with existing_path is used as it is"]
    pinned = set()
    for req in reqs:
        with contextlib.suppress(ValueError):
            pinned.add(parse_requirement(req)[0])
    errors = []
    for idx, item in enumerate(excl):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not _PROJECT_RE.match(name):
            errors.append(f"{where}: exclude[{idx}]: name: {name!r} must be a project name")
        elif canonical_name(name) in pinned:
            errors.append(f"{where}: exclude[{idx}]: {name} is one of this layer's own requirements")
        reason = item.get("reason") if isinstance(item, dict) else None
        if not isinstance(reason, str) or not reason.strip():
            errors.append(f"{where}: exclude[{idx}]: reason: required (why the layer leaves it out)")
        extra = sorted(set(item) - {"name", "reason"}) if isinstance(item, dict) else []
        if extra:
            errors.append(f"{where}: exclude[{idx}]: {', '.join(extra)}: unknown field (known: name, reason)")
    return errors


def normalise_layer(layer):
    """The canonical form of one layer spec (what the hash covers). ``python`` is None for an
    existing venv, and for a layer that inherits its parent's interpreter."""
    reqs = sorted(format_requirement(*parse_requirement(r)) for r in layer.get("requirements") or [])
    python = layer.get("python")
    return {
        "name": layer["name"],
        "python": None if layer.get("existing_path") or python is None else str(python).strip(),
        "parent": layer.get("parent") or None,
        "requirements": reqs,
        **overlay.uv_options_canonical(layer),
        "no_deps": bool(layer.get("no_deps", False)),
        "env": {str(k): str(v) for k, v in sorted((layer.get("env") or {}).items())},
        "cuda": layer.get("cuda") or None,
        "existing_path": (layer.get("existing_path") or "").rstrip("/") or None,
        "exclude": sorted(({"name": canonical_name(e["name"]), "reason": str(e["reason"]).strip()}
                           for e in layer.get("exclude") or []), key=lambda e: e["name"]),
    }


def normalise_layers(layers):
    """Normalised specs, parents first, each layer's interpreter filled in: its own, else its
    parent's (an existing venv's ``bin/python``)."""
    out, by_name = [], {}
    for layer in layers:
        spec = normalise_layer(layer)
        if spec["python"] is None and not spec["existing_path"] and spec["parent"] in by_name:
            parent = by_name[spec["parent"]]
            spec["python"] = parent["python"] or f"{parent['existing_path']}/bin/python"
        by_name[spec["name"]] = spec
        out.append(spec)
    return out


def sha256_json(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


DIST_SUFFIXES = (".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz")


def find_links_listing(spec):
    """What the layer's local find-links directories hold: sorted ``<dir>/<file> <bytes>`` for every
    distribution file in them (uv reads a find-links directory's own files, not its subdirectories),
    ``<dir> missing`` for one that is not there; None when the layer names no local directory.

    A layer resolved on the host from such a directory holds whatever versions the directory offers
    for its unpinned dependencies: the listing goes into its address, so that a changed wheelhouse
    (a newer uvicorn, say) is a new layer, not the old one reused under the same name. Remote
    find-links and indexes cannot be listed: their layers are addressed by the spec alone."""
    out, local = [], False
    for entry in spec.get("find_links") or []:
        path = str(entry)
        if path.startswith("file://"):
            path = path[len("file://"):]
        elif "://" in path:
            continue
        local = True
        try:
            names = sorted(os.listdir(path))
        except OSError:
            out.append(f"{path} missing")
            continue
        for name in names:
            full = os.path.join(path, name)
            if name.endswith(DIST_SUFFIXES) and os.path.isfile(full):
                out.append(f"{path}/{name} {os.path.getsize(full)}")
    return out if local else None


def layer_hash(spec, parent_hash=None, interpreter=None, wheel_sha256s=None, existing_freeze=None,
               closure=None, find_links=None):
    """sha256 over the normalised spec + parent's hash + interpreter (implementation, major.minor)
    + installed wheel sha256s and the locked closure (wheelhouse mode) + the freeze of an existing venv
    + what the local find-links directories hold (``find_links_listing``; left out of the hash when
    None, so that layers without one keep their addresses)."""
    interp = None
    if interpreter:
        interp = {"implementation": interpreter.get("implementation"),
                  "version": ".".join(str(interpreter.get("version", "")).split(".")[:2])}
    fields = {
        "format": FORMAT,
        "spec": spec,
        "parent_hash": parent_hash,
        "interpreter": interp,
        "wheels": sorted(wheel_sha256s) if wheel_sha256s is not None else None,
        "closure": sorted(closure) if closure is not None else None,
        "existing": sorted(existing_freeze) if existing_freeze is not None else None,
    }
    if find_links is not None:
        fields["find_links"] = sorted(find_links)
    return sha256_json(fields)


def layer_dirname(name, digest):
    return f"{name}-{digest[:12]}"


def parent_pth(site_dirs):
    """Content of the .pth that links an overlay to its parent (parent dirs appended after the
    overlay's own site-packages; the parent's .pth files are processed too)."""
    lines = ["# dflash-deploy: parent layer(s); appended after this venv's own site-packages\n"]
    for d in site_dirs:
        lines.append(f"import site; site.addsitedir({d!r})\n")
    return "".join(lines)


def install_args(spec, wheel_files=None, entries=None):
    """uv pip install arguments (after ``--python <venv>``), never resolving: exactly the locked
    wheel files (offline, wheelhouse mode); or the computed entries as exact pins (``===``) with the
    layer's indexes; or, for ``no_deps``, the layer's own pins."""
    if wheel_files is not None:
        return ["--offline", "--no-index", "--no-deps", *wheel_files]
    pins = overlay.install_pins(entries) if entries is not None else list(spec["requirements"])
    return [*overlay.index_args(spec), "--no-deps", *pins]


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
    # an instance of another sglang version than the host's runs its own version's venv
    for inst in ((manifest.get("instances") if isinstance(manifest, dict) else None) or {}).values():
        if isinstance(inst, dict) and inst.get("venv"):
            paths.add(os.path.normpath(str(inst["venv"])))
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
        remove_dirs(remove, layers_dir, TMP_PREFIX)
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


def _major_minor(interp):
    return ".".join(str(interp.get("version", "")).split(".")[:2])


class LayerBuilder:
    """Ensure the layers under ``<prefix>/layers``; only writes when a layer must be (re)built."""

    def __init__(self, prefix, uv, runner=default_runner, check_mode=False, cache_dir=None,
                 compile_bytecode=True, build_timeout=3600, log=None, progress_file=None, progress_every=5.0):
        self.prefix = prefix.rstrip("/")
        self.layers_dir = os.path.join(self.prefix, "layers")
        self.uv = uv
        self.run = runner
        self.check_mode = check_mode
        self.cache_dir = cache_dir
        self.compile_bytecode = compile_bytecode
        self.build_timeout = build_timeout
        self.log = log if log is not None else []
        # what a build is doing, read by the action plugin every interval (action_plugins/dflash_layers.py)
        self.progress_file = progress_file
        self.progress_every = progress_every
        self._ticker = None

    # -- helpers
    def _uv_env(self, spec):
        env = dict(os.environ)
        env.update({"UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "NO_COLOR": "1"})
        if self.cache_dir:
            env["UV_CACHE_DIR"] = self.cache_dir
        env.update(spec.get("env") or {})
        return env

    def _uv(self, args, spec, what):
        if self._ticker is not None:
            self._ticker.set(what=f"layer {spec['name']}: {what}")
        argv = [self.uv, *args]
        env = self._uv_env(spec)
        rc, out, err = self.run(argv, env=env, timeout=self.build_timeout)
        self.log.append({"cmd": argv, "rc": rc})
        if rc != 0:
            # a full disk: said first, with where (uv's cache, the layers, the temporary directory: the fullest)
            full = no_space_headline(f"{err}\n{out}", [
                (uv_cache_dir(env.get("UV_CACHE_DIR"), env), "uv's cache"),
                (self.layers_dir, "the venv layers"),
                (env.get("TMPDIR") or tempfile.gettempdir(), "the temporary directory")])
            head = f"layer {spec['name']}: {full}: " if full else f"layer {spec['name']}: "
            raise LayerError(f"{head}{what} failed (rc {rc}): {' '.join(argv)}\n{(err or out).strip()[-2000:]}")
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
    def existing_view(self, python, interp):
        """What an existing venv provides to a layer above it: (dirs, distributions)."""
        view = overlay.view_paths(python, interp["site"], self.run)
        return view, overlay.describe(view)

    def plan(self, layers, wheel_locks=None, wheelhouse=None):
        """Hash every layer (parents first) and decide reuse/build. Writes nothing."""
        errors = validate_layers(layers)
        if errors:
            raise LayerError("; ".join(errors))
        wheel_locks = wheel_locks or {}
        planned = {}
        out = []
        for spec in normalise_layers(layers):
            parent = planned.get(spec["parent"]) if spec["parent"] else None
            item = {"name": spec["name"], "spec": spec, "parent": spec["parent"],
                    "cuda": spec["cuda"], "env": spec["env"], "closure": None}
            if spec["existing_path"]:
                path = spec["existing_path"]
                python = os.path.join(path, "bin", "python")
                if not os.path.exists(python):
                    raise LayerError(f"layer {spec['name']}: existing_path: {python} does not exist")
                interp = inspect_interpreter(python, self.run)
                _view, dists = self.existing_view(python, interp)
                digest = layer_hash(spec, None, interp, None, overlay.freeze(dists))
                item.update(path=path, hash=digest, python=python, interpreter=interp,
                            site=interp["site"], action="existing", freeze=overlay.freeze(dists))
            else:
                interp = inspect_interpreter(spec["python"], self.run)
                if parent and _major_minor(interp) != _major_minor(parent["interpreter"]):
                    raise LayerError(
                        f"layer {spec['name']}: python: {spec['python']} is Python {_major_minor(interp)} but its "
                        f"parent {parent['name']} runs Python {_major_minor(parent['interpreter'])}: a layer "
                        "must use its parent's Python version (leave python out to inherit it)")
                lock = wheel_locks.get(spec["name"]) if wheelhouse else None
                wheels = closure = None
                if lock is not None:
                    own = [w for w in lock if w.get("source", "layer") == "layer"]
                    wheels = [w["sha256"] for w in own]
                    closure = sorted(f"{w['name']}=={w['version']}@{w.get('source', 'layer')}" for w in lock)
                    item["wheel_files"] = [os.path.join(wheelhouse, w["filename"]) for w in own]
                    item["lock"] = lock
                # installing the controller's locked files, the lock is the content; resolving on the
                # host, what its find-links directories offer is
                listing = find_links_listing(spec) if lock is None else None
                digest = layer_hash(spec, parent["hash"] if parent else None, interp, wheels, closure=closure,
                                    find_links=listing)
                path = os.path.join(self.layers_dir, layer_dirname(spec["name"], digest))
                marker = self.read_marker(path)
                trusted = bool(marker and marker.get("hash") == digest
                               and os.path.exists(os.path.join(path, "bin", "python")))
                item.update(path=path, hash=digest, python=os.path.join(path, "bin", "python"),
                            interpreter=interp, action="reuse" if trusted else "build",
                            parent_site=(parent or {}).get("site_chain", []))
                item["site"] = [self._venv_site(path, interp)]
                if trusted:
                    item["closure"] = marker.get("closure")
            item["site_chain"] = item["site"] + list(item.get("parent_site") or [])
            planned[spec["name"]] = item
            out.append(item)
        return out

    @staticmethod
    def _venv_site(path, interp):
        major_minor = ".".join(interp["version"].split(".")[:2])
        impl = "pypy" if interp.get("implementation") == "pypy" else "python"
        return os.path.join(path, "lib", f"{impl}{major_minor}", "site-packages")

    # -- building
    def _contents(self, item, tmp, site, python):
        """Install what the layer holds; returns (closure entries, parent dists, parent view)."""
        spec = item["spec"]
        parent_view = [p for p in overlay.view_paths(python, [site], self.run)
                       if os.path.normpath(p) != os.path.normpath(site)]
        parent_dists = overlay.describe(parent_view) if item.get("parent_site") else []
        args = ["pip", "install", "--no-config", "--python", python]
        if self.compile_bytecode:
            args.append("--compile-bytecode")
        if item.get("wheel_files") is not None:  # wheelhouse: the controller resolved, install the files
            if item["wheel_files"]:
                self._uv(args + install_args(spec, item["wheel_files"]), spec, "uv pip install")
            return item["lock"], parent_dists, parent_view
        if not spec["requirements"]:
            return [], parent_dists, parent_view
        work = os.path.join(tmp, ".dflash-resolve")
        try:
            res = overlay.resolve(spec, parent_dists, [self.uv], self.run, work, python=python,
                                  env=self._uv_env(spec), fmt="txt", timeout=self.build_timeout)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        self.log.append({"cmd": res["command"], "rc": 0})
        if res["install"]:
            self._uv(args + install_args(spec, entries=res["install"]), spec, "uv pip install")
        item["held_back"] = res["held_back"]
        return res["closure"], parent_dists, parent_view

    def build(self, item, lock_fh=None):
        """Build one layer; while it runs, a progress record (the step, distributions installed so far of the
        planned ones, bytes written) is kept in ``progress_file`` every ``progress_every`` seconds."""
        spec = item["spec"]
        rand = secrets.token_hex(4)
        tmp = os.path.join(self.layers_dir, f"{TMP_PREFIX}{spec['name']}-{item['hash'][:12]}-{rand}")
        planned = len(item.get("wheel_files") or []) or None

        def measure():
            written, dists = dflash_progress.tree_usage(tmp, ".dist-info") if os.path.isdir(tmp) else (0, 0)
            return {"done": dists, "total": planned, "unit": "distributions",
                    "note": f"{dflash_progress.human_bytes(written)} written in {tmp}"}

        if not self.progress_file:
            return self._build(item, tmp, rand)
        with dflash_progress.Ticker(f"layer {spec['name']}: starting", dflash_progress.file_sink(self.progress_file),
                                    measure, every=self.progress_every) as ticker:
            self._ticker = ticker
            try:
                return self._build(item, tmp, rand)
            finally:
                self._ticker = None

    def _build(self, item, tmp, rand):
        spec = item["spec"]
        interp = item["interpreter"]
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
            closure, parent_dists, parent_view = self._contents(item, tmp, site, os.path.join(tmp, "bin", "python"))
            own = overlay.freeze(overlay.describe([site]))
            taken = [e for e in closure if e.get("source") == "parent"]
            marker = {
                "format": FORMAT, "name": spec["name"], "hash": item["hash"], "spec": spec,
                "parent": spec["parent"], "parent_site": item.get("parent_site") or [],
                "interpreter": {k: interp.get(k) for k in ("executable", "version", "implementation")},
                "wheels": sorted(item.get("wheel_files") or []), "freeze": own,
                "closure": sorted(f"{e['name']}=={e['version']}" for e in closure),
                "installed": sorted(f"{e['name']}=={e['version']}" for e in closure if e.get("source") != "parent"),
                "from_parent": sorted(f"{e['name']}=={e['version']}" for e in taken),
                "parent_freeze": overlay.freeze(parent_dists), "held_back": item.get("held_back") or [],
                "exclude": spec["exclude"],
                "bytes": {"layer": overlay.tree_bytes(tmp),
                          "from_parent": sum(overlay.record_bytes(parent_view, [e["name"] for e in taken]).values())},
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
            item.update(freeze=own, closure=marker["closure"], build_seconds=marker["build_seconds"],
                        installed=marker["installed"], from_parent=marker["from_parent"], bytes=marker["bytes"])
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
        "existing": i["action"] == "existing", "closure": i.get("closure"),
        "exclude": [e["name"] for e in i["spec"]["exclude"]],
    } for i in items]
