"""A run folder rendered end to end from real measurements: three lab stand-in servers (NONE, DDTREE
budget 7/top-k 1, budget 15/top-k 8) measured by the benchmark client, and a server that crashed with
the lab's CUDA OOM log (diagnosed by dflash_diagnose): tables, charts (valid PNGs carrying their series),
report.md, report.tex (+ PDF where pdflatex is installed), compare_to by run and by release id."""

import json
import pathlib
import shutil

import pytest
from ansible.module_utils.dflash_bench import charts as ch
from ansible.module_utils.dflash_bench import client as cl
from ansible.module_utils.dflash_bench import matrix as mx
from ansible.module_utils.dflash_bench import report as rp
from ansible.module_utils.dflash_bench import results as res
from ansible.module_utils.dflash_diagnose.engine import diagnose_text
from test_bench_client import start_standin

ROOT = pathlib.Path(__file__).resolve().parents[3]
CONFIGS = mx.normalize([{"algorithm": "NONE"}, {"name": "oom", "algorithm": "DFLASH"}],
                       {"algorithm": ["DDTREE"], "budget": [7, 15], "topk": [1, 8]})[:4]
SERVED = {"none": (), "ddtree-b7-k1": ("--speculative-ddtree-budget", "7", "--speculative-ddtree-topk", "1"),
          "ddtree-b7-k8": ("--speculative-ddtree-budget", "7", "--speculative-ddtree-topk", "8")}
STAND_IN = "a stand-in: canned output"
META = {"run": "r1", "host": "ct200", "release_id": "20261201T000000-deadbeef", "fingerprint_digest": "ab" * 32,
        "stand_in": STAND_IN}


def entry(cfg, args):
    return dict(cfg, args=["--model-path", "/m", "--api-key", "s3cret", *args], env={"HF_TOKEN": "x", "A": "1"},
                gpus=[1], port=30100, unit=f"dflash-bench-{cfg['name']}.service")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    waves = mx.waves(CONFIGS, 4)
    cells = mx.cells(waves, ["seeds", "agent"], [1, 2])
    configs, measured = {}, []
    for cfg in CONFIGS:
        args = SERVED.get(cfg["name"], ())
        configs[cfg["name"]] = entry(cfg, args)
        if cfg["name"] == "oom":
            continue
        spec = ("--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "/d") if args else ()
        proc, url = start_standin(*spec, *args)
        try:
            got = {c["id"]: cl.run_cell(url, c["workload"], c["concurrency"],
                                        {"seeds_max_tokens": 16, "agent": {"turns": 2, "max_tokens": 8}}, 30)
                   for c in cells if c["config"] == cfg["name"]}
        finally:
            proc.terminate()
            proc.wait(10)
        measured.append({"__dflash_bench_cfg": configs[cfg["name"]], "cells": got})
    log = (ROOT / "files/lab/faults/cuda_oom.log").read_text()
    failures = {"oom": {"stage": "start", "msg": "ct200: instance oom: the unit failed after 4.8 s",
                        "diagnosis": diagnose_text(log, source="journalctl -u dflash-bench-oom.service")}}
    run = root / "r1"
    (run / "cells").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps(dict(META, release={"id": META["release_id"], "sglang": "0.5.11"},
                                                  base_instance="main", workloads=["seeds", "agent"],
                                                  plan={"configurations": [res.config_view(c)
                                                                           for c in configs.values()]})))
    for rec in res.wave_records(META, configs, cells, measured, failures):
        (run / "cells" / (rec["cell"] + ".json")).write_text(json.dumps(rec))
    return run


@pytest.fixture(scope="module")
def rendered(run_dir):
    """Rendered once (charts, and the PDF where pdflatex is installed)."""
    return rp.render_run(str(run_dir), pdf=shutil.which("pdflatex") is not None)


