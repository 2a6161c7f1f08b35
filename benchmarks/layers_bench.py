#!/usr/bin/env python3
"""Bench: the computed overlay (only what the base lacks) against the full-closure overlay.

The layers of molecule/layers: base = the seeds' training venv (CPU torch 2.13.0, transformers 5.6.0,
xgrammar 0.1.10, six, idna and their closure: 49 wheels); overlay = xgrammar 0.1.32, six 1.17.0,
soundfile 0.13.1 (triton excluded, as in the scenario). Cases, each repeated --repeat times on fresh
prefixes (layers + uv cache under the prefix, as on a host):

  base                  the base, cold uv cache
  overlay computed      the overlay over that base: its closure (43) less what the base has (5 installed)
  overlay full closure  the same 43 distributions at the same versions, all installed in the overlay
                        (what duplicating the base's part of the closure costs)
  overlay as before     the overlay resolved without its base, as uv did before (it does not count what
                        a venv sees through its parent .pth as installed): xgrammar's unpinned torch
                        then resolves to the newest CUDA build with its nvidia libraries (repeat 1 only)
  ... warm              the same overlay rebuilt with the uv cache warm (a release that changes it)
  unchanged             a new release with unchanged layers (once per repeat, computed layout)

Installs come from the offline wheelhouse (module_utils/dflash_layers/wheelhouse.py: resolved/downloaded once
into .cache/wheelhouse, as the role does), so no index is used while timing. "written" = data blocks
of inodes new under the prefix (a file hard-linked from uv's cache adds none); "apparent" = sizes of
new or modified paths; "layer" = apparent size of the layer directory (du -sb).

Usage: .venv/bin/python benchmarks/layers_bench.py [--python python3] [--repeat 3] [--out benchmarks/layers_bench.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(os.path.join(ROOT, "module_utils"))

from ansible.module_utils.dflash_layers import build as L
from ansible.module_utils.dflash_layers import wheelhouse as WH
from ansible.module_utils.dflash_layers.wheels import target_from_interpreter

BASE = {"name": "base", "find_links": ["/opt/wheels"],
        "requirements": ["torch==2.13.0+cpu", "transformers==5.6.0", "xgrammar==0.1.10", "six==1.16.0", "idna==3.10"]}
OVERLAY = {"name": "overlay", "find_links": ["/opt/wheels"],
           "requirements": ["xgrammar==0.1.32", "six==1.17.0", "soundfile==0.13.1"],
           "exclude": [{"name": "triton", "reason": "no GPU in the bench (as molecule/layers)"}]}


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
    return {"written_bytes": sum(new_inodes.values()), "apparent_bytes": apparent, "changed_paths": changed_paths}


def du(path):
    out = subprocess.run(["du", "-sb", path], capture_output=True, text=True, check=False).stdout
    return int(out.split()[0]) if out else 0


def build(case, prefix, layers, locks, files, results, rep):
    before = scan(prefix)
    t0 = time.monotonic()
    builder = L.LayerBuilder(prefix, shutil.which("uv"), cache_dir=os.path.join(prefix, "cache", "uv"))
    items, _, _ = builder.ensure(layers, locks, files)
    res = {"case": case, "repeat": rep, "seconds": round(time.monotonic() - t0, 2), **diff(before, scan(prefix)),
           "built": [i["name"] for i in items if i.get("changed")],
           "layer_bytes": du(items[-1]["path"]) if items[-1].get("changed") else 0,
           "installed": len(items[-1].get("installed") or []), "from_parent": len(items[-1].get("from_parent") or [])}
    results.append(res)
    print(json.dumps(res), flush=True)
    return items


def summarise(results):
    out = {}
    for case in dict.fromkeys(r["case"] for r in results):
        rows = [r for r in results if r["case"] == case]
        out[case] = {"n": len(rows)}
        for key in ("seconds", "written_bytes", "layer_bytes"):
            vals = [r[key] for r in rows]
            out[case][key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        out[case]["installed"] = rows[0]["installed"]
        out[case]["from_parent"] = rows[0]["from_parent"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default="python3")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--wheelhouse", default=os.path.join(ROOT, ".cache", "wheelhouse"))
    ap.add_argument("--out", default=os.path.join(HERE, "layers_bench.json"))
    args = ap.parse_args()
    base = dict(BASE, python=args.python)
    computed = dict(OVERLAY, parent="base")
    full = dict(OVERLAY, python=args.python)
    interp = L.inspect_interpreter(args.python)
    target = target_from_interpreter(interp)
    files = os.path.join(args.wheelhouse, "files")
    wh = WH.ensure_wheelhouse(args.wheelhouse, L.normalise_layers([base, computed]), {"base": target,
                                                                                       "overlay": target})
    wh_before = WH.ensure_wheelhouse(args.wheelhouse, L.normalise_layers([full]), {"overlay": target})
    # the computed overlay's closure, every member a wheel of the overlay (the base's from the base's lock)
    base_wheels = {e["name"]: e for e in wh["locks"]["base"]}
    same = [dict(base_wheels[e["name"]], source="layer") if e["source"] == "parent" else e
            for e in wh["locks"]["overlay"]]
    full_locks = {"overlay": same}
    results = []
    for rep in range(1, args.repeat + 1):
        with tempfile.TemporaryDirectory(prefix="dflash-layers-bench-", dir=os.environ.get("BENCH_TMP")) as tmp:
            p1, p2, p3 = (os.path.join(tmp, n) for n in ("computed", "full", "before"))
            build("base, cold uv cache", p1, [base], wh["locks"], files, results, rep)
            items = build("overlay computed, cold", p1, [base, computed], wh["locks"], files, results, rep)
            build("unchanged: new release", p1, [base, computed], wh["locks"], files, results, rep)
            full_items = build("overlay full closure, cold", p2, [full], full_locks, files, results, rep)
            # warm: the same overlay again, its uv cache now holding every wheel
            shutil.rmtree(items[-1]["path"])
            build("overlay computed, warm", p1, [base, computed], wh["locks"], files, results, rep)
            shutil.rmtree(full_items[-1]["path"])
            build("overlay full closure, warm", p2, [full], full_locks, files, results, rep)
            if rep == 1:
                build("overlay as before (resolved without the base), cold", p3, [full], wh_before["locks"], files,
                      results, rep)
    record = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([os.path.relpath(sys.executable, ROOT), "benchmarks/layers_bench.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 1),
                    "python": interp["version"], "platform": platform.platform(),
                    "uv": subprocess.run(["uv", "--version"], capture_output=True, text=True, check=False).stdout.strip()},
        "closure": {"base": len(wh["locks"]["base"]), "overlay": len(wh["locks"]["overlay"]),
                    "overlay_installed": sorted(f"{e['name']}=={e['version']}" for e in wh["locks"]["overlay"]
                                                if e["source"] == "layer"),
                    "overlay_as_before": len(wh_before["locks"]["overlay"]),
                    "overlay_as_before_torch": [f"{e['name']}=={e['version']}" for e in wh_before["locks"]["overlay"]
                                                if e["name"] == "torch"]},
        "summary": summarise(results),
        "results": results,
    }
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1)
        fh.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
