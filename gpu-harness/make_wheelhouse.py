#!/usr/bin/env python3
"""Build the GPU machine's carried wheelhouse: one .tar.xz (< 60 MB) of real wheels, from a committed list.

The GPU machine has no network. Its /opt/torch/.venv (torch 2.11.0+cu130) becomes the base layer;
the overlay is installed by the toolkit with uv, offline, from the wheels in this archive.

Which wheels: the list given, a tracked file. Each line is a wheel's URL with its sha256
(`https://.../<file>.whl#sha256=<hex>`, the form pip also reads), fetched from there and checked, or a
`name==version` (or a wheel's file name) that pip downloads. The overlay's list
(gpu-harness/overlay-wheels.txt) is all URLs with hashes, so a commit builds the same wheelhouse every time;
a build never writes a tracked file.

--refresh LIST writes a new list, and only that: the overlay of the GPU inventory
(dflash_layers_overlay, or the last of dflash_venv_layers) resolved now against PyPI for the machine's
interpreter, with the base's distributions (a description captured on the machine:
gpu-harness/capture_base.sh) offered to the resolver, the same code the role runs there
(module_utils/dflash_layers/overlay.py): its closure less what the base has. The list says what it was computed
from (a digest of the overlay's spec and the base's description); a build warns when those have changed
since. Commit the new list, then build from it. --list-only resolves and prints, writing nothing.

The sglang-router wheel's Rust library is stripped of its symbol tables (`strip --strip-unneeded`,
92 -> 72 MB unpacked; its RECORD row gets the new hash and size).

Two wheels are slimmed so that the archive fits one device call: sglang-kernel loses the FA3
(flash_ops, ~1 GB unpacked), FlashMLA and sm100 kernels, xgrammar loses its static library.
Their RECORD is rewritten to list exactly what remains; every kept file keeps its hash.
Consequence on SM 9.0: pass an explicit --attention-backend (triton or flashinfer), since the
default there (fa3) is not in the slimmed kernel wheel. All wheels are re-zipped uncompressed so
that xz compresses the archive as a whole.

usage: make_wheelhouse.py WHEEL_LIST OUT.tar.xz [--site] [--extra NAME==VER ...] [--keep DIST ...]
       make_wheelhouse.py --refresh LIST --compute LAYERS.yml --base BASE.json
       make_wheelhouse.py --list-only --compute LAYERS.yml --base BASE.json
(a list of URLs needs no pip; name==version lines and --extra do: then run it with a python3 that has pip,
e.g. /usr/bin/python3, since the uv-made controller venv has none)

--site builds the other carried file instead: the same wheels (slimmed alike) installed into one
folder, the way `pip install --target` lays them out (purelib/platlib at the top, dist-info kept for
importlib.metadata; scripts, headers and data dropped), with sglang-kernel's mscclpp libraries left
out too, packed as one .tar.xz. On the GPU machine it is put first on PYTHONPATH in seconds
(`tar -xJf`), with no installer run: the DDTree and argument-parser harnesses use it
(gpu-harness/ddtree_e2e.sh, gpu-harness/argparse_check.sh). Unpacking here needs no Python 3.12.
"""
import argparse
import base64
import fnmatch
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(os.path.join(ROOT, "module_utils"))

from ansible.module_utils.dflash_layers import build as L
from ansible.module_utils.dflash_layers import overlay as O
from ansible.module_utils.dflash_layers import wheelhouse as WH
from ansible.module_utils.dflash_layers.wheels import sha256_file, target_from_interpreter

DROP = {
    # sglang-kernel 0.4.5 (sglang 0.5.17) also ships infllm_ops as a CPython 3.10 extension module, which the
    # GPU machine's Python 3.12 cannot load (29 MB): dropped too
    "sglang_kernel": ["sgl_kernel/flash_ops*.so", "sgl_kernel/flashmla_ops*.so", "sgl_kernel/sm100/*",
                      "sgl_kernel/*.cpython-310-*.so"],
    "xgrammar": ["xgrammar/lib/libxgrammar.a"],
}
# members whose symbol tables go (the router's library: the wheel is otherwise too big to carry)
STRIP = {"sglang_router": ["sglang_router/*.so"]}
# what the overlay's list is computed from (its header's digest is checked against them at build time)
LAYERS_YML, BASE_JSON = "inventory/gpu/group_vars/all/layers.yml", "gpu-harness/h200-base.json"
# --site only: not importable without the wheel's RECORD-listed installer steps, unused by the harnesses
SITE_DROP = ["_mscclpp*.so", "*/__pycache__/*"]
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (5, 12, 17, 24, 27, 28, 31, 34, 35)] + [
    "manylinux2014_x86_64", "manylinux1_x86_64"]