def test_every_cell_is_in_the_tables(run_dir, rendered):
    s = rendered
    assert s["cells"] == 16 and s["standin"].startswith("dflash-deploy lab stand-in")  # the server's own words
    rows = {r["cell"]: r for r in s["rows"]}
    assert set(rows) == {mx.cell_id(c, w, k) for c in ("none", "oom", "ddtree-b7-k1", "ddtree-b7-k8")
                         for w in ("seeds", "agent") for k in (1, 2)}
    assert all(rows[f"ddtree-b7-k1__{w}__c{k}"]["accept_length"] > 1 for w in ("seeds", "agent") for k in (1, 2))
    assert rows["none__seeds__c1"]["accept_length"] is None and rows["none__seeds__c1"]["output_tok_s"] > 0
    assert s["failed"] == [f"oom__{w}__c{k}" for w in ("seeds", "agent") for k in (1, 2)]
    assert rows["oom__seeds__c1"]["cause"].startswith("cuda_oom: ")
    csv_lines = (run_dir / "results.csv").read_text().splitlines()
    assert len(csv_lines) == 17 and csv_lines[0].startswith("cell,config,algorithm,budget,topk")
    req = (run_dir / "cells" / "ddtree-b7-k8__agent__c2.csv").read_text().splitlines()
    assert len(req) == 1 + 2 * 2 and req[0].startswith("label,worker,turn,ok")


def test_secrets_never_reach_the_files(run_dir, rendered):
    for f in run_dir.rglob("*"):
        if f.is_file() and f.suffix in (".json", ".csv", ".md", ".tex"):
            assert "s3cret" not in f.read_text(), f
    rec = json.loads((run_dir / "cells" / "none__seeds__c1.json").read_text())
    assert rec["config"]["args"][2:4] == ["--api-key", "<redacted>"] and rec["config"]["env"]["HF_TOKEN"] == "<redacted>"


def test_charts_are_pngs_with_their_series(run_dir, rendered):
    s = rendered
    assert set(s["charts"]) == {"throughput", "heatmap", "concurrency"}
    for name in ("throughput", "heatmap", "concurrency"):
        desc = json.loads(ch.png_text(run_dir / "charts" / f"{name}.png")["Description"])
        assert desc["standin"] is True and desc["series"] == s["charts"][name]["series"]
    thr = s["charts"]["throughput"]["series"]
    assert "seeds: tok/s c1" in thr and "agent: accept length c2" in thr
    assert s["charts"]["heatmap"]["series"] == ["seeds c1", "seeds c2", "agent c1", "agent c2"]
    assert "agent: ddtree-b7-k8" in s["charts"]["concurrency"]["series"]
    bad = run_dir / "bad.png"
    bad.write_bytes((run_dir / "charts" / "heatmap.png").read_bytes()[:-20])
    with pytest.raises(ValueError):
        ch.png_text(bad)


def test_markdown_and_latex(run_dir, rendered):
    md = (run_dir / "report.md").read_text()
    assert ch.STANDIN_STAMP in md and "## Failed cells" in md and "`oom__seeds__c1`: cuda_oom" in md
    assert "![throughput](charts/throughput.png)" in md and "| ddtree-b7-k1 | seeds | 1 | ok |" in md
    tex = (run_dir / "report.tex").read_text()
    assert r"\begin{longtable}" in tex and r"ddtree-b7-k1" in tex and "charts/heatmap.png" in tex
    assert r"\_" in tex and "STAND-IN FIGURES" in tex and "it says: dflash-deploy lab stand-in" in tex


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="no pdflatex on this machine (apt-get install texlive-latex-base)")
def test_pdf(rendered):
    s = rendered
    assert s["pdf"] and pathlib.Path(s["pdf"]).read_bytes().startswith(b"%PDF")


def test_compare_to_a_run_and_to_a_release(run_dir, rendered):
    other = run_dir.parent / "r0"
    shutil.copytree(run_dir, other, dirs_exist_ok=True)
    meta = json.loads((other / "run.json").read_text())
    meta.update(run="r0", started="2026-11-30T00:00:00Z")
    (other / "run.json").write_text(json.dumps(meta))
    for f in (other / "cells").glob("*.json"):
        rec = json.loads(f.read_text())
        if rec.get("summary", {}).get("output_tok_s"):
            rec["summary"]["output_tok_s"] = rec["summary"]["output_tok_s"] / 2
        f.write_text(json.dumps(rec))
    s = rp.render_run(str(run_dir), compare_to="r0", pdf=False, charts=False)
    by = {(c["config"], c["workload"], c["concurrency"]): c for c in s["compare"]}
    assert by[("none", "seeds", 1)]["tok_s_ratio"] == pytest.approx(2.0, abs=0.01)
    assert by[("oom", "seeds", 1)]["tok_s_ratio"] is None
    assert "## Compared with r0" in (run_dir / "report.md").read_text()
    s2 = rp.render_run(str(run_dir), compare_to=META["release_id"], pdf=False, charts=False)
    assert s2["compare_name"].startswith("r0 ")  # the newest other run of that release
    s3 = rp.render_run(str(run_dir), compare_to="nothing-like-it", pdf=False, charts=False)
    assert s3["compare"] is None and "no run folder and no run of that release" in s3["warnings"][0]


