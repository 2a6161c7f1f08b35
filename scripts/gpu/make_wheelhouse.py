#!/usr/bin/env python3
"""Build the GPU machine's carried wheelhouse: one .tar.xz (< 60 MB) of real wheels.

The GPU machine has no network. Its /opt/torch/.venv (torch 2.11.0+cu130) becomes the base layer;
the overlay is installed by the toolkit with uv, offline, from the wheels in this archive.

Two wheels are slimmed so that the archive fits one device call: sglang-kernel loses the FA3
(flash_ops, ~1 GB unpacked), FlashMLA and sm100 kernels, xgrammar loses its static library.
Their RECORD is rewritten to list exactly what remains; every kept file keeps its hash.
Consequence on SM 9.0: pass an explicit --attention-backend (triton or flashinfer), since the
default there (fa3) is not in the slimmed kernel wheel. All wheels are re-zipped uncompressed so
that xz compresses the archive as a whole.

usage: make_wheelhouse.py WHEEL_LIST OUT.tar.xz [--extra NAME==VER ...] [--keep DIST ...]
       make_wheelhouse.py WHEEL_LIST .gpu/site.tar.xz --site

--site builds the other carried file instead: the same wheels (slimmed alike) installed into one
folder, the way `pip install --target` lays them out (purelib/platlib at the top, dist-info kept for
importlib.metadata; scripts, headers and data dropped), with sglang-kernel's mscclpp libraries left
out too, packed as one .tar.xz. On the GPU machine it is put first on PYTHONPATH in seconds
(`tar -xJf`), with no installer run: the DDTree and argument-parser harnesses use it
(bench/gpu/ddtree_e2e.sh, bench/gpu/argparse_check.sh). Unpacking here needs no Python 3.12.
"""
import argparse
import fnmatch
import io
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

DROP = {
    "sglang_kernel": ["sgl_kernel/flash_ops*.so", "sgl_kernel/flashmla_ops*.so", "sgl_kernel/sm100/*"],
    "xgrammar": ["xgrammar/lib/libxgrammar.a"],
}
# --site only: not importable without the wheel's RECORD-listed installer steps, unused by the harnesses
SITE_DROP = ["_mscclpp*.so", "*/__pycache__/*"]
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (5, 12, 17, 24, 27, 28, 31, 34, 35)] + [
    "manylinux2014_x86_64", "manylinux1_x86_64"]


def download(specs, dest):
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", dest]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    env = dict(os.environ, PIP_CONSTRAINT="")
    subprocess.run(cmd + specs, check=True, env=env)


def slim(src, dst, patterns):
    """Copy wheel src to dst uncompressed, dropping members matching patterns (and their RECORD rows)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        dropped = {n for n in zin.namelist() if any(fnmatch.fnmatch(n, p) for p in patterns)}
        for info in zin.infolist():
            if info.filename in dropped:
                continue
            data = zin.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD") and dropped:
                rows = [r for r in data.decode().splitlines() if r.split(",", 1)[0] not in dropped]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("wheel_list")
    ap.add_argument("out")
    ap.add_argument("--extra", action="append", default=[])
    ap.add_argument("--keep", action="append", default=None, help="distributions kept byte-identical")
    ap.add_argument("--site", action="store_true", help="an installed site folder (.tar.xz), not wheels")
    a = ap.parse_args()
    with open(a.wheel_list) as fh:
        names = [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]
    specs = []
    for n in names:
        if n.endswith(".whl"):
            dist, ver = n.split("-")[:2]
            specs.append(f"{dist}=={ver}")
        else:
            specs.append(n)
    specs += a.extra
    with tempfile.TemporaryDirectory() as tmp:
        raw, out = os.path.join(tmp, "raw"), os.path.join(tmp, "wheelhouse")
        os.makedirs(out)
        download(specs, raw)
        total_drop = 0
        for f in sorted(os.listdir(raw)):
            dist = f.split("-")[0]
            if dist in (a.keep or ["sglang"]):
                shutil.copyfile(os.path.join(raw, f), os.path.join(out, f))
                continue
            dropped = slim(os.path.join(raw, f), os.path.join(out, f), DROP.get(dist, []))
            total_drop += len(dropped)
            if dropped:
                print(f"slimmed {f}: dropped {len(dropped)} files", file=sys.stderr)
        if a.site:
            site = os.path.join(tmp, "site")
            files = 0
            for f in sorted(os.listdir(out)):
                files += len(unpack_wheel(os.path.join(out, f), site, SITE_DROP))
            print(f"site: {files} files from {len(os.listdir(out))} wheels", file=sys.stderr)
            pack_xz(site, ".", a.out)
        else:
            pack_xz(tmp, "wheelhouse", a.out)
    print(f"{a.out}: {os.path.getsize(a.out) / 1e6:.1f} MB, {len(specs)} wheels")


if __name__ == "__main__":
    main()
