"""Run roles/dflash_metrics for real (ansible-playbook on localhost) over a small fleet inventory, and
find promtool; shared by the metrics tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "dflash_metrics"
EXPORTED = ROLE / "files" / "exported-metrics.yml"
DASHBOARD = ROLE / "files" / "dflash-fleet.dashboard.json"

# Two GPU hosts and a monitoring host: gpu-a runs a DDTREE instance and the router, gpu-b a DFLASH
# instance and one without speculation.
FLEET = {
    "gpu-a": [{"name": "w", "port": 30001, "algorithm": "DDTREE", "host": "0.0.0.0"}],
    "gpu-b": [{"name": "w", "port": 30001, "algorithm": "DFLASH", "host": "0.0.0.0"},
              {"name": "plain", "port": 30002, "algorithm": "NONE", "host": "0.0.0.0"}],
}
# The figures the rule tests render with (tests/unit/metrics/rules.test.yml expects these thresholds).
FIGURES = [
    {"host": "gpu-a", "instance": "w", "release": "r2", "accept_length": 4.0, "tokens_per_s": 100.0},
    {"host": "gpu-b", "instance": "w", "release": "r1", "accept_length": 3.0, "tokens_per_s": 200.0,
     "accept_ratio": 0.5},
]


def inventory(fleet=None, host_vars=None) -> dict:
    fleet = FLEET if fleet is None else fleet
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {"all": {"children": {
        "dflash_hosts": {"hosts": {h: dict(local, dflash_instances=insts, **(host_vars or {}).get(h, {}))
                                   for h, insts in fleet.items()}},
        "dflash_routers": {"hosts": {"gpu-a": {}}},
        "dflash_monitoring": {"hosts": {"mon": dict(local)}},
    }}}


def run_role(tmp_path: Path, role_vars: dict, fleet=None, host_vars=None, check=False,
             timeout=300) -> subprocess.CompletedProcess:
    """ansible-playbook: the role on the monitoring host `mon` (this machine), its files under tmp_path;
    host_vars: {host: {var: value}} on the fleet's hosts (e.g. the dflash_release fact of a deploy)."""
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps(inventory(fleet, host_vars)))
    owner = {"dflash_metrics_file_owner": str(os.getuid()), "dflash_metrics_file_group": str(os.getgid())}
    pb = tmp_path / "pb.yml"
    pb.write_text(json.dumps([{"name": "metrics", "hosts": "dflash_monitoring", "gather_facts": False,
                               "roles": [{"role": "dflash_metrics", "vars": dict(owner, **role_vars)}]}]))
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inv), str(pb)] + (["--check"] if check else [])
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, timeout=timeout, env=env)


def promtool(name: str = "promtool") -> str | None:
    """promtool (or prometheus, from the same Debian package): DFLASH_PROMTOOL / DFLASH_PROMETHEUS, else on
    PATH, else the one scripts/promtool.sh unpacks into .cache/prometheus/."""
    for cand in (os.environ.get("DFLASH_" + name.upper()), shutil.which(name),
                 str(ROOT / ".cache" / "prometheus" / "usr" / "bin" / name)):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def need_promtool(name: str = "promtool") -> str:
    """promtool (or prometheus), or a loud skip outside CI; in CI (CI=true) its absence fails the test."""
    found = promtool(name)
    if found:
        return found
    why = f"{name} not found: run `make promtool` (scripts/promtool.sh) or set DFLASH_{name.upper()}"
    if os.environ.get("CI"):
        pytest.fail(why + " (CI must run the rule tests)")
    pytest.skip(why)