def test_a_cell_says_stand_in_only_when_its_server_says_so():
    """No inventory flag: the record takes stand_in from the server's own /get_server_info (after the
    cell, else before it); a real sglang's info has no such key."""
    run = {"run": "r", "host": "h", "release_id": "x"}
    entry = {"name": "c", "algorithm": "DFLASH"}
    cell = {"id": "c-w-1", "workload": "w", "concurrency": 1}

    def measured(info_after=None, info_before=None):
        return {"status": "ok", "server_after": {"server_info": info_after} if info_after is not None else {},
                "server_before": {"server_info": info_before} if info_before is not None else {}}

    assert res.cell_record(run, entry, cell, measured({"stand_in": "x"}))["stand_in"] == "x"
    assert res.cell_record(run, entry, cell, measured(None, {"stand_in": "x"}))["stand_in"] == "x"
    assert res.cell_record(run, entry, cell, measured({"version": "0.5.11"}))["stand_in"] is None
    assert res.cell_record(run, {**entry}, cell, failure={"msg": "never served"})["stand_in"] is None


def test_render_refuses_to_empty_a_run_whose_cells_are_gone(run_dir, rendered, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    before = (copy / "results.json").read_text()
    shutil.rmtree(copy / "cells")
    with pytest.raises(ValueError, match="no cells"):
        rp.render_run(str(copy), pdf=False, charts=False)
    assert (copy / "results.json").read_text() == before  # nothing rewritten


def test_repeats_give_medians_and_spread_on_the_h200_matrix(tmp_path):
    """The two H200 runs of 2026-12-02 (gpu-harness/records/2026-12-02-h200-bench) as the two repeats of one run."""
    import io
    import tarfile

    from gpu_records import record_file

    rec = "2026-12-02-h200-bench"
    run = tmp_path / "h200"
    (run / "cells").mkdir(parents=True)
    (run / "run.json").write_bytes(record_file(rec, "run-1/run.json"))
    figures = {}
    for rep, name in ((1, "run-1"), (2, "run-2")):
        with tarfile.open(fileobj=io.BytesIO(record_file(rec, f"{name}/cells.tar.xz"))) as tf:
            for m in tf.getmembers():
                if m.name.endswith(".json"):
                    d = json.load(tf.extractfile(m))
                    key = (d["config"]["name"], d["workload"], d["concurrency"])
                    figures.setdefault(key, []).append(d["summary"]["output_tok_s"])
                    d["repeat"], d["cell"] = rep, d["cell"] + f"__r{rep}"
                    (run / "cells" / (d["cell"] + ".json")).write_text(json.dumps(d))
    s = rp.render_run(str(run), pdf=False)
    assert len(s["rows"]) == 96 and len(s["spread"]) == 48 and not s["failed"]
    # the bars are the medians, the whiskers the range of the repeats
    series = json.loads(ch.png_text(str(run / "charts" / "throughput.png"))["Description"])["series"]
    assert "seeds: tok/s c4 min-max over repeats" in series and "seeds: tok/s c4" in series
    for sp in s["spread"]:
        both = figures[(sp["config"], sp["workload"], sp["concurrency"])]
        assert sp["measured"] == sp["repeats"] == 2
        assert (sp["tok_s_min"], sp["tok_s_max"]) == (min(both), max(both))
        assert sp["tok_s_median"] == pytest.approx(sum(both) / 2)
        assert sp["spread"] == pytest.approx(max(both) / min(both), abs=1e-3)
    worst = max(s["spread"], key=lambda x: x["spread"])
    assert (worst["config"], worst["workload"], worst["concurrency"]) == ("ddtree-b15-k1", "seeds", 4)
    md = (run / "report.md").read_text()
    assert "## Repeats: median and spread per cell" in md and "## Results (every repeat)" in md
    assert "| ddtree-b15-k1 | seeds | 4 | 2 of 2 | 466.1 | 334.9 - 597.3 | 1.783 |" in md
    assert "Repeats: median and spread" in (run / "report.tex").read_text()
    csv_head = (run / "results.csv").read_text().splitlines()[0].split(",")
    assert csv_head[csv_head.index("concurrency") + 1] == "repeat"
