#!/usr/bin/env python3
"""List every Prometheus metric the pinned sglang and sglang-router export, with the file and line
that defines it: the alert rules and the dashboard of roles/dflash_metrics may use only these names
(tests/unit/metrics/test_metrics_exported.py checks both against the list).

Sources, read without importing or building anything:
- sglang 0.5.11: the pinned wheel (files/patches/sglang/0.5.11/wheels.json; tests/sglang_wheel.py
  downloads and checks it). Every `Gauge(...)`, `Counter(...)`, `Histogram(...)`, `Summary(...)` and
  sglang's own `GaugeHistogram(...)` call under `sglang/srt/` with a literal name, found with `ast`.
- sglang-router 0.3.2: its source distribution from PyPI (pinned below by the sha256 PyPI publishes),
  whose Rust sources register metrics with the `metrics` crate's macros (`describe_gauge!("name", ..)`,
  `counter!("name", ..)`, ...). No maintained Python parser of Rust exists for this, and the macros'
  first argument is always a string literal, so a regular expression over the macro calls finds them.
- Prometheus itself: `up` (every scrape target has it).

Each metric also lists the series names it is scraped as (`series`): prometheus_client appends
`_total` to a counter, a histogram is `_bucket`/`_sum`/`_count`; the router's exporter
(metrics-exporter-prometheus) writes counters as named, histograms whose name ends in
`duration_seconds` with buckets, other histograms as summaries.

    scripts/extract_exported_metrics.py            # writes roles/dflash_metrics/files/exported-metrics.yml
    scripts/extract_exported_metrics.py --check    # exit 1 when the committed file is stale
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import os
import re
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import sglang_wheel  # (the pinned wheel, downloaded once into .cache/wheels/)

OUT = REPO / "roles" / "dflash_metrics" / "files" / "exported-metrics.yml"
ROUTER = {
    "version": "0.3.2",
    "artifact": "sglang_router-0.3.2.tar.gz",
    "sha256": "bdbea1d54cce879fb83d2885d01ee3c006f242d0adbbac806f2fb2b91a5fe73d",
    "url": "https://files.pythonhosted.org/packages/e2/14/19020d822877810d1b047073bb41c54a76802e618296af12344f6caa6d2e/"
           "sglang_router-0.3.2.tar.gz",
}
PY_KINDS = {"Gauge": "gauge", "Counter": "counter", "Histogram": "histogram", "Summary": "summary",
            "GaugeHistogram": "gauge"}
RUST_MACRO = re.compile(r'\b(describe_)?(counter|gauge|histogram)!\(\s*"([A-Za-z_:][A-Za-z0-9_:]*)"')


def py_series(name: str, kind: str) -> list[str]:
    if kind == "counter":
        return [name.removesuffix("_total") + "_total"]
    if kind == "histogram":
        return [name + "_bucket", name + "_sum", name + "_count"]
    if kind == "summary":
        return [name + "_sum", name + "_count"]
    return [name]


def rust_series(name: str, kind: str) -> list[str]:
    if kind == "histogram":
        if name.endswith("duration_seconds"):  # start_prometheus: buckets for Matcher::Suffix("duration_seconds")
            return [name + "_bucket", name + "_sum", name + "_count"]
        return [name, name + "_sum", name + "_count"]
    return [name]


def sglang_metrics(wheel: Path) -> list[dict]:
    found = {}
    with zipfile.ZipFile(wheel) as zf:
        for member in sorted(zf.namelist()):
            if not (member.startswith("sglang/srt/") and member.endswith(".py")):
                continue
            tree = ast.parse(zf.read(member), member)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                kind = PY_KINDS.get(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
                if kind is None:
                    continue
                arg = next((k.value for k in node.keywords if k.arg == "name"), node.args[0] if node.args else None)
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    continue  # e.g. GaugeHistogram's own inner Gauge(name=name): defined where it is called
                found.setdefault(arg.value, {"name": arg.value, "type": kind, "exporter": "sglang",
                                             "file": member, "line": arg.lineno,
                                             "series": py_series(arg.value, kind)})
    return sorted(found.values(), key=lambda m: m["name"])


def router_metrics(sdist: Path) -> list[dict]:
    found = {}
    with tarfile.open(sdist) as tf:
        for member in sorted(tf.getmembers(), key=lambda m: m.name):
            path = member.name.split("/", 1)[1] if "/" in member.name else member.name
            if not (member.isfile() and path.startswith("src/") and path.endswith(".rs")):
                continue
            text = tf.extractfile(member).read().decode()
            for m in RUST_MACRO.finditer(text):
                name, kind = m.group(3), m.group(2)
                line = text.count("\n", 0, m.start(3)) + 1
                old = found.get(name)
                # the describe_*! registration is the definition; a bare counter!/gauge! only when none
                if old is None or (m.group(1) and not old["_described"]):
                    found[name] = {"name": name, "type": kind, "exporter": "sglang-router", "file": path,
                                   "line": line, "series": rust_series(name, kind), "_described": bool(m.group(1))}
    for v in found.values():
        v.pop("_described")
    return sorted(found.values(), key=lambda m: m["name"])


def fetch_pinned(pin: dict, cache: Path) -> Path:
    """The pinned file from the cache, else downloaded and checked against its sha256."""
    path = cache / pin["artifact"]
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == pin["sha256"]:
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(pin["url"], timeout=120) as resp:
        data = resp.read()
    got = hashlib.sha256(data).hexdigest()
    if got != pin["sha256"]:
        raise RuntimeError(f"{pin['url']}: sha256 {got}, PyPI publishes {pin['sha256']}")
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=cache)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)
    return path


class _Dumper(yaml.SafeDumper):
    """Block style with sequences indented under their key (the repository's yamllint rules)."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def render(wheel: Path, sdist: Path) -> str:
    doc = {
        "sources": {
            "sglang": {"version": sglang_wheel.SGLANG_VERSION, "artifact": sglang_wheel.WHEEL_NAME,
                       "sha256": sglang_wheel.pinned_sha256()},
            "sglang-router": {k: v for k, v in ROUTER.items() if k != "url"},
        },
        "metrics": sglang_metrics(wheel) + router_metrics(sdist) + [
            {"name": "up", "type": "gauge", "exporter": "prometheus", "file": None, "line": None,
             "series": ["up"]},
        ],
    }
    buf = io.StringIO()
    buf.write("# Generated by scripts/extract_exported_metrics.py from the pinned sglang wheel and sglang-router\n"
              "# source distribution: every metric they export, where it is defined, the series it is scraped as.\n"
              "# Do not edit; run the script again after a version change.\n")
    yaml.dump(doc, buf, Dumper=_Dumper, sort_keys=False, width=110, default_flow_style=False)
    return buf.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    a = ap.parse_args(argv)
    text = render(sglang_wheel.sglang_wheel(), fetch_pinned(ROUTER, sglang_wheel.CACHE_DIR))
    if a.check:
        if a.out.read_text() != text:
            print(f"{a.out} is stale: run scripts/extract_exported_metrics.py", file=sys.stderr)
            return 1
        return 0
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
