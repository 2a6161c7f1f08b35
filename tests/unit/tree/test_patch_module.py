"""library/dflash_tree.py through Ansible itself (localhost, real wheel): plan -> build -> status,
check mode, a second build unchanged, and a broken patch failing in plan with patch/file/hunk."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sglang_wheel import PATCH_DIR, REPO_ROOT, pinned_sha256, sglang_wheel

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: plan
      dflash_tree: {action: plan, wheel: "{{ wheel }}", wheel_sha256: "{{ sha }}", patches_dir: "{{ pdir }}",
                    trees_dir: "{{ trees }}"}
      register: plan
    - name: status before
      dflash_tree: {action: status, trees_dir: "{{ trees }}", name: "{{ plan.plan.name }}", hash: "{{ plan.plan.hash }}"}
      register: before
    - name: build in check mode
      dflash_tree: &build {action: build, trees_dir: "{{ trees }}", name: "{{ plan.plan.name }}",
                           hash: "{{ plan.plan.hash }}", wheel: "{{ wheel }}", wheel_sha256: "{{ sha }}",
                           patches: "{{ plan.patches }}"}
      check_mode: true
      register: check
    - name: build
      dflash_tree: *build
      register: first
    - name: build again
      dflash_tree: *build
      register: second
    - name: status after
      dflash_tree: {action: status, trees_dir: "{{ trees }}", name: "{{ plan.plan.name }}", hash: "{{ plan.plan.hash }}"}
      register: after
    - name: dump
      ansible.builtin.copy:
        content: "{{ {'plan': plan, 'before': before, 'check': check, 'first': first, 'second': second,
                      'after': after} | to_json }}"
        dest: "{{ dump }}"
        mode: "0644"
"""


def run_playbook(tmp_path: Path, pdir: Path) -> subprocess.CompletedProcess:
    book = tmp_path / "book.yml"
    book.write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    extra = {
        "wheel": str(sglang_wheel()),
        "sha": pinned_sha256(),
        "pdir": str(pdir),
        "trees": str(tmp_path / "trees"),
        "dump": str(tmp_path / "dump.json"),
    }
    return subprocess.run(
        [
            str(REPO_ROOT / ".venv" / "bin" / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            str(book),
            "-e",
            json.dumps(extra),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_module_plans_builds_once_and_reports_status(tmp_path):
    res = run_playbook(tmp_path, PATCH_DIR)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    d = json.loads((tmp_path / "dump.json").read_text())
    name = d["plan"]["plan"]["name"]
    assert d["plan"]["changed"] is False and d["plan"]["tree"]["path"] == str(tmp_path / "trees" / name)
    assert [p["name"] for p in d["plan"]["patches"]] == [p["name"] for p in d["plan"]["plan"]["patches"]]
    assert d["before"]["valid"] is False and d["before"]["reason"] == "absent"
    assert d["check"]["changed"] is True
    assert d["first"]["changed"] is True and d["first"]["reason"] == "build: absent"
    assert d["second"]["changed"] is False and d["second"]["reason"].startswith("already in place")
    assert d["after"]["valid"] is True
    # the fact the role sets: what check mode predicted, what the build made and what status reads agree
    assert d["plan"]["tree"] == d["first"]["tree"] == d["second"]["tree"] == d["after"]["tree"]
    assert os.listdir(tmp_path / "trees") == [name]


def test_a_broken_patch_fails_in_plan_naming_patch_file_hunk(tmp_path):
    pdir = tmp_path / "patches"
    shutil.copytree(PATCH_DIR, pdir)
    target = pdir / "0002-ddtree-server-args.patch"
    text = target.read_text()
    assert text.count('-            choices=["DFLASH", "EAGLE"') == 1
    target.write_text(
        text.replace('-            choices=["DFLASH", "EAGLE"', '-            choices=["DFLASH", "EAGLE9"')
    )
    res = run_playbook(tmp_path, pdir)
    assert res.returncode != 0
    assert "patch 0002-ddtree-server-args.patch, file sglang/srt/server_args.py, hunk #" in res.stdout
    assert not (tmp_path / "trees").exists()


@pytest.fixture(autouse=True)
def _need_the_venv():
    if not (REPO_ROOT / ".venv" / "bin" / "ansible-playbook").exists():
        pytest.fail(".venv/bin/ansible-playbook missing: run `uv sync` (scripts/controller.sh)")
