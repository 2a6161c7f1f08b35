"""dflash_service_manager's default is defined once (module_utils/dflash_service/backend.py, default_service_manager;
the dflash_service_manager_default filter): the shared inputs' role (roles/dflash) holds it, the release
role's default follows it."""
import json
import pathlib

import pytest
from ansible.module_utils.dflash_service import backend as dflash_backend
from ansible_play import run_play

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("facts", "want"), [
    ({}, "systemd"),  # facts not gathered (rollback.yml)
    (None, "systemd"),
    ({"service_mgr": "systemd"}, "systemd"),
    ({"service_mgr": "process_api"}, "runner"),  # GPU containers without systemd
    ({"service_mgr": "sysvinit"}, "runner"),
    ({"service_mgr": ""}, "runner"),
])
def test_default_service_manager(facts, want):
    assert dflash_backend.default_service_manager(facts) == want


def test_both_roles_defaults_through_a_playbook(tmp_path):
    """The real defaults files, templated by Ansible with the repository's filter plugins: without
    facts, with this machine's facts, and with dflash_service_manager set (the release role follows it)."""
    def show(name):
        return {"ansible.builtin.copy": {
            "dest": str(tmp_path / f"{name}.json"), "mode": "0644",
            "content": "{{ {'instances': dflash_service_manager, 'release': dflash_release_service_manager,"
                       " 'facts': ansible_facts.get('service_mgr')} | to_json }}"}}
    load = [{"ansible.builtin.include_vars": str(ROOT / "roles" / r / "defaults" / "main.yml")}
            for r in ("dflash", "dflash_instances", "dflash_release")]
    play = [
        {"hosts": "localhost", "gather_facts": False, "tasks": [*load, show("nofacts")]},
        {"hosts": "localhost", "gather_facts": True, "tasks": [*load, show("facts")]},
        {"hosts": "localhost", "gather_facts": True, "tasks": [
            # set (above the include_vars of the plays before) to what the facts would not give:
            # the release role follows the setting
            {"ansible.builtin.set_fact": {"dflash_service_manager": (
                "{{ 'runner' if ansible_facts.get('service_mgr') == 'systemd' else 'systemd' }}")}},
            load[2], show("set")]},
    ]
    r = run_play(play, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    out = {n: json.loads((tmp_path / f"{n}.json").read_text()) for n in ("nofacts", "facts", "set")}
    assert out["nofacts"] == {"instances": "systemd", "release": "systemd", "facts": None}
    want = "systemd" if out["facts"]["facts"] == "systemd" else "runner"
    assert out["facts"]["instances"] == out["facts"]["release"] == want
    assert out["set"]["release"] == out["set"]["instances"] == {"systemd": "runner", "runner": "systemd"}[want]
