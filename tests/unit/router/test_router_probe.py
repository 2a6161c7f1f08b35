"""The router layer's import probe (dflash_router.probe_layer / probe_failure): a layer that cannot start
sglang-router is refused before the router's unit points at it. The real capture: the H200 fleet run of
2026-12-02 (gpu-harness/records/2026-12-02-h200-fleet/), whose hand-listed no_deps layer had fastapi 0.165
without opentelemetry-api; the router then died at import and the deploy only saw a refused connection."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils import dflash_router as rt
from test_smoke import FakeTime

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "router"


def test_failure_from_the_h200_capture_names_module_file_and_remedy():
    msg = rt.probe_failure((FIX / "h200-fastapi-0.165-no-opentelemetry.stderr").read_text(), 1)
    assert msg.startswith("ModuleNotFoundError: No module named 'opentelemetry'")
    assert "fastapi/telemetry/_api.py:9" in msg
    assert "provides 'opentelemetry'" in msg and "no_deps" in msg


def test_failure_without_a_traceback_keeps_the_tail():
    assert rt.probe_failure("", -9) == "exit status -9: no output"
    assert rt.probe_failure("Segmentation fault\n", 139).endswith("Segmentation fault")


def _layer(tmp_path, launch_src, version="0.3.2"):
    pkg = tmp_path / "sglang_router"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_router.py").write_text(launch_src)
    info = tmp_path / f"sglang_router-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang-router\nVersion: {version}\n")

    def run(argv, **kw):  # the layer's interpreter: this one, with the layer's site-packages first
        kw["env"] = dict(os.environ, PYTHONPATH=str(tmp_path))
        return subprocess.run(argv, **kw)  # noqa: PLW1510 (probe_layer passes check=False)
    return run


def test_probe_passes_and_reads_the_version(tmp_path):
    run = _layer(tmp_path, "import json\n")
    assert rt.probe_layer(sys.executable, run=run) == {"ok": True, "version": "0.3.2", "error": None}


def test_probe_fails_on_a_missing_dependency_of_the_entry_point(tmp_path):
    run = _layer(tmp_path, "import dflash_no_such_dist.telemetry\n")
    res = rt.probe_layer(sys.executable, run=run)
    assert not res["ok"]
    assert res["error"].startswith("ModuleNotFoundError: No module named 'dflash_no_such_dist'")
    assert "sglang_router/launch_router.py:1" in res["error"]


def test_probe_without_the_router_installed(tmp_path):
    res = rt.probe_layer(sys.executable)  # this interpreter has no sglang_router
    assert not res["ok"] and "No module named 'sglang_router'" in res["error"]


def test_probe_of_a_missing_interpreter(tmp_path):
    res = rt.probe_layer(str(tmp_path / "bin" / "python"))
    assert not res["ok"] and "could not run" in res["error"]


def test_the_role_probes_the_layer_before_the_unit_points_at_it():
    import yaml
    tasks = yaml.safe_load((Path(__file__).resolve().parents[3] / "roles/dflash_router/tasks/main.yml").read_text())
    names = [t.get("name", "") for t in tasks]
    probe = next(i for i, t in enumerate(tasks) if (t.get("dflash_router") or {}).get("action") == "probe")
    assert names.index("Router | its layer") < probe
    assert probe < names.index("Router | render sglang-router.service")
    assert tasks[probe]["dflash_router"]["python"] == "{{ __dflash_router_layer.path }}/bin/python"


def test_the_router_builds_its_layer_into_its_own_fact():
    """The layers role reports into the fact its caller names: the router never saves, sets or restores the
    instances' dflash_layers."""
    import yaml
    tasks = yaml.safe_load((Path(__file__).resolve().parents[3] / "roles/dflash_router/tasks/main.yml").read_text())
    include = next(t for t in tasks if (t.get("ansible.builtin.include_role") or {}).get("name") == "dflash_layers")
    assert include["vars"]["dflash_layers_fact"] == "__dflash_router_layers"
    assert include["vars"]["dflash_layers_root"] == "{{ dflash_router_prefix }}"
    assert "dflash_prefix" not in include["vars"]
    for t in tasks:
        assert "dflash_layers" not in (t.get("ansible.builtin.set_fact") or {}), t["name"]
    build = yaml.safe_load((Path(__file__).resolve().parents[3] / "roles/dflash_layers/tasks/build.yml").read_text())
    report = next(t for t in build if "ansible.builtin.set_fact" in t)
    assert report["ansible.builtin.set_fact"] == {"{{ dflash_layers_fact }}": "{{ __dflash_layers_result.layers }}"}