def download(specs, dest):
    import importlib.util

    if importlib.util.find_spec("pip") is None:  # the controller venv is made by uv, without pip
        sys.exit(f"{sys.executable} has no pip (a uv-made venv has none): run this script with a python3 "
                 "that has it, e.g. Debian's /usr/bin/python3 with python3-pip installed")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", dest]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    env = dict(os.environ, PIP_CONSTRAINT="")
    subprocess.run(cmd + specs, check=True, env=env)


def strip_bytes(data):
    """`strip --strip-unneeded` of a shared library given as bytes."""
    with tempfile.NamedTemporaryFile(suffix=".so") as tmp:
        tmp.write(data)
        tmp.flush()
        subprocess.run(["strip", "--strip-unneeded", tmp.name], check=True)
        with open(tmp.name, "rb") as fh:
            return fh.read()


def slim(src, dst, patterns, strip=()):
    """Copy wheel src to dst uncompressed, dropping members matching patterns (and their RECORD rows) and
    stripping members matching strip (their RECORD rows get the new hash and size)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        dropped = {n for n in zin.namelist() if any(fnmatch.fnmatch(n, p) for p in patterns)}
        stripped = {}
        for name in zin.namelist():
            if any(fnmatch.fnmatch(name, p) for p in strip):
                stripped[name] = strip_bytes(zin.read(name))
        for info in zin.infolist():
            if info.filename in dropped:
                continue
            data = stripped.get(info.filename) or zin.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD") and (dropped or stripped):
                rows = []
                for r in data.decode().splitlines():
                    name = r.split(",", 1)[0]
                    if name in dropped:
                        continue
                    if name in stripped:
                        digest = base64.urlsafe_b64encode(hashlib.sha256(stripped[name]).digest()).rstrip(b"=")
                        r = f"{name},sha256={digest.decode()},{len(stripped[name])}"
                    rows.append(r)
                data = ("\n".join(rows) + "\n").encode()
            info.compress_type = zipfile.ZIP_STORED
            zout.writestr(info, data)
    return dropped


def unpack_wheel(path, target, drop=()):
    """Install one wheel into target as `pip install --target` would, by hand; returns the files written.

    Members under <dist>.data/purelib or /platlib go to the top; the rest of .data (scripts, headers,
    data) is not needed on PYTHONPATH and is dropped, as are members matching drop."""
    written = []
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            name = info.filename
            if name.endswith("/"):
                continue
            parts = name.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                name = "/".join(parts[2:])
            if any(fnmatch.fnmatch(name, p) for p in drop):
                continue
            dest = os.path.join(target, name)
            if os.path.relpath(dest, target).startswith(".."):
                raise ValueError(f"{path}: member {info.filename} leaves the target")
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with zf.open(info) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
            mode = (info.external_attr >> 16) & 0o777
            if mode & 0o111:
                os.chmod(dest, 0o755)
            written.append(name)
    return written


def pack_xz(parent, member, out):
    """tar parent/member (as member) into out (.tar.xz): xz -9e on every core when xz exists, else lzma."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    xz = shutil.which("xz")
    if xz:
        with open(out + ".tmp", "wb") as fh:
            tar = subprocess.Popen(["tar", "-C", parent, "-cf", "-", member], stdout=subprocess.PIPE)
            subprocess.run([xz, "-T0", "-9e", "-c"], stdin=tar.stdout, stdout=fh, check=True)
            if tar.wait() != 0:
                raise RuntimeError(f"tar of {parent}/{member} failed")
    else:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(os.path.join(parent, member), arcname=member)
        with open(out + ".tmp", "wb") as fh:
            fh.write(lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    os.replace(out + ".tmp", out)


def gpu_overlay(layers_yml, version="0.5.11"):
    """The overlay spec of a GPU inventory's layers file (of sglang ``version`` where it names one per version:
    dflash_layers_overlays), without its host-only index settings (the carried wheelhouse path): resolved here
    against PyPI."""
    import yaml

    with open(layers_yml, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    layer = (data.get("dflash_layers_overlay") or (data.get("dflash_layers_overlays") or {}).get(version)
             or data["dflash_venv_layers"][-1])
    layer = {k: v for k, v in layer.items() if k not in ("no_index", "find_links", "index_url", "python", "parent")}
    errors = L.validate_layers([{**layer, "python": "python3"}])
    if errors:
        sys.exit(f"{layers_yml}: " + "; ".join(errors))
    return L.normalise_layer({**layer, "python": "python3"})


def compute(layers_yml, base_json, work, uv="uv"):
    """Resolve the GPU overlay for the described base: (wheel entries to carry, resolution)."""
    with open(base_json, encoding="utf-8") as fh:
        base = json.load(fh)
    spec = gpu_overlay(layers_yml)
    target = target_from_interpreter(base["interpreter"])
    res = O.resolve(spec, base["distributions"], [uv], L.default_runner, work, target=target, fmt="pylock")
    total = sum(e.get("size") or 0 for e in res["install"])
    print(f"overlay {spec['name']} for {base['venv']} (Python {target['python_version']}, {target['arch']}, "
          f"glibc {target['glibc']}): closure {len(res['closure'])}, from the base {len(res['from_parent'])}, "
          f"to carry {len(res['install'])} wheels, {total / 1e6:.1f} MB", file=sys.stderr)
    for held in res["held_back"]:
        print(f"  not from the base: {held['name']} {held['version']} ({held['why']})", file=sys.stderr)
    for e in spec["exclude"]:
        print(f"  excluded: {e['name']} ({e['reason']})", file=sys.stderr)
    return res["install"], res


def fetch_locked(entries, dest):
    """Download each locked wheel from its URL and check its sha256."""
    os.makedirs(dest, exist_ok=True)
    for e in entries:
        path = os.path.join(dest, e["filename"])
        WH.download_url(e["url"], path)
        if sha256_file(path) != e["sha256"]:
            sys.exit(f"{e['filename']}: sha256 {sha256_file(path)} does not match the list's {e['sha256']} ({e['url']})")


LOCKED = re.compile(r"^(?P<url>[a-z][a-z0-9+.-]*://\S+/(?P<filename>[^/#\s]+\.whl))#sha256=(?P<sha256>[0-9a-f]{64})$")
INPUTS = re.compile(r"^# computed from: .* \(inputs sha256 (?P<digest>[0-9a-f]{64})\)$")


def read_list(path):
    """(locked entries [{filename, url, sha256}], pip specs, the inputs digest its header names or None)."""
    locked, specs, digest = [], [], None
    with open(path, encoding="utf-8") as fh:
        for n, raw in enumerate(fh, 1):
            line = raw.strip()
            m = INPUTS.match(line)
            if m:
                digest = m.group("digest")
            if not line or line.startswith("#"):
                continue
            m = LOCKED.match(line)
            if m:
                locked.append(m.groupdict())
            elif "://" in line:
                raise ValueError(f"{path}:{n}: a URL line needs the wheel's hash: <url>/<file>.whl#sha256=<64 hex>")
            elif line.endswith(".whl"):
                dist, ver = line.split("-")[:2]
                specs.append(f"{dist}=={ver}")
            elif re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+!-]+", line):
                specs.append(line)
            else:
                raise ValueError(f"{path}:{n}: not a wheel URL with its sha256, a name==version or a wheel file name: "
                                 f"{line!r}")
    return locked, specs, digest


def inputs_digest(layers_yml, base_json):
    """sha256 of what a computed list depends on: the overlay's spec and the base's description (parsed, so
    that comments and formatting do not count)."""
    with open(base_json, encoding="utf-8") as fh:
        base = json.load(fh)
    data = {"overlay": gpu_overlay(layers_yml), "interpreter": base["interpreter"],
            "distributions": base["distributions"]}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def format_list(entries, layers_yml, base_json, res):
    """The list --refresh writes: a header saying how it was made and from what, then one URL#sha256 a line."""
    head = [
        "# The GPU overlay's wheels, each from its URL with its sha256: the input of every build",
        "# (python3 gpu-harness/make_wheelhouse.py <this list> OUT.tar.xz). Written only by",
        f"# python3 gpu-harness/make_wheelhouse.py --refresh <this list> --compute {rel(layers_yml)} --base {rel(base_json)}",
        (f"# on {time.strftime('%Y-%m-%d', time.gmtime())}: the overlay's closure ({len(res['closure'])}) less what "
         f"the base provides ({len(res['from_parent'])}), excluded projects left out."),
        f"# computed from: {rel(layers_yml)} + {rel(base_json)} (inputs sha256 {inputs_digest(layers_yml, base_json)})",
    ]
    lines = [f"{e['url']}#sha256={e['sha256']}" for e in sorted(entries, key=lambda e: e["filename"])]
    return "\n".join(head + lines) + "\n"


def rel(path):
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def project(filename):
    return re.sub(r"[-_.]+", "-", filename.split("-")[0]).lower()


def changes(old, new):
    """What a refresh changed, by project: ['+name ver', '-name ver', 'name old -> new']."""
    def versions(entries):
        return {project(e["filename"]): e["filename"].split("-")[1] for e in entries}
    a, b = versions(old), versions(new)
    out = [f"+{p} {b[p]}" for p in sorted(b.keys() - a.keys())] + [f"-{p} {a[p]}" for p in sorted(a.keys() - b.keys())]
    out += [f"{p} {a[p]} -> {b[p]}" for p in sorted(a.keys() & b.keys()) if a[p] != b[p]]
    return out


def check_inputs(digest, layers_yml, base_json):
    """A warning when the list's inputs have changed since it was computed, else None."""
    try:
        now = inputs_digest(layers_yml, base_json)
    except (OSError, ImportError, ValueError, KeyError, SystemExit) as exc:
        return f"cannot check the list's inputs ({exc})"
    if now != digest:
        return (f"{rel(layers_yml)} or {rel(base_json)} changed since this list was computed: the build follows the "
                f"list; --refresh it to follow them")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="*", help="WHEEL_LIST OUT.tar.xz")
    ap.add_argument("--compute", metavar="LAYERS_YML", help="the GPU inventory's layers, for --refresh/--list-only")
    ap.add_argument("--base", metavar="BASE_JSON", help="the base venv described (gpu-harness/describe_venv.py)")
    ap.add_argument("--refresh", metavar="LIST", help="resolve the overlay now and write LIST (nothing else)")
    ap.add_argument("--list-only", action="store_true", help="with --compute: resolve and print, write nothing")
    ap.add_argument("--write-list", metavar="FILE", help=argparse.SUPPRESS)
    ap.add_argument("--extra", action="append", default=[])
    ap.add_argument("--keep", action="append", default=None, help="distributions kept byte-identical")
    ap.add_argument("--site", action="store_true", help="an installed site folder (.tar.xz), not wheels")
    a = ap.parse_args()
    if a.write_list or (a.compute and not (a.refresh or a.list_only)):
        ap.error("a build no longer resolves live (three pins moved in four days): it builds from the committed "
                 "list, `make_wheelhouse.py gpu-harness/overlay-wheels.txt OUT.tar.xz`; to compute a new list: "
                 "`make_wheelhouse.py --refresh gpu-harness/overlay-wheels.txt --compute LAYERS.yml --base BASE.json`, "
                 "then commit it")
    if a.refresh or a.list_only:
        if not (a.compute and a.base) or a.paths:
            ap.error("--refresh LIST / --list-only take --compute LAYERS_YML --base BASE_JSON and no other path")
        with tempfile.TemporaryDirectory() as tmp:
            entries, res = compute(a.compute, a.base, os.path.join(tmp, "resolve"))
        if a.list_only:
            print("\n".join(sorted(e["filename"] for e in entries)))
            return
        old = read_list(a.refresh)[0] if os.path.exists(a.refresh) else []
        with open(a.refresh + ".tmp", "w", encoding="utf-8") as fh:
            fh.write(format_list(entries, a.compute, a.base, res))
        os.replace(a.refresh + ".tmp", a.refresh)
        diff = changes(old, entries)
        print(f"{a.refresh}: {len(entries)} wheels; " + ("; ".join(diff) if diff else "no pin changed"))
        return
    if len(a.paths) != 2:
        ap.error("expected WHEEL_LIST OUT.tar.xz")
    wheel_list, out_path = a.paths
    try:
        locked, specs, digest = read_list(wheel_list)
    except ValueError as exc:
        sys.exit(str(exc))
    if digest:
        layers, base = os.path.join(ROOT, LAYERS_YML), os.path.join(ROOT, BASE_JSON)
        warning = check_inputs(digest, layers, base)
        if warning:
            print(f"WARNING: {wheel_list}: {warning}", file=sys.stderr)
    specs += a.extra
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "raw")
        fetch_locked(locked, raw)
        if specs:
            download(specs, raw)
        pack(raw, out_path, a.keep, len(locked) + len(specs), a.site)


