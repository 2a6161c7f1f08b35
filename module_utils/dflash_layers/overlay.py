"""The computed overlay: what a layer installs itself, given what its parent already provides.

A layer is resolved with uv (``uv pip compile``: the whole closure of its requirements for the
host's interpreter and platform) while its parent's installed distributions are offered to the
resolver twice: as metadata-only *stand-in* wheels (name, version, Requires-Dist, Requires-Python,
Provides-Extra copied from the installed metadata; found through ``--find-links``, never
installed) and as *preferences* (uv keeps a version named in an existing output file unless the
requirements rule it out). So the parent's version of a package is kept whenever it fits, even
when the layer's indexes do not carry it (an offline wheelhouse, a venv built by hand).

The closure's members at exactly the parent's version (local label included: 2.11.0 is not
2.11.0+cu128) are taken from the parent; the rest is what the layer installs, with no resolution
at install time (``--no-deps``). A requirement pinned by the layer itself at another version than
the parent's is not offered from the parent (``torch==2.11.0`` over a ``2.11.0+cu128`` base
installs the pinned build). ``exclude`` names projects the layer deliberately leaves out of the
resolution (with their reasons): their requirements are dropped, and the consistency check
reports them as excluded rather than missing.

Pure logic with no Ansible import; uv runs through an injected ``runner``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat

from ansible.module_utils.dflash_layers.consistency import installed_distributions
from ansible.module_utils.dflash_layers.pep440 import normalize_version, parse_version, same_version
from ansible.module_utils.dflash_layers.pep508 import InvalidRequirement, Requirement, canonical_name
from ansible.module_utils.dflash_layers.wheels import (
    LayerError,
    supported_tags,
    wheel_entry,
    write_wheel,
)

STANDIN_GENERATOR = "dflash-deploy (stand-in of an installed distribution; never installed)"
_PIN_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)\s*$")

# The directories a child of a layer sees: its site dirs with their .pth files processed (so a
# parent's own parent link is followed), computed by the layer's interpreter itself. The standard
# library stays on sys.path while the .pth files run: their `import` lines (setuptools'
# distutils-precedence.pth, namespace helpers) and site's own error report need it (an emptied path
# failed on the H200's torch venv with "No module named 'traceback'"); only what they add is printed.
VIEW_CODE = (
    "import json, site, sys\n"
    "dirs = json.loads(sys.argv[1])\n"
    "stdlib = list(sys.path)\n"
    "for d in dirs:\n"
    "    site.addsitedir(d)\n"
    "print(json.dumps([p for p in sys.path if p not in stdlib]))\n"
)


def view_paths(python, site_dirs, runner, timeout=60):
    """The sys.path entries a child layer of ``site_dirs`` sees (own dirs + .pth-added ones)."""
    rc, out, err = runner([python, "-I", "-S", "-c", VIEW_CODE, json.dumps(list(site_dirs))], timeout=timeout)
    if rc != 0:
        raise LayerError(f"reading the directories {site_dirs} expose with {python} failed (rc {rc}): "
                         f"{(err or out).strip()[-400:]}")
    return json.loads(out.strip().splitlines()[-1])


def describe(paths):
    """The distributions visible on ``paths`` (the first of a name wins): [{name, key, version,
    requires, requires_python, provides_extra, location}], sorted by key."""
    keep = ("name", "key", "version", "requires", "requires_python", "provides_extra", "location")
    return sorted(({k: d[k] for k in keep} for d in installed_distributions(paths) if not d["shadowed_by"]),
                  key=lambda d: d["key"])


def freeze(dists):
    """``key==version`` of each distribution (normalised), sorted: what a layer's hash covers."""
    return sorted(f"{d['key']}=={normalize_version(d['version'])}" for d in dists)


# --------------------------------------------------------------------------- stand-ins

