"""The bench's start-up smoke test uses the host's smoke gates (dflash_smoke_gates): with dummy weights an
inventory turns the output gates off for its deploys, and the bench's temporary servers must not then fail
every cell on those gates (first H200 run of bench.yml, 2026-12-02: 44 of 48 cells 'failed' on
output.degenerate while every server was healthy)."""
from __future__ import annotations

from pathlib import Path

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROOT = Path(__file__).resolve().parents[3]


def _wait_task():
    tasks = yaml.safe_load((ROOT / "roles/dflash_bench/tasks/wave.yml").read_text())
    stack = list(tasks)
    while stack:
        t = stack.pop()
        if isinstance(t, dict):
            if "dflash_wait" in t:
                return t["dflash_wait"]
            stack.extend(t.get("block", []))
    raise AssertionError("no dflash_wait task in wave.yml")


def _render(expr, extra):
    # the role's defaults and the task's argument are templates Ansible trusts (files of the playbook)
    defaults = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in
                yaml.safe_load((ROOT / "roles/dflash_bench/defaults/main.yml").read_text()).items()}
    templar = Templar(loader=DataLoader(), variables={**defaults, **extra})
    return templar.template(trust_as_template(expr))


def test_bench_smoke_takes_the_hosts_gates():
    wait = _wait_task()
    assert "gate_defaults" in wait, "the bench's dflash_wait call must pass the smoke gates"
    gates = {"output": False, "min_accept_length": 0}
    assert _render(wait["gate_defaults"], {"dflash_smoke_gates": gates}) == gates
    assert _render(wait["gate_defaults"], {}) == {}


def test_bench_gates_can_be_set_apart_from_the_deploys():
    wait = _wait_task()
    own = {"output": True}
    assert _render(wait["gate_defaults"], {"dflash_smoke_gates": {"output": False},
                                           "dflash_bench_smoke_gates": own}) == own


def test_argument_spec_mirrors_the_default():
    spec = yaml.safe_load((ROOT / "roles/dflash_bench/meta/argument_specs.yml").read_text())
    opts = spec["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROOT / "roles/dflash_bench/defaults/main.yml").read_text())
    assert opts["dflash_bench_smoke_gates"]["default"] == defaults["dflash_bench_smoke_gates"]