def pack(raw, out_path, keep, count, site=False):
    """Slim the wheels of ``raw`` (DROP), re-zip them uncompressed and write one .tar.xz: the wheelhouse,
    or with ``site`` the wheels installed into one folder (unpack_wheel)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "wheelhouse")
        os.makedirs(out)
        for f in sorted(os.listdir(raw)):
            dist = f.split("-")[0]
            if dist in (keep or ["sglang"]):
                shutil.copyfile(os.path.join(raw, f), os.path.join(out, f))
                continue
            dropped = slim(os.path.join(raw, f), os.path.join(out, f), DROP.get(dist, []), STRIP.get(dist, []))
            if dropped:
                print(f"slimmed {f}: dropped {len(dropped)} files", file=sys.stderr)
        if site:
            site_dir = os.path.join(tmp, "site")
            files = 0
            for f in sorted(os.listdir(out)):
                files += len(unpack_wheel(os.path.join(out, f), site_dir, SITE_DROP))
            print(f"site: {files} files from {len(os.listdir(out))} wheels", file=sys.stderr)
            pack_xz(site_dir, ".", out_path)
        else:
            pack_xz(tmp, "wheelhouse", out_path)
    print(f"{out_path}: {os.path.getsize(out_path) / 1e6:.1f} MB, {count} wheels")


if __name__ == "__main__":
    main()
