"""The router layer's import probe (dflash_router.probe_layer / probe_failure): a layer that cannot start
sglang-router is refused before the router's unit points at it. The real capture: the H200 fleet run of
2026-12-02 (bench/gpu/results/2026-12-02-h200-fleet/), whose hand-listed no_deps layer had fastapi 0.165
without opentelemetry-api; the router then died at import and the deploy only saw a refused connection."""

import os
import subprocess
import sys
from pathlib import Path

import dflash_router as rt

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
    assert names.index("Router | remember its layer and give the instances' fact back") < probe
    assert probe < names.index("Router | render sglang-router.service")
    assert tasks[probe]["dflash_router"]["python"] == "{{ __dflash_router_layer.path }}/bin/python"
