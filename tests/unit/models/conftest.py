"""The lab's hub stand-in (lab/hub_standin.py) serving small real-shaped repositories: the lab's Qwen3.6-27B
config and its DFlash draft's (lab/models/), each with a weights file in LFS, and a draft of another model
family (Llama 3's vocabulary and hidden size) that does not belong to that target."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("hub_standin", ROOT / "lab" / "hub_standin.py")
hub_standin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hub_standin)

LLAMA_DRAFT = json.loads((ROOT / "tests/fixtures/models/llama-3.1-8b-dflash-draft.config.json").read_text())


def make_repos(root: Path, weights_bytes=3 * 1024 * 1024):
    """root/<org>/<name>/: config.json (+ tokenizer_config.json) and a weights file of random bytes."""
    repos = {"Qwen/Qwen3.6-27B": (ROOT / "lab/models/Qwen3.6-27B/config.json").read_text(),
             "z-lab/Qwen3.6-27B-DFlash": (ROOT / "lab/models/Qwen3.6-27B-DFlash/config.json").read_text(),
             "other-lab/Llama-3.1-8B-DFlash": json.dumps(LLAMA_DRAFT, indent=1)}
    for i, (repo, config) in enumerate(repos.items()):
        d = root / repo
        d.mkdir(parents=True)
        (d / "config.json").write_text(config)
        (d / "tokenizer_config.json").write_text('{"model_max_length": 262144}\n')
        (d / "model.safetensors").write_bytes(os.urandom(weights_bytes // (i + 1)))
    return root


@pytest.fixture
def hub(tmp_path):
    """-> (endpoint, Hub): the stand-in on 127.0.0.1 (its CDN on 127.0.0.2), stopped after the test."""
    root = make_repos(tmp_path / "hub")
    endpoint, state, servers = hub_standin.serve(str(root))
    yield endpoint, state
    for srv in servers:
        srv.shutdown()
        srv.server_close()
