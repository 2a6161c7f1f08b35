"""Planning a run on a host: the H200 release's real manifest and the H200's real fingerprint captures
(tests/fixtures/captures/h200: idle; h200-busy-foreign: a torch process on GPU 0)."""

import json
import pathlib

import pytest
from ansible.module_utils.dflash_bench import matrix as mx
from ansible.module_utils.dflash_bench import plan as bp
from ansible.module_utils.dflash_common.argv import get_flag
from ansible.module_utils.dflash_fingerprint import collect, merge
from gpu_records import record_file

ROOT = pathlib.Path(__file__).resolve().parents[3]
MANIFEST = json.loads(record_file("2026-11-30-e2e2", "manifest.json"))  # the H200 release (gpu-harness/e2e.sh)
IDLE = merge.fingerprint_from_raw(collect.read_capture(ROOT / "tests/fixtures/captures/h200"))
BUSY = merge.fingerprint_from_raw(collect.read_capture(ROOT / "tests/fixtures/captures/h200-busy-foreign"))
LISTENERS = [{"port": 30001, "addr": "0.0.0.0", "pid": 1234}, {"port": 30100, "addr": "127.0.0.1", "pid": 99}]
DRAFTS = {"/srv/models/draft": {"block_size": 16, "block_size_source": "config.json dflash_config.block_size"},
          "/srv/models/draft32": {"block_size": 32, "block_size_source": "config.json dflash_config.block_size"}}
OPTS = {"workloads": ["seeds", "agent"], "concurrency": [1, 4], "port_range": [30100, 30199], "parallel": 6,
        "extra_args": ["--sleep-on-idle"], "start_timeout": 300, "cell_timeout": 60}


def run_plan(configs, fingerprint=IDLE, sweep=None, **opts):
    return bp.plan("h200", MANIFEST, "/opt/dflash/releases/" + MANIFEST["id"], mx.normalize(configs, sweep, "h200"),
                   fingerprint, LISTENERS, DRAFTS, dict(OPTS, **opts))


def test_the_h200_matrix_on_one_idle_gpu():
    p = run_plan([{"algorithm": "NONE"}, {"algorithm": "DFLASH"}, {"running": "h200-dflash"}],
                 sweep={"algorithm": ["DDTREE"], "budget": [7, 15], "topk": [1, 8]})
    assert p["release"]["id"] == MANIFEST["id"] and p["release"]["fingerprint_digest"] == MANIFEST["fingerprint_digest"]
    assert p["base"]["name"] == "h200-dflash" and p["gpu_pool"] == [0]
    names = [c["name"] for c in p["configurations"]]
    assert names[0] == "running-h200-dflash" and p["waves"][0] == ["running-h200-dflash"]
    assert p["waves"][1] == ["none", "dflash", "ddtree-b7-k1", "ddtree-b7-k8", "ddtree-b15-k1", "ddtree-b15-k8"]
    started = p["configurations"][1:]
    assert [c["port"] for c in started] == [30101, 30102, 30103, 30104, 30105, 30106]  # 30100 is taken
    assert all(c["gpus"] == [0] and c["unit"] == f"dflash-bench-{c['name']}.service" for c in started)
    assert "DFLASH_ARGS=" in started[0]["env_text"] and "--sleep-on-idle" in started[0]["args"]
    running = p["configurations"][0]
    assert running["base_url"] == "http://127.0.0.1:30001" and running["algorithm"] == "DFLASH"
    assert len(p["cells"]) == 7 * 2 * 2
    assert p["lifetime_s"] == 300 + 60 * 4 * 6 + 120


def test_every_host_error_at_once_before_anything_starts():
    with pytest.raises(mx.MatrixError) as exc:
        run_plan([{"algorithm": "DDTREE", "budget": 31, "topk": 8}, {"running": "main"},
                  {"algorithm": "DFLASH", "tp": 2}], fingerprint=BUSY, workloads=["seeds", "chat"],
                 port_range=[30100, 30101])
    text = "\n".join(exc.value.errors)
    assert "h200: dflash_bench_gpus: no free GPU on the host (GPUs: [0])" in text
    assert "h200: configuration running-main: field 'running': release " + MANIFEST["id"] in text
    assert "h200: dflash_bench_workloads: 'chat' is not one of seeds, random, agent" in text
    assert "h200: dflash_bench_ports: 2 free ports needed in 30100-30101, 1 free" in text


