"""Run a Triton compile script for SM 9.0 (no GPU needed) in a child process, as the kernel tests do.

The child runs without TRITON_INTERPRET (tests/conftest.py sets it for this process), so that Triton
compiles rather than interprets; it gets the kernel's module file as argv[1] and prints one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def compile_in_child(script, module_text, tmp_path, name):
    """Write `module_text` to tmp_path/name, run `script` on it; its last JSON line (skip where Triton cannot
    assemble for CUDA on this machine: no ptxas)."""
    src = tmp_path / name
    src.write_text(module_text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    run = subprocess.run([sys.executable, "-c", script, str(src)], env=env, capture_output=True, text=True, timeout=300, check=False)
    if run.returncode and "ptxas" in run.stderr:
        pytest.skip(f"Triton cannot assemble for CUDA here: {run.stderr.strip().splitlines()[-1]}")
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])
