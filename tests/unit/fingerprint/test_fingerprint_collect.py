"""Live collection against stand-in tools, capture/replay round trip, CLI and the Ansible module."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.dflash_fingerprint import collect, merge

ROOT = Path(__file__).resolve().parents[3]
CT200 = ROOT / "lab" / "captures" / "ct200"

FAKE_SMI = """#!{python}
import sys
from pathlib import Path
cap = Path({capture!r})
args = sys.argv[1:]
if {old_driver!r} and any("compute_cap" in a for a in args):
    print('Field "compute_cap" is not a valid field to query.')
    sys.exit(2)
if not args:
    sys.stdout.write((cap / "nvidia-smi.txt").read_text())
elif args[0].startswith("--query-gpu="):
    rows = [r.split(", ") for r in (cap / "nvidia-smi-query.csv").read_text().splitlines()]
    if "compute_cap" not in args[0]:
        rows = [r[:4] + r[5:] for r in rows]
    print("\\n".join(", ".join(r) for r in rows))
elif args[0].startswith("--query-compute-apps="):
    sys.stdout.write((cap / "nvidia-smi-apps.csv").read_text())
elif args == ["-q", "-x"]:
    sys.stdout.write((cap / "nvidia-smi-q.xml").read_text())
else:
    sys.exit(2)