def standin_wheel(directory, dist):
    """Write a metadata-only wheel for an installed distribution; returns its filename, or None
    when its version is not PEP 440 (no wheel can carry it). Unreadable requirements are left out."""
    version = parse_version(dist["version"])
    if version is None:
        return None
    requires = []
    for req in dist.get("requires") or []:
        try:
            Requirement(req)
        except InvalidRequirement:
            continue
        requires.append(req)
    return write_wheel(directory, dist["name"], str(version), None, requires, dist.get("requires_python"),
                       dist.get("provides_extra") or (), STANDIN_GENERATOR)


def top_level_pins(spec):
    """{key: version} of the layer's own exact pins."""
    out = {}
    for text in spec.get("requirements") or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        clauses = req.specifier.specs
        if len(clauses) == 1 and clauses[0].op in ("==", "==="):
            out[req.key] = clauses[0].version
    return out


def exact(pin):
    """A layer's own ``name==version`` pin as the exact version string (``===``): ``torch==2.11.0``
    never takes ``2.11.0+cu128`` from an index that has both."""
    return pin if "===" in pin else pin.replace("==", "===", 1)


def excluded_names(spec):
    return sorted({canonical_name(e["name"]) for e in spec.get("exclude") or []})


def offered(parent_dists, spec):
    """(the parent's distributions offered to the resolver, [{name, version, why}] of those held back)."""
    pins = top_level_pins(spec)
    excluded = set(excluded_names(spec))
    out, held = [], []
    for d in parent_dists:
        if d["key"] in excluded:
            held.append({"name": d["key"], "version": d["version"], "why": "excluded by the layer"})
        elif d["key"] in pins and not same_version(pins[d["key"]], d["version"]):
            held.append({"name": d["key"], "version": d["version"],
                         "why": f"the layer pins {d['key']}=={pins[d['key']]}"})
        else:
            out.append(d)
    return out, held


# --------------------------------------------------------------------------- resolution

# uv's resolution options a layer may set, one row per field of a dflash_venv_layers item:
#   field: (kind, uv flag, choices, always)
# kind: bool (the bare flag when true), str, list (the flag once per item), choice (one of choices).
# Validation and the canonical spec (build.py), the wheelhouse lock key (wheelhouse.py)
# and uv's arguments (index_args) follow this table: a new uv option is a new row (and its line in
# roles/dflash_layers/meta/argument_specs.yml). always: the field is part of every layer's canonical
# spec; a row added later has always=False so that it enters the hash only where a layer sets it
# (existing layers keep their hash).
UV_OPTIONS = {
    "no_index": ("bool", "--no-index", None, True),
    "index_url": ("str", "--index-url", None, True),
    "extra_index_urls": ("list", "--extra-index-url", None, True),
    "find_links": ("list", "--find-links", None, True),
    "index_strategy": ("choice", "--index-strategy", ("first-index", "unsafe-first-match", "unsafe-best-match"),
                       True),
    # pre-release versions of dependencies (uv: disallow, allow, if-necessary, explicit, if-necessary-or-explicit)
    "prerelease": ("choice", "--prerelease",
                   ("disallow", "allow", "if-necessary", "explicit", "if-necessary-or-explicit"), False),
}


def uv_option_error(field, value):
    """Why a layer's value for a UV_OPTIONS field is wrong (None when it is right or absent)."""
    kind, _flag, choices, _always = UV_OPTIONS[field]
    if value is None:
        return None
    if kind == "bool" and not isinstance(value, bool):
        return "must be true or false"
    if kind == "str" and (not isinstance(value, str) or not value.strip()):
        return "must be a non-empty string"
    if kind == "list" and (isinstance(value, str) or not isinstance(value, list)
                           or not all(isinstance(v, str) and v for v in value)):
        return "must be a list of non-empty strings"
    if kind == "choice" and value not in choices:
        return f"{value!r} not one of {', '.join(choices)}"
    return None


def uv_options_canonical(layer):
    """The canonical values of a layer's UV_OPTIONS fields (what the layer hash and the lock key cover)."""
    out = {}
    for field, (kind, _flag, _choices, always) in UV_OPTIONS.items():
        value = layer.get(field)
        if kind == "bool":
            value = bool(value or False)
        elif kind == "list":
            value = [value] if isinstance(value, str) else list(value or [])
        else:
            value = value or None
        if always or value:
            out[field] = value
    return out


