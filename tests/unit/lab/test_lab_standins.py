"""The lab's stand-in nvidia-smi / nvcc replay a capture folder (docs/design.md, "Lab contract")."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TOOLS = REPO / "lab" / "standin-tools"
CT200 = REPO / "lab" / "captures" / "ct200"
CT129 = REPO / "lab" / "captures" / "ct129"
NO_DRIVER = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"


def run(tool: str, capture: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DFLASH_LAB_CAPTURE=str(capture))
    return subprocess.run([sys.executable, str(TOOLS / tool), *args], env=env,
                          capture_output=True, text=True, check=False)


def test_plain_call_replays_the_table():
    r = run("nvidia-smi", CT200)
    assert r.returncode == 0
    assert r.stdout == (CT200 / "nvidia-smi.txt").read_text()


def test_query_csv_as_captured():
    r = run("nvidia-smi", CT200,
            "--query-gpu=index,name,uuid,pci.bus_id,compute_cap,driver_version,memory.total,memory.used",
            "--format=csv,noheader,nounits")
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        line.strip() for line in (CT200 / "nvidia-smi-query.csv").read_text().splitlines()]
    assert len(r.stdout.splitlines()) == 8


def test_query_picks_fields_in_the_asked_order_with_header_units_and_id_filter():
    r = run("nvidia-smi", CT200, "--query-gpu=memory.used,index", "--format=csv", "-i", "0,1")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == "memory.used [MiB], index"
    # GPU0 is held by the foreign DDTree wrapper in the seeds; GPU1 is free.
    assert lines[1] == "60627 MiB, 0"
    assert lines[2] == "0 MiB, 1"
    assert len(lines) == 3


def test_unknown_field_fails_like_the_real_tool():
    r = run("nvidia-smi", CT200, "--query-gpu=index,bogus", "--format=csv")
    assert r.returncode == 2
    assert 'Field "bogus" is not a valid field to query.' in r.stdout


def test_compute_apps_and_list():
    r = run("nvidia-smi", CT200, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
            "--format=csv,noheader,nounits")
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        line.strip() for line in (CT200 / "nvidia-smi-apps.csv").read_text().splitlines()]
    listing = run("nvidia-smi", CT129, "-L").stdout.splitlines()
    assert len(listing) == 2 and listing[0].startswith("GPU 0: NVIDIA RTX A6000 (UUID: GPU-")


def test_xml_replay():
    r = run("nvidia-smi", CT129, "-q", "-x")
    assert r.returncode == 0
    assert r.stdout == (CT129 / "nvidia-smi-q.xml").read_text()


@pytest.mark.parametrize("args", [[], ["-L"], ["--query-gpu=index", "--format=csv"], ["-q", "-x"]])
def test_no_driver_fails_with_rc9(tmp_path, args):
    r = run("nvidia-smi", tmp_path, *args)
    assert r.returncode == 9
    assert NO_DRIVER in r.stdout


def test_missing_file_for_the_call_fails_like_no_driver(tmp_path):
    shutil.copy(CT200 / "nvidia-smi-query.csv", tmp_path)
    assert run("nvidia-smi", tmp_path, "--query-gpu=index", "--format=csv,noheader").stdout == \
        "".join(f"{i}\n" for i in range(8))
    r = run("nvidia-smi", tmp_path, "-q", "-x")
    assert r.returncode == 9 and NO_DRIVER in r.stdout


def test_nvcc_replays_or_is_absent(tmp_path):
    r = run("nvcc", CT200, "--version")
    assert r.returncode == 0
    assert "release 12.8, V12.8.93" in r.stdout
    r = run("nvcc", tmp_path, "--version")
    assert r.returncode == 127
    assert "nvcc: command not found" in r.stderr