# ---------------------------------------------------------------- the wait ends when the router's process is gone

def _refused(method, url, body=None, timeout=10.0, api_key=None):
    return None, None, "[Errno 111] Connection refused"


def test_a_dead_router_ends_the_wait_at_once_with_its_logs_cause():
    """As on the H200: the router died at import; the wait used to say 'Connection refused' after 120 s."""
    tail = (FIX / "h200-fastapi-0.165-no-opentelemetry.stderr").read_text()
    c = FakeTime()
    with pytest.raises(rt.RouterError) as exc:
        rt.wait_router("http://127.0.0.1:30000", ["http://w1:30001"], timeout=120.0, call=_refused,
                       clock=c.clock, sleep=c.sleep,
                       unit_state=lambda: {"LoadState": "loaded", "ActiveState": "failed", "SubState": "failed"},
                       log_tail=lambda: tail)
    msg = str(exc.value)
    assert c.t < 2.0  # two polls, not the timeout
    assert "process is gone (failed: ActiveState=failed" in msg and "No module named 'opentelemetry'" in msg


def test_a_starting_router_is_waited_for_and_one_dead_poll_is_not_enough():
    c = FakeTime()
    states = iter([{"ActiveState": "activating"}] * 6 + [{"ActiveState": "failed", "SubState": "failed"},
                                                         {"ActiveState": "active"}] * 100)  # fmt: skip
    with pytest.raises(rt.RouterError, match="did not answer in 5 s"):
        rt.wait_router("http://r:30000", [], timeout=5.0, call=_refused, clock=c.clock, sleep=c.sleep,
                       unit_state=lambda: next(states))


@pytest.mark.parametrize("state, gone", [
    ({"ActiveState": "active", "SubState": "running"}, None),
    ({"ActiveState": "activating", "SubState": "start"}, None),
    ({"ActiveState": "activating", "SubState": "auto-restart"}, "SubState=auto-restart"),
    ({"ActiveState": "inactive", "SubState": "dead"}, "ActiveState=inactive"),
    ({"ActiveState": "failed", "SubState": "failed", "ExecMainStatus": 1}, "exit status 1"),
    ({"LoadState": "not-found"}, "not loaded"),
    ({}, None),  # no systemctl: nothing known, the wait runs to its timeout as before
    ({"ActiveState": "active", "SubState": "running", "NRestarts": 3}, None),  # restarts from before this start
])
def test_router_gone(state, gone):
    got = rt.router_gone(state, "Address already in use\n")
    assert (got is None) if gone is None else (gone in got)
    if gone and "LoadState" not in state:
        assert got.endswith("Address already in use")


def test_module_wait_on_the_runner_backend_ends_when_the_router_dies(tmp_path):
    """The real module (library/dflash_router.py) on a runner-managed unit whose process fails at import
    as on the H200: the wait fails in seconds, naming the missing module; without `unit` it would wait out
    its timeout."""
    import json
    import socket

    from ansible_play import run_play
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    units = tmp_path / "units"
    units.mkdir()
    (units / "sglang-router.service").write_text(
        f"[Service]\nExecStart={sys.executable} -c \"import fastapi_0165_telemetry_needs_opentelemetry_xyz\"\n")
    dirs = {"unit_dir": str(units), "log_dir": str(tmp_path / "log"), "run_dir": str(tmp_path / "run")}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"dflash_service": dict(dirs, name=["sglang-router.service"], state="restarted", service_manager="runner")},
        {"dflash_router": dict(dirs, action="wait", router=f"http://127.0.0.1:{port}", timeout=60,
                               unit="sglang-router.service", service_manager="runner", host="r1"),
         "register": "w", "ignore_errors": True},
        {"ansible.builtin.copy": {"dest": str(tmp_path / "out.json"), "content": "{{ w | to_json }}",
                                  "mode": "0644"}},
    ]}]  # fmt: skip
    r = run_play(play, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["failed"]
    assert out["msg"].startswith(f"r1: router http://127.0.0.1:{port}: the router at")
    assert "process is gone" in out["msg"]
    assert "No module named 'fastapi_0165_telemetry_needs_opentelemetry_xyz'" in out["msg"]
    assert float(out["msg"].rsplit("after ", 1)[1].split()[0]) < 30
