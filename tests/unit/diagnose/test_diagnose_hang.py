"""Start-up hangs (cause startup_hang): the last stage reached, the silence the wait measured, the remedy of
that stage with the host's topology; a real fixture per stage (tests/fixtures/logs/startup_hang/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.module_utils.dflash_diagnose import hang
from ansible.module_utils.dflash_diagnose.engine import diagnose_file, diagnose_text
from gpu_records import record_text

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
HANGS = [e for e in yaml.safe_load((FIXTURES / "index.yml").read_text())["fixtures"] if e["cause"] == "startup_hang"]
# hangs a line names (the compaction stall row, sglang's watchdog): what follows them does not change the answer
NAMED = ("compaction stalls", "atchdog timeout (")
QUIET = [e for e in HANGS if not any(w in (FIXTURES / e["file"]).read_text(errors="replace") for w in NAMED)]
KILL_NOISE = ("[2026-05-23 10:15:04] Received sigquit from a child process. It usually means the child failed.\n"
              "[2026-05-23 10:15:04] Rank 0 scheduler is dead. Please check if there are relevant logs.\nKilled\n")


def test_a_real_hang_fixture_for_every_stage():
    real = {e["stage"] for e in HANGS if e["source"].startswith("https://")}
    assert set(hang.ORDER) <= real, set(hang.ORDER) - real
    assert all(e.get("stage") for e in HANGS)


@pytest.mark.parametrize("entry", HANGS, ids=[e["file"] for e in HANGS])
def test_hang_fixture_names_its_stage(entry):
    r = diagnose_file(str(FIXTURES / entry["file"]))
    assert (r["cause"], r["stage"]) == ("startup_hang", entry["stage"]), r["summary"]
    # the remedy is the stage's, not a generic one
    assert r["remedy"] and r["evidence"]


@pytest.mark.parametrize("entry", QUIET, ids=[e["file"] for e in QUIET])
def test_hang_with_the_silence_the_wait_measured(entry):
    text = (FIXTURES / entry["file"]).read_text(errors="replace")
    r = diagnose_text(text, silent_seconds=431.6)
    assert r["cause"] == "startup_hang" and r["stage"] == entry["stage"]
    assert "silent for 7 min 12 s" in r["summary"] and r["silent_seconds"] == 431.6
    # without the wait's silence the summary says what it cannot know
    assert "if the server has been silent since" in diagnose_text(text)["summary"]


@pytest.mark.parametrize("entry", QUIET, ids=[e["file"] for e in QUIET])
def test_a_kill_after_the_stage_is_the_kill_with_the_stage_named(entry):
    text = (FIXTURES / entry["file"]).read_text(errors="replace")
    r = diagnose_text(text + "\n" + KILL_NOISE)
    assert r["cause"] == "unknown" and "first error: Killed" in r["summary"]
    assert r["stage"] == entry["stage"] and f"({entry['stage']})" in r["summary"]


def test_a_watchdog_with_no_start_up_line_before_it_takes_the_stage_from_its_stack_dump():
    # sglang#26137: the excerpt starts at the watchdog; the dumped stack's innermost frames are the capture
    path = FIXTURES / "startup_hang/sglang-26137-decode-capture-watchdog-hang.log"
    for text in (path.read_text(), path.read_text() + KILL_NOISE):
        r = diagnose_text(text)
        assert (r["cause"], r["stage"]) == ("startup_hang", "graph_capture"), r["summary"]
    assert hang.stage_from_stack(["load_weights (model_runner.py:700)", "capture (cuda_graph_runner.py:1)"]) == "weights"
    assert hang.stage_from_stack(["run_batch (scheduler.py:10)"]) is None


def test_a_warning_the_start_up_went_past_does_not_outrank_the_hang():
    # vllm#19204: NCCL RAS's "bind failed: Address already in use" early in an NCCL trace that goes on, then stops
    path = FIXTURES / "startup_hang/vllm-19204-nccl-trace-hang-ras-bind.log"
    r = diagnose_text(path.read_text(), silent_seconds=600)
    assert (r["cause"], r["stage"]) == ("startup_hang", "nccl"), r["summary"]
    # the same warning with nothing after it is the hint it was before
    first = path.read_text().splitlines()[0]
    assert diagnose_text(first + "\n")["cause"] == "port_in_use"


def test_the_compaction_stall_is_read_from_its_line_whatever_follows():
    path = FIXTURES / "startup_hang/halogen-10-kv-pool-compaction-stall.log"
    r = diagnose_text(path.read_text() + KILL_NOISE)
    assert (r["cause"], r["stage"]) == ("startup_hang", "kv_pool")
    assert "compact_memory" in r["remedy"] and "11783" in r["summary"]


@pytest.mark.parametrize(("log", "stage"), [
    # sglang 0.5.x markers, oldest first; the newest one decides
    ("[2026-11-30 08:00:01 TP0] Init torch distributed begin.\n", "distributed_init"),
    ("[2026-11-30 08:00:01 TP0] Init torch distributed begin.\n[2026-11-30 08:00:02 TP0] sglang is using nccl==2.27.3\n",
     "nccl"),
    ("[2026-11-30 08:00:04 TP0] Init torch distributed ends. mem usage=0.51 GB\n", "weights"),
    ("[2026-11-30 08:00:05 TP0] Load weight begin. avail mem=78.62 GB\n", "weights"),
    ("[2026-11-30 08:01:05 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16\n", "kv_pool"),
    ("[2026-11-30 08:01:06 TP0] KV Cache is allocated. #tokens: 1048576\n", "kv_pool"),
    ("[2026-11-30 08:01:06 TP0] Memory pool end. avail mem=10.02 GB\n", "graph_capture"),
    ("Capturing batches (bs=160 avail_mem=9.81 GB):  12%|█▏        | 3/25 [00:02<00:19,  1.14it/s]\n",
     "graph_capture"),
    ("[2026-11-30 08:02:00 TP0] Capture cuda graph end. Time elapsed: 55.1 s.\n", "warmup"),
    ("INFO:     Uvicorn running on http://127.0.0.1:30001 (Press CTRL+C to quit)\n", "warmup"),
    # vLLM's wording
    ("INFO 08-31 09:50:46 pynccl.py:63] vLLM is using nccl==2.20.5\n", "nccl"),
    ("INFO 08-12 14:54:48 model_runner.py:720] Starting to load model google/gemma-2-2b...\n", "weights"),
    ("INFO 08-12 14:55:48 model_runner.py:732] Loading model weights took 4.9 GB\n", "kv_pool"),
    ("INFO 08-12 14:55:50 gpu_executor.py:102] # GPU blocks: 9000, # CPU blocks: 2048\n", "graph_capture"),
])
def test_stage_markers_across_versions(log, stage):
    r = diagnose_text(log, silent_seconds=600)
    assert (r["cause"], r["stage"]) == ("startup_hang", stage), r["summary"]


def test_a_log_that_stops_after_a_finished_step_is_no_hang_without_the_silence():
    log = ("[2026-11-30 08:04:41] Capture cuda graph begin. This can take up to several minutes.\n"
           "[2026-11-30 08:06:00] Capture cuda graph end. Time elapsed: 79.07 s.\n")
    assert diagnose_text(log)["cause"] == "unknown"
    r = diagnose_text(log, silent_seconds=900)
    assert (r["cause"], r["stage"]) == ("startup_hang", "warmup") and "silent for 15 min 0 s" in r["summary"]


def test_silence_without_any_stage_line_is_a_hang_before_the_first_stage():
    r = diagnose_text("", silent_seconds=120)
    assert (r["cause"], r["stage"]) == ("startup_hang", "other")
    assert "names no start-up stage" in r["summary"] and "systemctl cat" in r["remedy"]
    assert diagnose_text("")["cause"] == "unknown"


def test_ready_or_an_error_is_never_a_hang():
    ready = "[2026-11-30 08:06:10] The server is fired up and ready to roll!\n"
    assert diagnose_text("Load weight begin.\n" + ready, silent_seconds=600)["cause"] == "unknown"
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert diagnose_text("Load weight begin.\n" + oom, silent_seconds=600)["cause"] == "cuda_oom"


def test_nccl_remedy_names_the_interface_and_the_hosts_topology():
    log = (FIXTURES / "startup_hang/vllm-8058-tp2-hang-nccl-bootstrap.log").read_text()
    fp = {"gpus": [{"index": 0, "name": "NVIDIA GeForce RTX 4090", "sm": "8.9"},
                   {"index": 1, "name": "NVIDIA GeForce RTX 4090", "sm": "8.9"}],
          "topology": {"links": {"0-1": "SYS"}, "p2p": {"0-1": "NS"}, "nics": 0}}
    r = diagnose_text(log, fingerprint=fp, silent_seconds=300)
    remedy = r["remedy"]
    assert "NCCL bootstraps over eno1" in remedy and "NCCL_SOCKET_IFNAME" in remedy
    assert "no peer-to-peer between GPUs 0-1 (NS): NCCL_P2P_DISABLE=1" in remedy
    assert "across CPU sockets" in remedy and "lists no RDMA NIC: NCCL_IB_DISABLE=1" in remedy
    assert "--shm-size" in remedy and "/dev/shm" in remedy
    assert "2 x NVIDIA GeForce RTX 4090 (SM 8.9)" in r["summary"]


def test_multi_node_nccl_hang_names_the_rendezvous():
    r = diagnose_file(str(FIXTURES / "startup_hang/sglang-7478-2node-ipv6-hang-before-weights.log"))
    assert "node-0.company.net:20000 (`--dist-init-addr`)" in r["remedy"]
    assert "enxa088c2393978" in r["remedy"] and "(now enx)" in r["remedy"]


def test_warmup_hang_with_the_http_server_up_needs_the_silence():
    log = ("[2026-11-30 08:06:00] INFO:     Uvicorn running on http://127.0.0.1:30001 (Press CTRL+C to quit)\n"
           "[2026-11-30 08:06:01 TP0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0\n")
    assert diagnose_text(log)["cause"] == "unknown"  # "Uvicorn running" reads as up
    r = diagnose_text(log, silent_seconds=400)
    assert (r["cause"], r["stage"]) == ("startup_hang", "warmup") and "--disable-custom-all-reduce" in r["remedy"]


@pytest.mark.parametrize(("cut", "stage"), [
    ("Init torch distributed begin", "distributed_init"), ("Init torch distributed ends", "weights"),
    ("Load weight begin", "weights"), ("Load weight end", "kv_pool"), ("KV Cache is allocated", "kv_pool"),
    ("Memory pool end", "graph_capture"), ("Capture cuda graph begin", "graph_capture"),
    ("Capture piecewise CUDA graph begin", "graph_capture"),
])
def test_a_real_sglang_start_up_cut_at_each_stage(cut, stage):
    """This project's recorded sglang 0.5.11 start-up on the H200, cut after a stage line: a start that hangs
    there (the wait measured 10 minutes of silence) is read in that stage."""
    log = record_text("2026-11-30-e2e2", "server-startup.log")
    end = log.index("\n", log.index(cut))
    r = diagnose_text(log[: end + 1], silent_seconds=600)
    assert (r["cause"], r["stage"]) == ("startup_hang", stage), r["summary"]


@pytest.mark.parametrize(("line", "stage"), [
    # sglang's watchdog, in the wordings of its versions; the stage comes from the lines before it
    ("[2025-03-10 16:26:32 TP0] Watchdog timeout (self.watchdog_timeout=300)", "warmup"),
    ("[2026-01-01 10:05:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "warmup"),
])
def test_sglangs_watchdog_names_a_hang_even_when_a_kill_follows(line, stage):
    log = (FIXTURES / "startup_hang/sglang-4257-tp2-stuck-at-warmup-prefill.log").read_text()
    r = diagnose_text(log + line + "\n" + KILL_NOISE)
    assert (r["cause"], r["stage"]) == ("startup_hang", stage), r["summary"]
    assert "did not move for 300 s" in r["summary"] and "--disable-custom-all-reduce" in r["remedy"]


def test_a_watchdog_after_the_server_was_up_is_a_hang_while_serving():
    log = ("[2026-01-01 10:00:00] The server is fired up and ready to roll!\n"
           "[2026-01-01 11:00:00 TP0] Watchdog timeout (self.watchdog_timeout=300)\n")
    r = diagnose_text(log)
    assert (r["cause"], r["stage"]) == ("startup_hang", "other") and "serving, after the start-up" in r["summary"]
