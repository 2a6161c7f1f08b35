#!/usr/bin/env python3
"""Resolve one sglang version's overlay into a lock: every wheel the toolkit would install, with its sha256.

The overlay of a version is `files/patches/sglang/<version>/overlay.yml`: the layer spec that
`roles/dflash_layers` pins for that version (`dflash_layers_overlay`: torch, sglang-kernel,
flashinfer, xgrammar, transformers, ... and sglang itself, the versions sglang's own Requires-Dist
pins). It is resolved with the toolkit's own resolution (`module_utils/dflash_layers/overlay.py`: `uv pip
compile` for the host's interpreter and platform, each member's wheel chosen for the host's tags),
here for the overlay standing alone (no base layer: its whole closure) on CPython 3.12, x86_64,
glibc 2.35 (Ubuntu 22.04, the seeds' hosts), and written as `overlay.lock.json`: name, version,
file name, URL, sha256 and size of each wheel, plus the closure's total size.

    scripts/sglang_version_lock.py 0.5.17            # writes files/patches/sglang/0.5.17/overlay.lock.json
    scripts/sglang_version_lock.py 0.5.17 --check    # exit 1 when the committed lock differs
    scripts/sglang_version_lock.py 0.5.17 --layers gpu-harness/overlay-0.5.17.yml --base gpu-harness/h200-base.json \
        --out gpu-harness/overlay-0.5.17.lock.json   # a layer over a described base (the GPU machine's)

With --base the lock holds only what the layer installs over that base (what a carried wheelhouse
needs); `gpu-harness/make_wheelhouse.py` builds the wheelhouse itself from a wheel list. Needs uv on PATH
and PyPI; the index may have moved since (a newer release of an unpinned member), so --check
compares names and pins and reports the members whose version moved instead of failing on them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(str(REPO / "module_utils"))
from ansible.module_utils.dflash_layers import build as L
from ansible.module_utils.dflash_layers import overlay as O
from ansible.module_utils.dflash_layers.wheels import target_from_interpreter

# The production hosts' interpreter (Ubuntu 22.04's glibc; sglang's wheels need manylinux_2_34)
DEFAULT_TARGET = {"python_version": "3.12", "arch": "x86_64", "glibc": "2.35", "implementation": "cp"}


def load_layer(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    layer = data.get("dflash_layers_overlay", data)
    layer = {
        k: v for k, v in layer.items() if k not in ("no_index", "find_links", "index_url", "python", "parent")
    }
    errors = L.validate_layers([{**layer, "python": "python3"}])
    if errors:
        raise SystemExit(f"{path}: " + "; ".join(errors))
    return L.normalise_layer({**layer, "python": "python3"})


def lock(layer_path: Path, base_path: Path | None) -> dict:
    spec = load_layer(layer_path)
    base, target = [], dict(DEFAULT_TARGET)
    if base_path is not None:
        described = json.loads(base_path.read_text(encoding="utf-8"))
        base, target = described["distributions"], target_from_interpreter(described["interpreter"])
    with tempfile.TemporaryDirectory() as work:
        res = O.resolve(
            spec, base, ["uv"], L.default_runner, str(Path(work) / "resolve"), target=target, fmt="pylock"
        )
    wheels = [
        {k: e.get(k) for k in ("name", "version", "filename", "url", "sha256", "size")}
        for e in res["install"]
    ]
    return {
        "_source": (
            f"scripts/sglang_version_lock.py: {layer_path.relative_to(REPO)} resolved with uv "
            f"(module_utils/dflash_layers/overlay.py) for CPython {target['python_version']} {target['arch']} "
            f"glibc {target['glibc']}"
            + (f" over {base_path.relative_to(REPO)}" if base_path else ", no base layer (the whole closure)")
        ),
        "requirements": spec["requirements"],
        "exclude": [e["name"] for e in spec.get("exclude") or []],
        "closure": len(res["closure"]),
        "from_base": len(res["from_parent"]),
        "install_bytes": sum(w["size"] or 0 for w in wheels),
        "wheels": sorted(wheels, key=lambda w: w["name"]),
    }


def compare(old: dict, new: dict) -> list[str]:
    """What differs in substance: the pins, the members, and the pinned members' wheels."""
    problems = []
    if old.get("requirements") != new["requirements"]:
        problems.append(f"requirements differ: {old.get('requirements')} vs {new['requirements']}")
    was = {w["name"]: w for w in old.get("wheels", [])}
    now = {w["name"]: w for w in new["wheels"]}
    for name in sorted(set(was) ^ set(now)):
        problems.append(f"{name}: {'only in the committed lock' if name in was else 'new in the resolution'}")
    pinned = {r.split("==")[0] for r in new["requirements"]}
    for name in sorted(set(was) & set(now)):
        if was[name]["version"] != now[name]["version"]:
            line = f"{name}: {was[name]['version']} -> {now[name]['version']}"
            (problems.append if name in pinned else print)(
                line + ("" if name in pinned else " (unpinned; moved on PyPI)")
            )
        elif was[name]["sha256"] != now[name]["sha256"] and name in pinned:
            problems.append(f"{name}: sha256 {was[name]['sha256']} -> {now[name]['sha256']}")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("version")
    ap.add_argument("--layers", help="layer spec (default: files/patches/sglang/<version>/overlay.yml)")
    ap.add_argument("--base", help="a base venv described by gpu-harness/describe_venv.py")
    ap.add_argument("--out", help="default: overlay.lock.json next to the layer spec; '-' for stdout")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    folder = REPO / "files" / "patches" / "sglang" / a.version
    layer_path = Path(a.layers).resolve() if a.layers else folder / "overlay.yml"
    out = a.out or str(layer_path.parent / "overlay.lock.json")
    result = lock(layer_path, Path(a.base).resolve() if a.base else None)
    if a.check:
        problems = compare(json.loads(Path(out).read_text(encoding="utf-8")), result)
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    text = json.dumps(result, indent=1) + "\n"
    if out == "-":
        sys.stdout.write(text)
    else:
        Path(out).write_text(text, encoding="utf-8")
        print(
            f"{out}: {len(result['wheels'])} wheels, {result['install_bytes'] / 1e6:.1f} MB "
            f"(closure {result['closure']}, from the base {result['from_base']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