def index_args(spec):
    """uv index / find-links / strategy / pre-release arguments of a layer (no requirements, no --no-deps)."""
    args = []
    for field, (kind, flag, _choices, _always) in UV_OPTIONS.items():
        value = spec.get(field)
        if kind == "bool":
            args += [flag] if value else []
        elif kind == "list":
            for item in value or []:
                args += [flag, item]
        elif value:
            args += [flag, value]
    return args


def target_args(target):
    """``--python-version`` / ``--python-platform`` of a host target (glibc clamped to uv's range)."""
    glibc = str(target["glibc"]).split(".")
    minor = max(17, min(int(glibc[1]) if len(glibc) > 1 and glibc[1].isdigit() else 17, 40))
    return ["--python-version", str(target["python_version"]),
            "--python-platform", f"{target['arch']}-manylinux_2_{minor}"]


def _seed(path, dists, fmt):
    """The output file uv reads its preferences from: the offered parent versions (none: no file)."""
    if not dists:
        return
    with open(path, "w", encoding="utf-8") as fh:
        if fmt == "pylock":
            fh.write('lock-version = "1.0"\ncreated-by = "dflash-deploy"\n')
            fh.writelines(f'\n[[packages]]\nname = "{d["key"]}"\nversion = "{normalize_version(d["version"])}"\n' for d in dists)
        else:
            fh.writelines(f"{d['key']}=={normalize_version(d['version'])}\n" for d in dists)


def resolve_argv(uv_command, spec, work, target=None, python=None, fmt="pylock", with_standins=True):
    """The ``uv pip compile`` command for a layer in work dir ``work`` (see prepare)."""
    out = os.path.join(work, "pylock.toml" if fmt == "pylock" else "resolved.txt")
    argv = [*uv_command, "pip", "compile", "--no-config", "--quiet", "--no-header", "--no-annotate",
            "--only-binary", ":all:", "-o", out]
    if fmt == "pylock":
        argv += ["--format", "pylock.toml"]
    if python:
        argv += ["--python", python]
    if target:
        argv += target_args(target)
    if spec.get("no_deps"):
        argv.append("--no-deps")
    argv += index_args(spec)
    if with_standins:
        argv += ["--find-links", os.path.join(work, "standins")]
    if spec.get("exclude"):
        argv += ["--excludes", os.path.join(work, "excludes.txt")]
    return [*argv, os.path.join(work, "requirements.in")], out


