"""inventory/production as shipped, through deploy.yml --tags preflight: every value a user must fill is refused
in words ("fill in ..."), all at once, before anything is reached; with the vault step done as README.md says
(tests/fixtures/inventory: a test vault and its password file) the key resolves, is never printed, and only the
values still unfilled are refused. The whole walk-through against a lab host: molecule/default (first-real-host)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests/fixtures/inventory"


def preflight(inventory, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inventory), "deploy.yml",
                           "--tags", "preflight", *extra], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    return proc, " ".join((proc.stdout + proc.stderr).split())  # yaml output folds long lines


def test_as_shipped_every_placeholder_is_refused_in_words_before_anything_is_reached():
    proc, out = preflight(ROOT / "inventory/production")
    assert proc.returncode == 2
    for words in (
        ("gpu-node-01.example.invalid: fill in the host: gpu-node-01.example.invalid is the example inventory's "
        "placeholder and never resolves"),
        "gpu-node-01.example.invalid: fill in dflash_routers: router-01.example.invalid",
        "gpu-node-01.example.invalid: fill in dflash_monitoring: prometheus-01.example.invalid",
        "gpu-node-01.example.invalid: fill in ansible_user: the user Ansible logs in as over ssh",
        "gpu-node-01.example.invalid: fill in dflash_instances[dflash-gpu0].model_source.revision: the 40-hex commit",
        "gpu-node-01.example.invalid: fill in dflash_instances[dflash-gpu0].draft_source.revision:",
        "gpu-node-01.example.invalid: fill in dflash_instances[dflash-gpu0].api_key: vault_dflash_api_key",
        "gpu-node-01.example.invalid: fill in dflash_instances[ddtree-gpu1].model_source.revision:",
        "gpu-node-02.example.invalid: fill in the host: gpu-node-02.example.invalid",
        "gpu-node-02.example.invalid: fill in dflash_instances[dflash-tp4].model_path:",
        "gpu-node-02.example.invalid: fill in dflash_instances[dflash-tp4].draft_model_path:",
    ):
        assert words in out, words
    assert "does not answer" not in out and "Gather facts" not in out  # nothing was reached
    assert "Undefined" not in out and "undefined" not in out  # no raw templating error


def test_the_vault_step_resolves_the_key_and_never_prints_it(tmp_path):
    inv = tmp_path / "mine"
    shutil.copytree(ROOT / "inventory/production", inv)
    shutil.copy(FIXTURES / "vault.yml", inv / "group_vars/all/vault.yml")
    # what a user fills: the login user, the commits (the other host and the router/Prometheus hosts left as shipped)
    main = inv / "group_vars/all/main.yml"
    main.write_text(main.read_text().replace(
        'ansible_user: "fill in: the user Ansible logs in as over ssh (it needs sudo to root; passwordless, or run '
        'with -K)"', "ansible_user: deploy"))
    hv = inv / "host_vars/gpu-node-01.example.invalid.yml"
    data = yaml.safe_load(hv.read_text())
    for inst in data["dflash_instances"]:
        inst["model_source"]["revision"] = "0123456789abcdef0123456789abcdef01234567"
        inst["draft_source"]["revision"] = "89abcdef0123456789abcdef0123456789abcdef"
    hv.write_text(yaml.safe_dump(data, sort_keys=False))

    proc, out = preflight(inv, "-l", "gpu-node-01.example.invalid")
    assert proc.returncode != 0 and "Attempting to decrypt but no vault secrets found" in out  # Ansible's own words

    proc, out = preflight(inv, "-l", "gpu-node-01.example.invalid", "--vault-password-file",
                          str(FIXTURES / "vault-password.txt"))
    assert proc.returncode == 2
    assert "fill in the host: gpu-node-01.example.invalid" in out
    assert "fill in dflash_routers: router-01.example.invalid" in out
    for gone in ("fill in ansible_user", "api_key: vault_dflash_api_key", "revision:"):
        assert gone not in out, gone
    assert "sk-dflash-test-0123456789abcdef" not in out
