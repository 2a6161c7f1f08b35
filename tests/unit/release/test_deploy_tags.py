"""deploy.yml's phases as tags: which stages `--tags preflight|install|configure|router|metrics|smoke` select
(ansible-playbook --list-tasks on the lab inventory), and that every role include hands its tags down to
the role's own tasks (`apply`), without which a dynamic include runs none of them under --tags."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = shutil.which("ansible-playbook") or str(Path(sys.executable).with_name("ansible-playbook"))

CHECKS = ["Fingerprint the host", "Validate this host's instances", "Check across hosts"]
INSTALL = ["Build the venv layers", "Install the pinned sglang", "Probe the final layer"]
CONFIGURE = ["Derive each instance's flags", "Take the instances that will restart out of the router",
             "Create or find the release", "Record the release and verdict"]
ROUTER = ["Build, start and check the router"]
METRICS = ["Render the file_sd targets"]
# (--list-tasks lists no rescue/always task: the lock's release is not among them)
ALWAYS = ["Check that the host answers", "Gather facts", "Take the host lock", "Finish or revert an activation"]
SMOKE_DRAIN = "Take the instances out of the router before the smoke test restarts them"
SMOKE_UNDRAIN = "Put the restarted instances back into the router"


def listed(*args) -> str:
    if not os.path.exists(PLAYBOOK):
        pytest.skip("ansible-playbook is not installed next to this python")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    out = subprocess.run([PLAYBOOK, "--list-tasks", "-i", "inventory/lab", "deploy.yml", *args],
                         check=False, cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("tags, selected, skipped", [
    ([], ALWAYS + CHECKS + INSTALL + CONFIGURE + ROUTER + METRICS,
     ["Smoke-test the current release", SMOKE_DRAIN]),
    (["--tags", "preflight"], ALWAYS + CHECKS, INSTALL + CONFIGURE + ROUTER + METRICS),
    (["--tags", "install"], ALWAYS + CHECKS + INSTALL, CONFIGURE + ROUTER + METRICS),
    (["--tags", "configure"], ALWAYS + CHECKS + INSTALL + CONFIGURE + ROUTER + METRICS, []),
    (["--tags", "router"], ALWAYS + CHECKS + ROUTER, INSTALL + CONFIGURE + METRICS),
    (["--tags", "metrics"], ALWAYS + CHECKS + METRICS, INSTALL + CONFIGURE + ROUTER),
    # the router's drain runs under the smoke tag too (when -e dflash_smoke_restart=true restarts); the undrain is
    # the block's always: part, which --list-tasks does not show (test_the_smoke_tests_undrain_is_tagged_smoke)
    (["--tags", "smoke"], ALWAYS + ["Smoke-test the current release", SMOKE_DRAIN],
     CHECKS + INSTALL + CONFIGURE),
])
def test_each_phase_selects_its_stages(tags, selected, skipped):
    out = listed(*tags)
    for name in selected:
        assert name in out, (tags, name)
    for name in skipped:
        assert name not in out, (tags, name)


def includes(node, inherited=()):
    """(include_role task, tags it runs under) of a play's task list, blocks and their rescue/always included;
    a task without tags of its own has those of the nearest block around it that has some."""
    for task in node or []:
        tags = task.get("tags") or list(inherited)
        if "ansible.builtin.include_role" in task:
            yield task, tags
        for part in ("block", "rescue", "always"):
            yield from includes(task.get(part), tags)


def test_every_role_include_applies_its_tags_to_the_role_tasks():
    plays = yaml.safe_load((ROOT / "deploy.yml").read_text())
    seen = 0
    for play in plays:
        for task, tags in includes(play.get("tasks")):
            seen += 1
            applied = ((task["ansible.builtin.include_role"].get("apply") or {}).get("tags")) or []
            wanted = set(tags) - {"never"}
            assert wanted, f"untagged role include: {task['name']}"
            assert set(applied) == wanted, f"{task['name']}: apply tags {applied} != {sorted(wanted)}"
    assert seen >= 14


def test_the_smoke_tests_undrain_is_tagged_smoke():
    plays = yaml.safe_load((ROOT / "deploy.yml").read_text())
    tasks = [t for top in plays[1]["tasks"] for t in [top, *(top.get("block") or [])]]
    smoke = next(t for t in tasks if t["name"].startswith("Smoke-test the current release on demand"))
    assert smoke["tags"] == ["never", "smoke"]
    undrain = smoke["always"][0]
    assert undrain["name"].startswith(SMOKE_UNDRAIN) and undrain["when"] == "__dflash_smoke_restart"
    assert undrain["ansible.builtin.include_role"] == {"name": "dflash_router", "tasks_from": "undrain",
                                                      "apply": {"tags": ["smoke"]}}
    drain = smoke["block"][0]
    assert drain["ansible.builtin.include_role"]["tasks_from"] == "drain" and drain["when"] == "__dflash_smoke_restart"