def test_a_busy_gpu_shared_on_request_and_budget_against_the_draft_block():
    with pytest.raises(mx.MatrixError) as exc:
        run_plan([{"algorithm": "DDTREE", "budget": 31, "topk": 8}], fingerprint=BUSY, gpus=[0])
    text = "\n".join(exc.value.errors)
    assert "GPU 0" in text and "busy" in text and "dflash_bench_allow_busy_gpus: true shares it" in text
    assert ("configuration ddtree-b31-k8: field 'budget': 31 + 1 is above the draft's block 16 "
            "(/srv/models/draft/config.json)") in text
    p = run_plan([{"algorithm": "DDTREE", "budget": 31, "topk": 8, "draft_model_path": "/srv/models/draft32"}],
                 fingerprint=BUSY, gpus=[0], allow_busy_gpus=True)
    c = p["configurations"][0]
    assert c["block_size"] == 32 and get_flag(c["args"], "--speculative-draft-model-path") == "/srv/models/draft32"


def test_base_instance_and_free_gpus():
    assert bp.free_gpus(IDLE) == [0] and bp.free_gpus(BUSY) == []
    with pytest.raises(mx.MatrixError, match="'other' is not an instance of release"):
        run_plan([{"algorithm": "NONE"}], base_instance="other")
    assert bp.free_ports(LISTENERS, 30100, 30103, 2) == [30101, 30102]


def test_h200_matrix_file():
    """gpu-harness/bench_h200.yml planned against the H200 release and a busy GPU 0 (the production instance
    holds it after the deploy): the CPU dry run of gpu-harness/bench_matrix.sh."""
    import yaml

    v = yaml.safe_load((ROOT / "gpu-harness/bench_h200.yml").read_text())
    opts = {"workloads": v["dflash_bench_workloads"], "concurrency": v["dflash_bench_concurrency"],
            "port_range": [30100, 30199], "parallel": v["dflash_bench_parallel"], "gpus": v["dflash_bench_gpus"],
            "allow_busy_gpus": v["dflash_bench_allow_busy_gpus"], "extra_args": v["dflash_bench_extra_args"],
            "start_timeout": v["dflash_bench_start_timeout"], "cell_timeout": v["dflash_bench_cell_timeout"],
            "base_instance": v["dflash_bench_base_instance"]}
    p = bp.plan("localhost", MANIFEST, "/opt/dflash/releases/x", mx.normalize(v["dflash_bench_configurations"]),
                BUSY, LISTENERS, DRAFTS, opts)
    assert [len(w) for w in p["waves"]] == [1, 11] and len(p["cells"]) == 12 * 2 * 2
    started = p["configurations"][1:]
    assert all(c["gpus"] == [0] for c in started) and len({c["port"] for c in started}) == 11
    for c in started:
        assert get_flag(c["args"], "--mem-fraction-static") == "0.95"
        assert get_flag(c["args"], "--max-total-tokens") == "16384" and get_flag(c["args"], "--sleep-on-idle") is True
    b31 = [c for c in started if c.get("budget") == 31]
    assert len(b31) == 3 and all(c["block_size"] == 32 for c in b31)
    assert p["lifetime_s"] == 330 + 40 * 4 * 11 + 120


def test_a_base_instance_of_another_sglang_version_runs_its_own_venv():
    """An instance whose sglang version is not the host's runs its version's venv (the release's manifest entry):
    the bench's servers of it do too; the host's version's keep the release's venv."""
    import copy

    m = copy.deepcopy(MANIFEST)
    m["venv"] = "/opt/dflash/layers/overlay-aaaaaaaaaaaa"
    m["instances"]["h200-dflash"].update(sglang_version="0.5.17", venv="/opt/dflash/layers/overlay-bbbbbbbbbbbb",
                                         tree_path="/opt/dflash/trees/sglang-0.5.17-bbbbbbbbbbbb")

    def plan_of(manifest):
        return bp.plan("h200", manifest, "/opt/dflash/releases/r", mx.normalize([{"algorithm": "DFLASH"}], None, "h200"),
                       IDLE, LISTENERS, DRAFTS, OPTS)

    p = plan_of(m)
    assert p["base"]["python"] == "/opt/dflash/layers/overlay-bbbbbbbbbbbb/bin/python" and p["base"]["sglang"] == "0.5.17"
    m["instances"]["h200-dflash"]["venv"] = m["venv"]
    assert plan_of(m)["base"]["python"] == "/opt/dflash/releases/r/venv/bin/python"
    assert plan_of(MANIFEST)["base"]["python"] == "/opt/dflash/releases/r/venv/bin/python"
