#!/usr/bin/env python3
"""The computed overlay on the H200, from a recorded e2e run (gpu-harness/e2e.sh collects the layers'
markers and the base's description into artifacts/): what the overlay installed, what it took from the
machine's torch venv, bytes against the full closure, build time; and the difference with the
hand-written 62-wheel list it replaces (gpu-harness/overlay-wheels-hand-written.txt).

usage: gpu-harness/layers_h200.py RESULTS [--out gpu-harness/records/layers_h200.md] [--hand-written LIST]
  RESULTS: a record folder (gpu-harness/records/<date>-<what>/, its raw.tar.xz read in place) or an
  unpacked e2e-results.tgz
CPU dry run: tests/harness/test_layers_h200.py builds a computed overlay over an existing venv with the
role's code, lays its marker out as e2e.sh does and checks what this script prints.
"""
import argparse
import fnmatch
import glob
import json
import os
import re
import tarfile

HAND_WRITTEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "overlay-wheels-hand-written.txt")


def hand_written(path=HAND_WRITTEN):
    """Project names of the hand-written overlay list it replaces (62 wheels)."""
    with open(path, encoding="utf-8") as fh:
        return {re.sub(r"[-_.]+", "-", ln.split("-")[0]).lower() for ln in fh if ln.strip() and not ln.startswith("#")}


def read_markers(results):
    """The layers' markers (artifacts/layers/*.json) of a results folder, or of the raw.tar.xz of a record."""
    archive = os.path.join(results, "raw.tar.xz")
    if os.path.isfile(archive):
        with tarfile.open(archive, mode="r:xz") as tar:
            return [json.load(tar.extractfile(m)) for m in sorted(tar.getmembers(), key=lambda m: m.name)
                    if m.isfile() and fnmatch.fnmatch(m.name, "*layers/*.json")]
    markers = []
    for path in sorted(glob.glob(os.path.join(results, "**/layers/*.json"), recursive=True)):
        with open(path, encoding="utf-8") as fh:
            markers.append(json.load(fh))
    return markers


def mib(n):
    return f"{n / 1048576:.1f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--out", default=None)
    ap.add_argument("--hand-written", default=HAND_WRITTEN, help="the wheel list compared with")
    a = ap.parse_args()
    markers = read_markers(a.results)
    overlays = [m for m in markers if m.get("parent") and "installed" in m]
    if not overlays:
        raise SystemExit(f"{a.results}: no computed overlay marker under artifacts/layers/")
    m = max(overlays, key=lambda x: x.get("built_at", ""))
    names = {re.sub(r"[-_.]+", "-", s.split("==")[0]).lower() for s in m["installed"]}
    hand = hand_written(a.hand_written)
    full = m["bytes"]["layer"] + m["bytes"]["from_parent"]
    exclude = [e["name"] for e in m.get("exclude") or []]
    excluded = f"{len(exclude)}: {', '.join(exclude)}" if exclude else "none"
    lines = [
        "# The computed overlay on the H200 (recorded run)",
        "",
        f"Source: `{a.results}` (gpu-harness/e2e.sh artifacts), summarised by `gpu-harness/layers_h200.py {a.results}`.",
        "",
        "| | value |",
        "|---|---|",
        f"| base | the machine's torch venv (existing_path), {len(m['parent_freeze'])} distributions |",
        f"| overlay closure | {len(m['closure'])} distributions |",
        f"| taken from the base | {len(m['from_parent'])} |",
        f"| installed by the overlay | {len(m['installed'])} |",
        f"| excluded on purpose | {excluded} |",
        f"| overlay bytes (apparent, whole layer dir) | {mib(m['bytes']['layer'])} |",
        f"| full closure (overlay + what it took from the base, RECORD sizes) | {mib(full)} |",
        f"| overlay build time (venv + offline resolution + install) | {m['build_seconds']} s |",
        "",
        (f"Against the hand-written list ({len(hand)} wheels, {os.path.basename(a.hand_written)}): computed and hand-written both: "
         f"{len(names & hand)}; only computed: {', '.join(sorted(names - hand)) or 'none'}; "
         f"only hand-written: {', '.join(sorted(hand - names)) or 'none'}."),
        "",
        "Installed: " + ", ".join(m["installed"]),
        "",
    ]
    text = "\n".join(lines)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
