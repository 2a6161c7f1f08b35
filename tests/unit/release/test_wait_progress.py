"""Start-up progress: the server's latest start-up stage from its log, shown at a bounded interval
while dflash_wait waits (action_plugins/dflash_wait.py prints it between chunks of the wait)."""

from __future__ import annotations

import json
import pathlib
import socket
import sys

from ansible.module_utils.dflash_release import startup as st
from ansible_play import run_play
from gpu_records import record_text

ROOT = pathlib.Path(__file__).resolve().parents[3]
STANDIN = ROOT / "files" / "lab" / "sglang_standin.py"
# real sglang 0.5.11 start-up of the toolkit's DFLASH unit on the H200 (the runner's log of the unit), kept
# with the run's other raw logs in gpu-harness/records/2026-11-30-e2e2/raw.tar.xz


def h200_log() -> str:
    return record_text("2026-11-30-e2e2", "server-startup.log")


def test_progress_lines_from_a_recorded_real_sglang_start_up():
    lines = st.replay(h200_log(), interval=20)
    shown = [f"{int(t)} s: {stage}" for t, stage in lines]
    # every 20 s of the 4.5 minutes the server took, what the play shows
    assert shown[0] == "20 s: arguments parsed"
    assert "40 s: capturing CUDA graphs 0% (0/4 batch sizes)" in shown
    assert "120 s: compiling piecewise CUDA graphs 0% (0/58)" in shown
    assert "140 s: HTTP server up, warming up" in shown
    assert shown[-1].endswith("ready")
    assert len(shown) == 12  # bounded: one line per interval, not one per log line (the log has 2000+)


def test_stages_of_real_log_lines():
    log = h200_log()
    assert st.latest_stage(log) == "ready"
    head = log[: log.index("Capture cuda graph end")]
    # the tqdm bar's carriage-return updates count: the newest one is the stage
    assert st.latest_stage(head) == "capturing CUDA graphs 100% (4/4 batch sizes)"
    assert st.latest_stage(log[: log.index("KV Cache is allocated")]).startswith("weights loaded (Qwen3ForCausalLM)")
    cut = log[: log.index("Memory pool end")]
    assert st.latest_stage(cut) == "KV pool allocated (542915 tokens)"
    assert st.stage_of("Loading safetensors checkpoint shards:  62% Completed | 5/8 [00:17<00:10,  3.4s/it]") == \
        "loading weights 62% (5/8 shards)"
    assert st.latest_stage("nothing yet\n") is None
    assert st.progress_line("main", 41.7, 900, None) == "main: starting for 41 s (timeout 900 s): no start-up stage in the log yet"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wait_prints_progress_between_chunks(tmp_path):
    port = free_port()
    units = tmp_path / "units"
    units.mkdir()
    (units / "dflash-slow.service").write_text(
        "[Service]\nEnvironment=DFLASH_STANDIN_FAULT=slow DFLASH_STANDIN_START_DELAY=3.5\n"
        f"ExecStart={sys.executable} {STANDIN} --model-path /m --port {port}\n")
    common = {"service_manager": "runner", "unit_dir": str(units), "log_dir": str(tmp_path / "log"),
              "run_dir": str(tmp_path / "run"), "timeout": 60, "progress_interval": 1}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"dflash_wait": dict(common, instances=[{"name": "slow", "port": port}]), "register": "w"},
        {"dflash_service": {"name": ["dflash-slow.service"], "state": "stopped", "service_manager": "runner", "unit_dir": str(units),
                           "log_dir": str(tmp_path / "log"), "run_dir": str(tmp_path / "run")}},
        {"ansible.builtin.copy": {"dest": str(tmp_path / "out.json"), "content": "{{ w | to_json }}", "mode": "0644"}},
    ]}]
    r = run_play(play, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    progress = [ln for ln in r.stdout.splitlines() if ln.startswith("localhost: slow: starting for")]
    # each chunk is a module call (about a second here): 3.5 s slow start, then /health's 1 s probe
    assert 1 <= len(progress) <= 8, r.stdout
    assert progress[0].endswith("(timeout 60 s): HTTP server up, warming up")
    out = json.loads((tmp_path / "out.json").read_text())
    # one wait, counted from the restart: the chunks are invisible in the result
    assert out["verdict"] == "healthy" and out["seconds"] >= 3.5
    assert out["instances"]["slow"]["seconds"] >= 3.5
    assert out["restart"]["backend"] == "runner"


def test_wait_fails_fast_when_the_log_says_ready_but_the_health_url_does_not_reach_it(tmp_path):
    port, wrong = free_port(), free_port()
    units = tmp_path / "units"
    units.mkdir()
    (units / "dflash-elsewhere.service").write_text(
        f"[Service]\nExecStart={sys.executable} {STANDIN} --model-path /m --port {port}\n")
    common = {"service_manager": "runner", "unit_dir": str(units), "log_dir": str(tmp_path / "log"),
              "run_dir": str(tmp_path / "run"), "timeout": 120, "progress_interval": 1, "ready_grace": 3}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        # polled on a port nothing listens on: the log says ready, /health never answers
        {"dflash_wait": dict(common, instances=[{"name": "elsewhere", "port": wrong,
                                                  "base_url": f"http://127.0.0.1:{wrong}"}]),
         "register": "w", "ignore_errors": True},
        {"dflash_service": {"name": ["dflash-elsewhere.service"], "state": "stopped", "service_manager": "runner", "unit_dir": str(units),
                           "log_dir": str(tmp_path / "log"), "run_dir": str(tmp_path / "run")}},
        {"ansible.builtin.copy": {"dest": str(tmp_path / "out.json"), "content": "{{ w | to_json }}", "mode": "0644"}},
    ]}]
    r = run_play(play, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    st = out["instances"]["elsewhere"]
    assert out["failed"] and st["verdict"] == "unanswered", out
    assert st["seconds"] < 60  # the grace (3 s) after the ready line, not the 120 s timeout
    assert "its log says it is up and ready, but /health gave no 200" in out["msg"]
