"""The controller's two install profiles come out of one lock: deploy-only (`scripts/controller.sh deploy`:
the project's dependencies) carries no test tooling, torch or triton, and still carries everything the
toolkit imports on the controller; the lock is made for the controllers users have."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def export(*flags):
    uv = shutil.which("uv")
    if not uv:
        pytest.skip("uv is not on PATH (scripts/controller.sh installs it)")
    out = subprocess.run([uv, "export", "--frozen", "--no-hashes", "--no-emit-project", *flags], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return {m.group(1).lower() for m in re.finditer(r"^([A-Za-z0-9_.-]+)==", out, re.MULTILINE)}


def test_deploy_profile_has_no_test_tooling_torch_or_triton():
    deploy = export("--no-dev")
    dev = export()
    for name in ("pytest", "molecule", "ansible-lint", "triton", "torch", "ruff", "yamllint", "numpy-stubs"):
        assert name not in deploy
    # what the controller imports during a deploy: Ansible, the reply judge, the bench charts, the hub client
    for name in ("ansible-core", "jinja2", "pyyaml", "ftfy", "wordfreq", "matplotlib", "huggingface-hub"):
        assert name in deploy
    assert {"pytest", "molecule", "ansible-lint", "triton"} <= dev
    assert deploy < dev


def test_lock_is_for_linux_and_macos_x86_64_and_arm64_and_every_controller_python():
    envs = PYPROJECT["tool"]["uv"]["environments"]
    for system, machine in (("linux", "x86_64"), ("linux", "aarch64"), ("darwin", "x86_64"), ("darwin", "arm64")):
        assert f"sys_platform == '{system}' and platform_machine == '{machine}'" in envs
    # ansible-core 2.19 runs on controller Pythons 3.11 to 3.13
    assert PYPROJECT["project"]["requires-python"] == ">=3.11,<3.14"
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    assert lock["requires-python"] == ">=3.11, <3.14"
