#!/usr/bin/env python3
"""Bench: bytes written and time for the venv layers (module_utils/dflash_layers).

Cases, on one prefix (layers + uv cache under it, as on a host):
  1 first build, cold uv cache        base (CPU torch, transformers, xgrammar 0.1.10, six, idna)
                                      + overlay (no_deps: xgrammar 0.1.32, six 1.17.0, soundfile, ...)
  2 new release, layers unchanged     the same spec again: the goal is ~0 bytes written
  3 overlay rebuild, warm uv cache    one overlay pin changed (six 1.17.0 -> 1.15.0)
  4 overlay rebuild, cold uv cache    the same change with an empty uv cache (for comparison)

Installs come from the offline wheelhouse (ensure_wheelhouse: resolved/downloaded once into
.cache/wheelhouse, as the role does), so no index is used while timing. "written" = data blocks of
inodes that did not exist before under the prefix (a file hard-linked from uv's cache into a venv
adds no new inode, so it is not counted), "apparent" = sizes of new or modified paths.

Usage: .venv/bin/python bench/layers_bench.py [--python python3] [--out bench/layers_bench.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "module_utils"))

import dflash_layers as L

BASE = {"name": "base", "python": None, "find_links": ["/opt/wheels"],
        "requirements": ["torch==2.13.0+cpu", "transformers==5.6.0", "xgrammar==0.1.10", "six==1.16.0",
                         "idna==3.10"]}
OVERLAY = {"name": "overlay", "parent": "base", "python": None, "no_deps": True,
           "requirements": ["xgrammar==0.1.32", "six==1.17.0", "soundfile==0.13.1", "cffi==2.1.1",
                            "pycparser==3.12"]}


def scan(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[p] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_blocks)
    return out


def diff(before, after):
    old_inodes = {v[0] for v in before.values()}
    new_inodes = {}
    apparent = 0
    changed_paths = 0
    for p, v in after.items():
        if before.get(p) != v:
            changed_paths += 1
            apparent += v[1]
        if v[0] not in old_inodes:
            new_inodes[v[0]] = v[4] * 512
    return {"written_bytes": sum(new_inodes.values()), "apparent_bytes": apparent,
            "changed_paths": changed_paths, "removed_paths": len(set(before) - set(after))}


def run_case(name, prefix, layers, locks, wheelhouse, results):
    before = scan(prefix)
    t0 = time.monotonic()
    builder = L.LayerBuilder(prefix, shutil.which("uv"), cache_dir=os.path.join(prefix, "cache", "uv"))
    items, changed, _ = builder.ensure(layers, locks, wheelhouse)
    seconds = time.monotonic() - t0
    res = {"case": name, "seconds": round(seconds, 2), "changed": changed,
           "built": [i["name"] for i in items if i.get("changed")], **diff(before, scan(prefix))}
    results.append(res)
    print(json.dumps(res), flush=True)
    return items


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default="python3")
    ap.add_argument("--wheelhouse", default=os.path.join(ROOT, ".cache", "wheelhouse"))
    ap.add_argument("--out", default=os.path.join(HERE, "layers_bench.json"))
    args = ap.parse_args()
    base = dict(BASE, python=args.python)
    overlay = dict(OVERLAY, python=args.python)
    overlay2 = dict(overlay, requirements=[r.replace("six==1.17.0", "six==1.15.0") for r in OVERLAY["requirements"]])
    interp = L.inspect_interpreter(args.python)
    target = L.target_from_interpreter(interp)
    specs = [L.normalise_layer(x) for x in (base, overlay, overlay2)]
    files = os.path.join(args.wheelhouse, "files")
    # the two overlay specs share a name: lock each pair separately
    wh1 = L.ensure_wheelhouse(args.wheelhouse, specs[:2], target)
    wh2 = L.ensure_wheelhouse(args.wheelhouse, [specs[0], specs[2]], target)
    locks, locks2 = wh1["locks"], wh2["locks"]
    results = []
    with tempfile.TemporaryDirectory(prefix="dflash-layers-bench-", dir=os.environ.get("BENCH_TMP")) as tmp:
        prefix = os.path.join(tmp, "opt-dflash")
        run_case("1 first build, cold uv cache", prefix, [base, overlay], locks, files, results)
        run_case("2 new release, layers unchanged", prefix, [base, overlay], locks, files, results)
        run_case("3 overlay pin changed, warm uv cache", prefix, [base, overlay2], locks2, files, results)
        shutil.rmtree(os.path.join(prefix, "cache", "uv"))
        # drop the layer built in case 3 so case 4 builds the same overlay again, cache now cold
        for n in os.listdir(os.path.join(prefix, "layers")):
            if n.startswith("overlay-"):
                marker = L.LayerBuilder.read_marker(os.path.join(prefix, "layers", n)) or {}
                if "six==1.15.0" in marker.get("spec", {}).get("requirements", []):
                    shutil.rmtree(os.path.join(prefix, "layers", n))
        run_case("4 overlay pin changed, cold uv cache", prefix, [base, overlay2], locks2, files, results)
        sizes = subprocess.run(["du", "-sb", *[os.path.join(prefix, "layers", n)
                                               for n in sorted(os.listdir(os.path.join(prefix, "layers")))
                                               if not n.startswith(".")]],
                               capture_output=True, text=True, check=False).stdout
    record = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([os.path.relpath(sys.executable, ROOT), "bench/layers_bench.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 1),
                    "python": interp["version"], "platform": platform.platform(),
                    "uv": subprocess.run(["uv", "--version"], capture_output=True, text=True, check=False).stdout.strip()},
        "wheels": {k: len(v) for k, v in locks.items()},
        "layer_sizes": sizes.strip().splitlines(),
        "results": results,
    }
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1)
        fh.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
