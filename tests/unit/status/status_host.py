"""A host as a deploy leaves it, on tmp_path: a release made by the release stage's own code (manifest with the
files' digests and the fingerprint, env file, venv and tree links), a real patched-tree directory with its
manifest, the unit file live, current, a healthy verdict and a smoke record; shared by the status tests
(conftest.py hands its fixtures to pytest)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from ansible.module_utils.dflash_release import ops
from ansible.module_utils.dflash_tree.common import MANIFEST_FORMAT
from ansible.module_utils.dflash_tree.disk import write_tree
from ansible.module_utils.dflash_tree.wheel import files_listing
from test_standin import start  # noqa: F401 (the lab stand-in's fixture, tests/unit/lab/test_standin.py)

ROOT_DIR = Path(__file__).resolve().parents[3]
FP = {
    "gpu_count": 2,
    "gpus": [
        {"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "uuid": "GPU-0", "sm": "12.0",
         "memory_total_mib": 97887, "memory_used_mib": 0, "processes": [], "healthy": True, "problem": None},
        {"index": 1, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "uuid": "GPU-1", "sm": "12.0",
         "memory_total_mib": 97887, "memory_used_mib": 0, "processes": [], "healthy": True, "problem": None},
    ],
    "driver_version": "580.95.05",
    "driver_cuda_version": "13.0",
    "cuda_toolkits": [{"path": "/usr/local/cuda-12.8", "version": "12.8"}],
    "problems": [],
}
UNIT_TEXT = "[Unit]\nDescription=SGLang server main\n\n[Service]\nType=exec\nRestart=on-failure\nRestartSec=5\n"


def make_tree(trees_dir, files):
    """A patched tree as the tree stage writes it (its manifest and FILES.sha256), from {relpath: bytes}."""
    hashes = {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
    digest = hashlib.sha256(files_listing(hashes)).hexdigest()
    name = f"sglang-0.5.11-{digest[:12]}"
    manifest = {"format": MANIFEST_FORMAT, "name": name, "hash": digest, "tree_sha256": digest,
                "sglang_version": "0.5.11", "source": "wheel", "patches": [{"name": "0001-x.patch", "sha256": "0"}],
                "files": {rel: {"sha256": h} for rel, h in hashes.items()}}
    path = os.path.join(trees_dir, name)
    write_tree({"wheel": None, "contents": dict(files), "file_hashes": hashes, "modes": {}, "manifest": manifest},
               path)
    return {"path": path, "site_packages": path, "hash": digest, "name": name, "sglang_version": "0.5.11",
            "patches": [{"name": "0001-x.patch", "sha256": "0"}], "files": hashes, "tree_sha256": digest}


def flags(port, extra=(), env=None):
    return {"main": {
        "args": ["--model-path", "/dev/shm/Qwen3.6-27B", "--host", "127.0.0.1", "--port", str(port),
                 "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/dev/shm/Qwen3.6-27B-DFlash",
                 "--enable-metrics", *extra],
        "env": dict({"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, **(env or {})),
        "port": port, "base_url": f"http://127.0.0.1:{port}",
        "applied": [{"rule": "sm120-attention-triton", "reason": "FlashInfer JIT rejects SM 12.0", "flags": []}]}}


def deploy(tmp_path, port=30001, unit_text=UNIT_TEXT, secrets=None, extra=(), env=None):
    """-> {prefix, unit_dir, id, release_dir, tree, staged, port}: one release, live, healthy, with its smoke figures."""
    prefix, unit_dir = tmp_path / "opt", tmp_path / "systemd"
    staged = prefix / "units"
    for d in (unit_dir, staged, prefix / "layers" / "base-000000000001"):
        d.mkdir(parents=True, exist_ok=True)
    tree = make_tree(str(prefix / "trees"), {"sglang/__init__.py": b"__version__ = '0.5.11'\n",
                                             "sglang/srt/server_args.py": b"DDTREE = True\n"})
    (staged / "dflash-main.service").write_text(unit_text)
    units = [{"instance": "main", "src": str(staged / "dflash-main.service"),
              "dest": str(unit_dir / "dflash-main.service")}]
    layers = [{"name": "base", "path": str(prefix / "layers" / "base-000000000001"), "hash": "000000000001",
               "parent": None, "python": "/usr/bin/python3"}]
    res = ops.prepare(str(prefix), layers, tree, flags(port, extra, env), FP, "abc123", False, host="ct200",
                      secrets=secrets, unit_dir=str(unit_dir), units=units)
    shutil.copy(staged / "dflash-main.service", unit_dir / "dflash-main.service")
    ops.activate(str(prefix), res["id"])
    ops.mark(str(prefix), res["id"], "healthy", {})
    rdir = prefix / "releases" / res["id"]
    (rdir / "smoke").mkdir()
    (rdir / "smoke" / "main.json").write_text(json.dumps({"smoke": {"passed": True, "perf": {
        "accept_length_median": 4.571, "tokens_per_s_median": 500.0, "timing": "server"}}}))
    return {"prefix": str(prefix), "unit_dir": str(unit_dir), "id": res["id"], "release_dir": str(rdir),
            "tree": tree, "staged": str(staged), "port": port}


class FakeUnits:
    """The service backend's reading side (state), as systemd answers for the units it knows."""

    name = "systemd"

    def __init__(self, states=None):
        self.states = states or {}

    def state(self, unit):
        return dict(self.states.get(unit) or {"LoadState": "not-found", "ActiveState": "inactive",
                                              "SubState": "dead"})


ACTIVE = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": 0,
          "ExecMainPID": 812, "ActiveEnterTimestamp": "Sun 2026-12-06 17:02:11 UTC",
          "ActiveEnterTimestampMonotonic": 86403521977}


@pytest.fixture
def host(tmp_path):
    return deploy(tmp_path)