"""

FAKE_TORCH = """#!/bin/sh
echo 'some import warning' >&2
echo '{"version": "2.11.0+cu128", "cuda": "12.8", "available": true, "device_count": 8, "arch_list": ["sm_120"]}'
"""


def fake_tools(tmp_path, old_driver=False):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(python=sys.executable, capture=str(CT200), old_driver=old_driver))
    smi.chmod(0o755)
    py = bindir / "venv-python"
    py.write_text(FAKE_TORCH)
    py.chmod(0o755)
    return smi, py


def test_live_collection_matches_the_replay(tmp_path):
    smi, py = fake_tools(tmp_path)
    raw = collect.collect_raw(venv_python=str(py), proc_version_path=str(CT200 / "proc-driver-nvidia-version.txt"),
                          nvidia_smi=str(smi), toolkit_roots=(str(tmp_path / "none"),))
    live = merge.fingerprint_from_raw(raw)
    replay = merge.fingerprint_from_raw(collect.read_capture(CT200))
    assert live["gpus"] == replay["gpus"]
    assert live["driver_version"] == "580.95.05" and live["driver_cuda_version"] == "13.0"
    assert live["torch"]["version"] == "2.11.0+cu128" and live["torch"]["device_count"] == 8
    meta = json.loads(raw["capture-meta.json"])
    assert meta["exit_codes"]["nvidia-smi.txt"] == 0 and meta["errors"] == {}
    # capture -> replay round trip
    written = collect.write_capture(raw, tmp_path / "cap")
    assert "nvidia-smi-q.xml" in written and "capture-meta.json" in written
    assert merge.fingerprint_from_raw(collect.read_capture(tmp_path / "cap")) == live


def test_old_driver_query_is_retried_without_compute_cap(tmp_path):
    smi, _ = fake_tools(tmp_path, old_driver=True)
    raw = collect.collect_raw(nvidia_smi=str(smi), proc_version_path=str(tmp_path / "missing"),
                          toolkit_roots=(str(tmp_path / "none"),))
    assert "compute_cap" not in json.loads(raw["capture-meta.json"])["commands"]["nvidia-smi-query.csv"]
    fp = merge.fingerprint_from_raw(raw)
    assert fp["gpu_count"] == 8 and fp["gpus"][0]["sm"] == "12.0"
    assert fp["gpus"][0]["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def test_no_nvidia_smi_gives_zero_gpus_with_the_reason(tmp_path):
    raw = collect.collect_raw(nvidia_smi="nvidia-smi-that-does-not-exist", proc_version_path=str(tmp_path / "x"),
                          toolkit_roots=(str(tmp_path / "none"),))
    fp = merge.fingerprint_from_raw(raw)
    assert fp["gpu_count"] == 0 and fp["problems"] == ["nvidia-smi not found"]
    assert fp["os"] and fp["glibc"]


def test_hung_nvidia_smi_is_asked_once_and_reported(tmp_path):
    smi = tmp_path / "nvidia-smi"
    log = tmp_path / "calls"
    smi.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nsleep 5\n")
    smi.chmod(0o755)
    raw = collect.collect_raw(nvidia_smi=str(smi), proc_version_path=str(tmp_path / "x"),
                          toolkit_roots=(str(tmp_path / "none"),), timeout=1)
    assert len(log.read_text().splitlines()) == 1
    fp = merge.fingerprint_from_raw(raw)
    assert fp["gpu_count"] == 0
    assert fp["problems"] == ["nvidia-smi timed out after 1s (driver or GPU hung? look for NVRM Xid lines in dmesg)"]


def test_find_toolkits(tmp_path):
    tk = tmp_path / "cuda-12.8"
    (tk / "bin").mkdir(parents=True)
    (tk / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (tk / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "12.8.1"}}))
    (tmp_path / "cuda").symlink_to(tk)
    old = tmp_path / "cuda-10.2"
    old.mkdir()
    (old / "version.txt").write_text("CUDA Version 10.2.89\n")
    (old / "bin").mkdir()
    (old / "bin" / "nvcc").write_text("")
    found = collect.find_toolkits(roots=(str(tmp_path),))
    assert [(t["path"], t["version"]) for t in found] == [(str(tk), "12.8"), (str(old), "10.2")]


# the CLI: scripts/fingerprint.py ...
CLI = [sys.executable, str(ROOT / "scripts" / "fingerprint.py")]
CLI_ENV = dict(os.environ)


def test_cli_replay_prints_the_fact():
    out = subprocess.run([*CLI, "--replay-dir", str(CT200)],
                         capture_output=True, text=True, check=True, env=CLI_ENV).stdout
    fp = json.loads(out)
    assert fp["gpu_count"] == 8 and fp["gpus"][0]["sm"] == "12.0"


def test_cli_capture_writes_the_folder(tmp_path):
    smi, py = fake_tools(tmp_path)
    env = dict(CLI_ENV, PATH=f"{smi.parent}:{os.environ['PATH']}")
    out = subprocess.run([*CLI, "--capture-dir",
                          str(tmp_path / "cap"), "--venv-python", str(py)], capture_output=True, text=True,
                         check=True, env=env).stdout
    assert json.loads(out)["torch"]["cuda"] == "12.8"
    assert (tmp_path / "cap" / "nvidia-smi-query.csv").read_text() == (CT200 / "nvidia-smi-query.csv").read_text()


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "ansible").exists(), reason="controller venv not built")
def test_ansible_adhoc_replay_prints_the_fact():
    env = dict(os.environ, ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "ansible"), "localhost", "-m", "dflash_fingerprint", "-a",
                           f"replay_dir={CT200}"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("localhost | SUCCESS => ")
    result = json.loads(proc.stdout.split("=>", 1)[1])
    fact = result["ansible_facts"]["dflash_fingerprint"]
    assert fact == merge.fingerprint_from_raw(collect.read_capture(CT200))
    assert result["changed"] is False and result["refusals"] == []


def test_read_capture_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        collect.read_capture(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="holds none of the capture files"):
        collect.read_capture(tmp_path)


def test_cli_main_in_process(capsys):
    """The same CLI called in-process (scripts/fingerprint.py runs it in a subprocess above)."""
    from ansible.module_utils.dflash_fingerprint import cli

    assert cli.main(["--replay-dir", str(CT200)]) == 0
    fp = json.loads(capsys.readouterr().out)
    assert fp["gpu_count"] == 8 and fp["gpus"][0]["sm"] == "12.0"
