#!/usr/bin/env python3
"""Build the GPU machine's carried wheelhouse: one .tar.xz (< 60 MB) of real wheels.

The GPU machine has no network. Its /opt/torch/.venv (torch 2.11.0+cu130) becomes the base layer;
the overlay is installed by the toolkit with uv, offline, from the wheels in this archive.

The sglang-router wheel's Rust library is stripped of its symbol tables (`strip --strip-unneeded`,
92 -> 72 MB unpacked; its RECORD row gets the new hash and size).

Two wheels are slimmed so that the archive fits one device call: sglang-kernel loses the FA3
(flash_ops, ~1 GB unpacked), FlashMLA and sm100 kernels, xgrammar loses its static library.
Their RECORD is rewritten to list exactly what remains; every kept file keeps its hash.
Consequence on SM 9.0: pass an explicit --attention-backend (triton or flashinfer), since the
default there (fa3) is not in the slimmed kernel wheel. All wheels are re-zipped uncompressed so
that xz compresses the archive as a whole.

usage: make_wheelhouse.py WHEEL_LIST OUT.tar.xz [--extra NAME==VER ...] [--keep DIST ...]
"""
import argparse
import base64
import fnmatch
import hashlib
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
# members whose symbol tables go (the router's library: the wheel is otherwise too big to carry)
STRIP = {"sglang_router": ["sglang_router/*.so"]}
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (5, 12, 17, 24, 27, 28, 31, 34, 35)] + [
    "manylinux2014_x86_64", "manylinux1_x86_64"]


def download(specs, dest):
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("wheel_list")
    ap.add_argument("out")
    ap.add_argument("--extra", action="append", default=[])
    ap.add_argument("--keep", action="append", default=None, help="distributions kept byte-identical")
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
            dropped = slim(os.path.join(raw, f), os.path.join(out, f), DROP.get(dist, []), STRIP.get(dist, []))
            total_drop += len(dropped)
            if dropped:
                print(f"slimmed {f}: dropped {len(dropped)} files", file=sys.stderr)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(out, arcname="wheelhouse")
        with open(a.out, "wb") as fh:
            fh.write(lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    print(f"{a.out}: {os.path.getsize(a.out) / 1e6:.1f} MB, {len(specs)} wheels")


if __name__ == "__main__":
    main()
