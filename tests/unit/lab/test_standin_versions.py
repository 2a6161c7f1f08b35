"""The lab stand-in plays the sglang version of the tree on its PYTHONPATH: /get_server_info's version, the flags
it accepts (that version's server-flags.txt, as the lab overlay installs them under flags/<version>/) and the
meta_info names of /generate."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
STANDIN = ROOT / "files" / "lab" / "sglang_standin.py"
ARGS = ["--model-path", "/dev/shm/Qwen3.6-27B", "--speculative-algorithm", "DFLASH",
        "--speculative-draft-model-path", "/dev/shm/draft", "--speculative-num-draft-tokens", "16"]


def tree(tmp_path, version):
    """A tree folder as the tree stage makes it: sglang/_version.py with the wheel's __version__ line."""
    root = tmp_path / f"sglang-{version}-aaaaaaaaaaaa"
    (root / "sglang").mkdir(parents=True)
    (root / "sglang" / "_version.py").write_text(f"__version__ = version = '{version}'\n")
    return root


def installed(tmp_path):
    """The stand-in as the lab overlay installs it: <prefix>/lab/ with flags/<version>/server-flags.txt."""
    lab = tmp_path / "lab"
    lab.mkdir()
    shutil.copy(STANDIN, lab / "sglang_standin.py")
    for version in ("0.5.11", "0.5.17", "0.5.23"):
        (lab / "flags" / version).mkdir(parents=True)
        shutil.copy(ROOT / "files" / "patches" / "sglang" / version / "server-flags.txt", lab / "flags" / version)
    return lab / "sglang_standin.py"


def env_for(pythonpath=None, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH_STANDIN") and k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    env.update(extra)
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def jcall(url, body=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"}, method="POST" if body else "GET")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture
def serve():
    procs = []

    def _serve(script, env, args=ARGS):
        port = free_port()
        proc = subprocess.Popen([sys.executable, str(script), *args, "--port", str(port)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            assert proc.poll() is None, proc.stderr.read()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return f"http://127.0.0.1:{port}", proc
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the stand-in did not listen")

    yield _serve
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=5)


@pytest.mark.parametrize(("version", "names", "absent"), [
    ("0.5.11", {"spec_accepted_drafts", "spec_proposed_drafts"}, {"spec_num_correct_drafts"}),
    ("0.5.17", {"spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_accepted_drafts"}, set()),
    ("0.5.23", {"spec_num_correct_drafts", "spec_num_proposed_drafts"}, {"spec_accepted_drafts"}),
])
def test_it_plays_the_version_of_its_tree(tmp_path, serve, version, names, absent):
    base, _proc = serve(installed(tmp_path), env_for(tree(tmp_path, version)))
    info = jcall(base + "/get_server_info")
    assert info["version"] == version and info["stand_in"]
    assert info["lab_standin_flags_file"].endswith(f"flags/{version}/server-flags.txt")
    mi = jcall(base + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 32}})["meta_info"]
    assert names <= set(mi) and not (absent & set(mi)), sorted(mi)
    accepted = mi.get("spec_num_correct_drafts", mi.get("spec_accepted_drafts"))
    assert accepted == mi["completion_tokens"] - mi["spec_verify_ct"]


def test_each_version_accepts_its_own_flags(tmp_path, serve):
    script = installed(tmp_path)
    newer = [*ARGS, "--mamba-radix-cache-strategy", "extra_buffer"]
    old = subprocess.run([sys.executable, str(script), *newer], env=env_for(tree(tmp_path, "0.5.11")),
                         capture_output=True, text=True, timeout=20, check=False)
    assert old.returncode == 2 and "unrecognized arguments: --mamba-radix-cache-strategy" in old.stderr
    assert "flags of sglang 0.5.11" in old.stderr
    base, proc = serve(script, env_for(tree(tmp_path, "0.5.17")), newer)
    assert jcall(base + "/get_server_info")["version"] == "0.5.17"
    proc.terminate()
    err = proc.communicate(timeout=5)[1]
    assert "plays sglang 0.5.17 (from " in err and "sglang-0.5.17-aaaaaaaaaaaa/sglang/_version.py" in err


def test_without_a_tree_it_plays_the_default_or_the_variable(tmp_path):
    spec = importlib.util.spec_from_file_location("standin", STANDIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.played_version({}) == ("0.5.11", "the stand-in's default")
    assert mod.played_version({"DFLASH_STANDIN_SGLANG_VERSION": "0.5.23"})[0] == "0.5.23"
    t = tree(tmp_path, "0.5.17")
    assert mod.played_version({"PYTHONPATH": f"/nowhere:{t}", "DFLASH_STANDIN_SGLANG_VERSION": "0.5.23"}) == (
        "0.5.17", str(t / "sglang" / "_version.py"))
    # its meta_info names are versions.yml's
    data = yaml.safe_load((ROOT / "files" / "patches" / "sglang" / "versions.yml").read_text())
    for version, facts in data["versions"].items():
        assert mod.META_INFO_KEYS[version] == facts["meta_info_keys"]["value"], version


def test_the_real_wheels_version_line_is_what_it_reads(tmp_path):
    """sglang/_version.py of each pinned wheel: the line the stand-in parses."""
    import zipfile

    from sglang_wheel import sglang_wheel

    spec = importlib.util.spec_from_file_location("standin", STANDIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for version in ("0.5.11", "0.5.17", "0.5.23"):
        with zipfile.ZipFile(sglang_wheel(version=version)) as z:
            text = z.read("sglang/_version.py").decode()
        d = tmp_path / version / "sglang"
        d.mkdir(parents=True)
        (d / "_version.py").write_text(text)
        assert mod.played_version({"PYTHONPATH": str(d.parent)})[0] == version