def prepare(work, spec, parent_dists, fmt="pylock"):
    """Write the resolver's inputs into ``work``: requirements.in, the stand-ins of the offered
    parent distributions, the preference seed, excludes.txt. Returns (offered, held back, skipped
    stand-ins: parent distributions whose version no wheel can carry)."""
    os.makedirs(os.path.join(work, "standins"), exist_ok=True)
    with open(os.path.join(work, "requirements.in"), "w", encoding="utf-8") as fh:
        fh.writelines(exact(r) + "\n" for r in spec.get("requirements") or [])
    if spec.get("exclude"):
        with open(os.path.join(work, "excludes.txt"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(excluded_names(spec)) + "\n")
    offer, held = offered(parent_dists, spec)
    skipped = []
    usable = []
    for d in offer:
        if standin_wheel(os.path.join(work, "standins"), d) is None:
            skipped.append(f"{d['key']}=={d['version']}")
        else:
            usable.append(d)
    _seed(os.path.join(work, "pylock.toml" if fmt == "pylock" else "resolved.txt"), usable, fmt)
    return usable, held, skipped


def parse_resolved_txt(text):
    """[(key, version)] of a ``uv pip compile`` requirements.txt output (no header, no annotations)."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = _PIN_RE.match(line)
        if not m:
            raise LayerError(f"unexpected line in uv's resolution: {line!r}")
        out.append((canonical_name(m.group(1)), m.group(2)))
    return out


def split_closure(packages, parent_dists, target=None, standin_dir=None):
    """Closure entries from resolved ``packages`` [(key, version, pylock package or None)]:
    ``source: parent`` for a member at exactly the parent's version, else ``source: layer`` (with
    its wheel when the pylock package is given: best for ``target``'s tags, never a stand-in)."""
    parent = {d["key"]: d for d in parent_dists}
    tags = supported_tags(target["python_version"], target["arch"], target["glibc"],
                          target.get("implementation", "cp")) if target else None
    skip = "file://" + os.path.abspath(standin_dir) + "/" if standin_dir else None
    entries, problems = [], []
    for key, version, pkg in sorted(packages, key=lambda p: p[0]):
        have = parent.get(key)
        if have is not None and same_version(have["version"], version):
            entries.append({"name": key, "version": normalize_version(version), "source": "parent",
                            "location": have.get("location")})
            continue
        entry = {"name": key, "version": normalize_version(version), "source": "layer"}
        if pkg is not None:
            try:
                entry.update(wheel_entry(pkg, tags, skip))
            except LayerError as exc:
                problems.append(str(exc))
                continue
            entry["source"] = "layer"
        entries.append(entry)
    if problems:
        raise LayerError("; ".join(problems))
    return entries


def resolve(spec, parent_dists, uv_command, runner, work, target=None, python=None, env=None, fmt="pylock",
            timeout=1800):
    """Resolve a layer (see the module doc). ``fmt`` pylock (controller: wheels with url/sha256 for
    ``target``) or txt (host: name/version only; needs no TOML reader). Returns {closure, install,
    from_parent, held_back, standins_skipped, command}. ``work`` is created and left for the caller."""
    usable, held, skipped = prepare(work, spec, parent_dists, fmt)
    argv, out = resolve_argv(uv_command, spec, work, target, python, fmt)
    run_env = dict(os.environ if env is None else env)
    run_env.update({"UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "NO_COLOR": "1"})
    run_env.update(spec.get("env") or {})
    rc, sout, serr = runner(argv, env=run_env, timeout=timeout)
    if rc != 0:
        raise LayerError(f"layer {spec['name']}: resolving its requirements failed (rc {rc}): {' '.join(argv)}\n"
                         f"{(serr or sout).strip()[-3000:]}")
    if fmt == "pylock":
        import tomllib

        with open(out, "rb") as fh:
            pylock = tomllib.load(fh)
        packages = [(canonical_name(p["name"]), str(p["version"]), p) for p in pylock.get("packages", [])]
    else:
        with open(out, encoding="utf-8") as fh:
            packages = [(k, v, None) for k, v in parse_resolved_txt(fh.read())]
    closure = split_closure(packages, usable, target if fmt == "pylock" else None,
                            os.path.join(work, "standins"))
    return {
        "closure": closure,
        "install": [e for e in closure if e["source"] == "layer"],
        "from_parent": [f"{e['name']}=={e['version']}" for e in closure if e["source"] == "parent"],
        "held_back": held,
        "standins_skipped": skipped,
        "command": argv,
    }


def install_pins(entries):
    """Exact pins (``===``: the version string itself, local label included) for an install with
    the layer's own indexes and --no-deps."""
    return [f"{e['name']}==={e['version']}" for e in entries]


def remove_work(work):
    shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------- sizes

def tree_bytes(root):
    """Apparent size of every regular file under ``root`` (links not followed, hard links once)."""
    seen, total = set(), 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen or not stat.S_ISREG(st.st_mode):
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def record_bytes(paths, keys):
    """{key: bytes} of the files each named distribution's RECORD lists (as installed, stat'ed)."""
    import importlib.metadata

    wanted = {canonical_name(k) for k in keys}
    out = {}
    for entry in paths:
        if not os.path.isdir(entry):
            continue
        for dist in importlib.metadata.distributions(path=[entry]):
            key = canonical_name(dist.metadata.get("Name") or "")
            if key not in wanted or key in out:
                continue
            total = 0
            for f in dist.files or []:
                try:
                    total += os.lstat(str(dist.locate_file(f))).st_size
                except OSError:
                    continue
            out[key] = total
    return out
