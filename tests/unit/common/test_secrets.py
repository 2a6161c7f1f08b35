"""Secrets: what counts as one, where it may go (the env file only), the launcher that hands an API key to
sglang without argv, the lab stand-in asking for the key as sglang does, the smoke client sending it,
and redaction of whatever the server logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.dflash_common import secrets as sec
from ansible.module_utils.dflash_release import manifest, ops, smoke, target
from test_standin import BASE_ARGS, SPEC_ARGS, Server, http

ROOT = Path(__file__).resolve().parents[3]
LAUNCH = ROOT / "roles/dflash_instances/files/dflash-launch.py"
STANDIN = ROOT / "files/lab/sglang_standin.py"
KEY = "sk-unit-6f0e4d2c1b3a59788796"


@pytest.mark.parametrize(("name", "secret"), [
    ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("OPENAI_API_KEY", True), ("WANDB_API_KEY", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("DB_PASSWORD", True), ("GITHUB_PAT_TOKEN", True),
    ("TOKENIZERS_PARALLELISM", False), ("NCCL_IB_DISABLE", False), ("KEY", False), ("CACHE_KEY_PREFIX", False),
    ("SGLANG_API_KEY", True), ("DFLASH_STANDIN_FAULT", False),
])
def test_what_counts_as_a_credential_variable(name, secret):
    assert sec.is_secret_env(name) is secret


def test_instance_secrets_and_the_public_view():
    inst = {"name": "a", "api_key": KEY, "admin_api_key": "adm", "env": {"HF_TOKEN": "hf_x", "NCCL_DEBUG": "INFO"}}
    assert sec.instance_secrets(inst) == {"DFLASH_API_KEY": KEY, "DFLASH_ADMIN_API_KEY": "adm", "HF_TOKEN": "hf_x"}
    pub = sec.public_instance(inst)
    assert "api_key" not in pub and pub["api_key_set"] and pub["env"] == {"HF_TOKEN": "********", "NCCL_DEBUG": "INFO"}
    assert sec.all_secrets([inst, {"name": "b"}]) == {"a": sec.instance_secrets(inst)}
    assert sec.secret_values([inst]) == {KEY, "adm", "hf_x"}


def test_redact_nested():
    got = sec.redact({"msg": f"server_args=ServerArgs(api_key='{KEY}')", "tail": [KEY, 3], KEY: 1}, {KEY})
    assert got == {"msg": "server_args=ServerArgs(api_key='********')", "tail": ["********", 3], "********": 1}
    assert sec.redact("x", set()) == "x"


def test_salted_digest_needs_the_hosts_salt(tmp_path):
    salt = sec.load_salt(str(tmp_path))
    assert oct(os.stat(tmp_path / sec.SALT_FILE).st_mode & 0o777) == "0o600"
    assert sec.load_salt(str(tmp_path)) == salt
    assert sec.salted(KEY, salt) == sec.salted(KEY, salt) != sec.salted(KEY, b"another salt of the right size")
    assert KEY not in sec.salted(KEY, salt)


# --------------------------------------------------------------------------- the release keeps keys in the env file


LAYERS = [{"name": "lab", "path": "/opt/dflash/layers/lab-1", "hash": "1", "parent": None, "python": "/usr/bin/python3"}]


def flags(env=None):
    return {"a": {"args": ["--model-path", "/m", "--port", "30001"], "env": env or {"CUDA_VISIBLE_DEVICES": "0"},
                  "applied": [], "skipped": []}}


def test_release_writes_secrets_to_the_env_file_only(tmp_path):
    prefix = str(tmp_path)
    out = ops.prepare(prefix, LAYERS, None, flags(), None, "rev", False, secrets={"a": {"DFLASH_API_KEY": KEY,
                                                                                       "HF_TOKEN": "hf_secret"}})
    env = Path(out["path"]) / "instances" / "a.env"
    assert f'DFLASH_API_KEY="{KEY}"' in env.read_text() and oct(env.stat().st_mode & 0o777) == "0o600"
    holders = [p for p in tmp_path.rglob("*") if p.is_file() and KEY in p.read_text(errors="replace")]
    assert holders == [env]
    assert out["manifest"]["instances"]["a"]["secrets"] == ["DFLASH_API_KEY", "HF_TOKEN"]
    # a new key is a new release (the digest follows the key through the host's salt), the same key is not
    again = ops.prepare(prefix, LAYERS, None, flags(), None, "rev", False,
                        secrets={"a": {"DFLASH_API_KEY": KEY, "HF_TOKEN": "hf_secret"}})
    assert again["id"] == out["id"] and not again["created"]
    other = ops.prepare(prefix, LAYERS, None, flags(), None, "rev", False, secrets={"a": {"DFLASH_API_KEY": KEY + "2"}})
    assert other["id"] != out["id"]


def test_manifest_masks_credential_env_that_reached_the_flags():
    content = manifest.build_content(LAYERS, None, flags({"HF_TOKEN": "hf_leak", "X": "1"}), None, {"a": "text"})
    assert content["instances"]["a"]["env"] == {"HF_TOKEN": "********", "X": "1"}


# --------------------------------------------------------------------------- the launcher


def launch(tmp_path, env, *args):
    """What the server started by the launcher sees (written to a file: its output is masked)."""
    script = tmp_path / "server.py"
    script.write_text(
        "import json, os, sys\n"
        "cmdline = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        f"open({str(tmp_path / 'seen.json')!r}, 'w').write(json.dumps(\n"
        "    {'argv': sys.argv, 'cmdline': [c.decode() for c in cmdline if c],\n"
        "     'env': sorted(k for k in os.environ if k.startswith('DFLASH'))}))\n")
    full = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH")}
    full.update(env)
    subprocess.run([sys.executable, str(LAUNCH), str(script), *args], env=full, capture_output=True, text=True,
                   check=True)
    return json.loads((tmp_path / "seen.json").read_text())


def test_launcher_adds_the_keys_in_process_only(tmp_path):
    got = launch(tmp_path, {"DFLASH_API_KEY": KEY, "DFLASH_ADMIN_API_KEY": "adm-1"}, "--port", "30001")
    assert got["argv"][1:] == ["--port", "30001", "--api-key", KEY, "--admin-api-key", "adm-1"]
    assert not any(KEY in c for c in got["cmdline"])  # what ps and /proc/<pid>/cmdline show
    assert got["env"] == []  # not inherited by the server's children either


def test_launcher_without_keys_changes_nothing(tmp_path):
    assert launch(tmp_path, {}, "--port", "1")["argv"][1:] == ["--port", "1"]


def load_launcher():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dflash_launch", LAUNCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_launcher_masks_server_args_repr():
    import dataclasses

    mod = load_launcher()

    @dataclasses.dataclass
    class ServerArgs:
        model_path: str = "/m"
        api_key: str = KEY

    mod.mask_repr(ServerArgs, [KEY])
    assert repr(ServerArgs()).endswith("ServerArgs(model_path='/m', api_key='********')")
    env = {"DFLASH_API_KEY": KEY}
    assert mod.take_keys(env) == [("--api-key", KEY)] and env == {}


def real_server_args_line(key, admin):
    """sglang 0.5.11's own start-up line of the H200 run (gpu-harness/records/2026-11-30-e2e2, 11.5 kB, one
    line), with keys where that run had none: what sglang logs for --api-key/--admin-api-key."""
    from gpu_records import record_text

    line = next(ln for ln in record_text("2026-11-30-e2e2", "server-startup.log").splitlines()
                if "server_args=ServerArgs(" in ln)
    assert "api_key=None, admin_api_key=None" in line
    return line.replace("api_key=None, admin_api_key=None", f"api_key={key!r}, admin_api_key={admin!r}")


WRAPPER = """\
import logging, os, subprocess, sys, time
logging.basicConfig(level=logging.INFO, format="%(message)s")
line = open(sys.argv[1]).read()
# what sglang does at start (engine.py logger.info(f"{server_args=}")), from a wrapper script, not -m sglang
logging.getLogger("sglang").info(line)
# the same line written in two pieces cut inside the key, with a pause between them (a slow writer)
cut = line.index("api_key=") + 12
sys.stdout.write(line[:cut]); sys.stdout.flush(); time.sleep(0.3)
sys.stdout.write(line[cut:] + "\\n"); sys.stdout.flush()
# a child of the server (sglang's scheduler, detokenizer) inherits the masked outputs
subprocess.run([sys.executable, "-c", "import os; print('child sees', os.environ.get('HF_TOKEN'))"], check=True)
print("token in the env:", os.environ["HF_TOKEN"], "json:", '{"k": "%s"}' % os.environ["HF_TOKEN"])
print("ready")
"""


def test_launcher_masks_every_secret_in_the_real_server_args_line_whatever_the_entry(tmp_path):
    admin = "adm-" + KEY[::-1]
    line = real_server_args_line(KEY, admin)
    (tmp_path / "line.txt").write_text(line)
    (tmp_path / "wrapper.py").write_text(WRAPPER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH")}
    env.update(DFLASH_API_KEY=KEY, DFLASH_ADMIN_API_KEY=admin, HF_TOKEN="hf_launcherTEST9f8e7d")
    p = subprocess.run([sys.executable, str(LAUNCH), str(tmp_path / "wrapper.py"), str(tmp_path / "line.txt")],
                       env=env, capture_output=True, text=True, timeout=60, check=True)
    out = p.stdout + p.stderr
    for secret in (KEY, admin, "hf_launcherTEST9f8e7d"):
        assert secret not in out
    masked = line.replace(repr(KEY), "'********'").replace(repr(admin), "'********'")
    assert p.stderr.splitlines()[0] == masked  # logging's line: the real format, only the keys masked
    assert masked in p.stdout.splitlines()  # the line written in two pieces, joined and masked
    assert "child sees ********" in p.stdout
    assert 'token in the env: ******** json: {"k": "********"}' in p.stdout
    assert p.stdout.rstrip().endswith("ready")


def test_launcher_without_secrets_forks_no_filter(tmp_path):
    mod = load_launcher()
    assert mod.mask_output([]) is None
    assert mod.secret_values([], {"NCCL_DEBUG": "INFO", "HF_TOKEN": "x"}) == []  # too short to mask
    assert mod.secret_values([("--api-key", KEY)], {"WANDB_API_KEY": "wandb-123456", "TOKENIZERS_PARALLELISM": "false"}) \
        == sorted([KEY, "wandb-123456"])
    forms = mod.forms_of(['a"b\\c-secret'])
    assert b'a"b\\c-secret' in forms and b'a\\"b\\\\c-secret' in forms  # as is and as JSON writes it
    assert mod.held_tail(b"text sk-un", mod.forms_of([KEY])) == 5
    assert mod.held_tail(b"text\n", mod.forms_of([KEY])) == 0


# --------------------------------------------------------------------------- the stand-in asks, the smoke client sends


@pytest.fixture
def keyed():
    srv = Server([*BASE_ARGS, *SPEC_ARGS, "--api-key", KEY, "--enable-metrics"])  # /metrics: open, as sglang
    srv.wait_listening()
    yield srv
    srv.stop()


def test_standin_wants_the_key_like_sglang(keyed):
    assert http("GET", keyed.base + "/health")[0] == 200
    assert http("GET", keyed.base + "/metrics")[0] == 200
    status, raw, _ = http("GET", keyed.base + "/v1/models")
    assert status == 401 and json.loads(raw) == {"error": "Unauthorized"}
    status, raw, _ = http("GET", keyed.base + "/get_server_info", headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200 and "api_key" not in json.loads(raw)


def test_smoke_authenticates_and_records_no_key(keyed, tmp_path):
    args = [*BASE_ARGS, *SPEC_ARGS, "--port", str(keyed.port)]
    with pytest.raises(smoke.SmokeError, match="HTTP 401"):
        smoke.smoke_instance(keyed.base, args, timeout=10)
    res, failed, _ = smoke.smoke_all([{"name": "a", "args": args, "base_url": keyed.base, "api_key": KEY,
                                       "secrets": [KEY]}], {"timeout": 10}, str(tmp_path))
    assert failed == [] and res["a"]["authenticated"] and res["a"]["passed"]
    assert KEY not in (tmp_path / "a.json").read_text()


def test_smoke_reads_the_key_from_the_release_env_file(tmp_path):
    (tmp_path / "instances").mkdir()
    (tmp_path / "manifest.json").write_text(json.dumps({"id": "r", "instances": {"a": {"args": ["--port", "1"]}}}))
    (tmp_path / "instances" / "a.env").write_text(f'DFLASH_API_KEY="{KEY}"\nHF_TOKEN="hf_1"\nDFLASH_ARGS="--port 1"\n')
    (item,) = target.load_manifest_instances(str(tmp_path))
    assert item["api_key"] == KEY and item["secrets"] == sorted([KEY, "hf_1"])
    assert smoke.instance_secret_values([item]) == {KEY, "hf_1"}
