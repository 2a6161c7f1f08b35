"""A layer build says how it goes: the dflash_layers action runs the module async and prints, every interval,
the layer, the uv step, the distributions installed so far and how long so far (action_plugins/dflash_layers.py,
module_utils/dflash_common/progress.py). A real uv builds a real layer from wheels made here; the uv it is given
waits a few seconds before installing, as a build of GBs of wheels does for minutes."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.dflash_layers import wheels as W

ROOT = Path(__file__).resolve().parents[3]
UV = shutil.which("uv")


@pytest.mark.skipif(UV is None, reason="uv is not on PATH (the controller env is made with uv)")
def test_layer_build_prints_progress_lines(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("dfl-one", "dfl-two", "dfl-three"):
        W.write_wheel(str(wheels), name, "1.0", {f"{name.replace('-', '_')}.py": "x = 1\n"}, ())
    slow_uv = tmp_path / "slow-uv"
    slow_uv.write_text(f'#!/bin/sh\ncase " $* " in *" install "*) sleep 4;; esac\nexec {UV} "$@"\n')
    slow_uv.chmod(slow_uv.stat().st_mode | stat.S_IEXEC)
    layer = {"name": "base", "python": sys.executable, "no_index": True, "find_links": [str(wheels)],
             "requirements": ["dfl-one==1.0", "dfl-two==1.0", "dfl-three==1.0"]}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "build", "dflash_layers": {"action": "ensure", "prefix": str(tmp_path / "opt"), "layers": [layer],
                                           "uv": str(slow_uv), "compile_bytecode": False, "progress_interval": 1},
        "register": "built"}, {"name": "keep", "ansible.builtin.copy": {
            "content": "{{ built | to_json }}", "dest": str(tmp_path / "built.json"), "mode": "0644"}}]}]
    (tmp_path / "pb.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp_path / "pb.yml")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    lines = [ln for ln in out.splitlines() if ln.startswith("localhost: layer base: ")]
    assert len(lines) >= 2, out[-3000:]
    assert any("uv pip install" in ln for ln in lines)
    assert all("distributions" in ln and " so far (" in ln and "written in" in ln for ln in lines), lines
    built = json.loads((tmp_path / "built.json").read_text())
    assert built["changed"] and built["layers"][0]["name"] == "base" and "ansible_job_id" not in built
    assert sorted(built["layers"][0]["closure"]) == ["dfl-one==1.0", "dfl-three==1.0", "dfl-two==1.0"]
    assert not list((tmp_path / "opt/layers").glob(".progress-*"))  # the record goes with the build
