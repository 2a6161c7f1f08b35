"""tune.yml's report on a synthetic run of 13 configurations (records as the round module writes them): the
tables (every column in Markdown and LaTeX alike, every row complete), the banners, the choice lines, command
lines wrapped to the page, charts whose series never share a colour-marker pair, one colour scale for every
heatmap panel; and, where pdflatex and pdftotext are installed, the PDF: every table header in it and no word
past the right margin (tests/unit/bench/test_tune_report.py::test_pdf_nothing_off_the_page)."""

import itertools
import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.dflash_bench import charts as ch
from ansible.module_utils.dflash_bench import layout, palette, tune
from ansible.module_utils.dflash_bench import tune_report as trep

ROOT = Path(__file__).resolve().parents[3]
TEMPLATES = ROOT / "templates" / "tune"
NAMES = ["none", "dflash"] + [f"ddtree-b{b}-k{k}" for b in (3, 7, 15) for k in (1, 4, 8)] + [
    "ddtree-b15-k8-shadow-linear", "dflash-flashinfer"]
LOADS = [{"kind": "concurrency", "value": 2, "requests": 12}, {"kind": "rate", "value": 5.0, "requests": 12},
         {"kind": "rate", "value": 10.0, "requests": 12}]
LONG = "/srv/models/" + "a-very-long-model-folder-name-" * 6 + "target"


def config(name):
    algo = "NONE" if name == "none" else "DFLASH" if name.startswith("dflash") else "DDTREE"
    cfg = {"name": name, "algorithm": algo, "gpus": [0], "port": 30100 + NAMES.index(name),
           "unit": f"dflash-bench-{name}.service", "changes": ["--port 30001 -> 30100"]}
    args = ["--model-path", LONG, "--host", "127.0.0.1", "--port", str(cfg["port"]), "--load-format", "dummy",
            "--api-key", "s3cret"]
    if algo == "DDTREE":
        m = re.match(r"ddtree-b(\d+)-k(\d+)(-shadow-linear)?", name)
        cfg.update(budget=int(m.group(1)), topk=int(m.group(2)), mode="shadow-linear" if m.group(3) else "tree")
        args += ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", m.group(1)]
    if name.endswith("flashinfer"):
        cfg["attention_backend"] = "flashinfer"
    cfg["args"] = args
    return cfg


def requests(name, load, rnd, rng):
    """Speed grows with the configuration's index but for the last (ddtree-b15-k8-shadow-linear the fastest);
    at 10 req/s the slower ones miss the TTFT limit, the more the slower."""
    speed = 1.0 + min(NAMES.index(name), 10) / 4.0 + (2.0 if name == "ddtree-b15-k8-shadow-linear" else 0.0)
    misses = round(load["requests"] * max(0.0, 1 - speed / 5.5)) if load.get("value") == 10.0 else 0
    out = []
    for i in range(load["requests"]):
        late = load["kind"] == "rate" and i >= load["requests"] - misses
        steps = [0] + [rng.choice((1, 2, 3)) for _ in range(20)]
        r = {"ok": True, "index": i, "sent_at": i / 5.0, "ttft": (0.4 if late else 0.02) * (1 + rng.random() / 5),
             "itl": [0.01 / speed * (1 + rng.random() / 10) for _ in range(31)], "latency": 0.4 / speed,
             "completion_tokens": 32, "prompt_tokens": 20, "cached_tokens": 10, "chunks": 12,
             "chunk_tokens": [0, 2, 6, 4]}
        if name != "none":
            r.update(spec_verify_ct=12, spec_accept_length=32 / 12)
            if name.startswith("ddtree"):
                r["spec_accept_histogram"] = [steps.count(k) for k in range(4)]
        out.append(r)
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tune") / "run"
    rng = random.Random(7)
    meta = {"run": "synthetic", "host": "ct200", "release_id": "20261206T000000-deadbeef"}
    configs = [config(n) for n in NAMES]
    records = []
    for rnd in (1, 2, 3):
        for name, load in tune.round_order(NAMES, LOADS, rnd):
            reqs = requests(name, load, rnd, rng)
            records.append(tune.record(meta, configs[NAMES.index(name)], {
                "load": load, "requests": reqs, "wall_s": 2.4 + rng.random() / 5, "status": "ok",
                "server_after": {"metrics": {"spec_accept_length": 2.5}, "server_info": {"stand_in": None}}},
                rnd))
    records.append(tune.failure_record(meta, {"name": "oom", "args": []}, {
        "stage": "start", "msg": "oom: exited", "diagnosis": {"cause": "cuda_oom", "summary": "out of memory",
                                                              "remedy": "lower --mem-fraction-static"}}))
    tune.write_records(d, records)
    tune.append_round(d, {"wave": 1, "names": NAMES, "round": 3, "stop": True, "reason": "max_rounds", "lines": []})
    run = dict(meta, release={"id": meta["release_id"], "sglang": "0.5.11"}, base_instance="main",
               started="2026-12-06T10:00:00Z", finished="2026-12-06T10:20:00Z",
               command="ansible-playbook playbooks/tune.yml -l ct200 -e @" + "x" * 200 + ".yml",
               plan={"configurations": configs + [{"name": "oom", "algorithm": "DFLASH", "args": []}]},
               tune={"objective": {"ttft_ms": 100, "itl_ms": 20}, "confidence": 0.95, "ci_target": 0.05,
                     "min_rounds": 3, "max_rounds": 3, "budget": 600, "rates": [5, 10],
                     "prompts_text": "built-in: seeds: 3 prompts, 32 new tokens each; greedy, ignore_eos",
                     "refused": {"ddtree-b31-k8": "ct200: configuration ddtree-b31-k8: field 'ddtree.mode': refused"},
                     "dummy_weights": True})
    (d / "run.json").write_text(json.dumps(run))
    return d


@pytest.fixture(scope="module")
def rendered(run_dir):
    proposal = {"changed": True, "file": "inventory/host_vars/ct200.yml", "note": "in inventory/host_vars/ct200.yml",
                "diff": "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-    algorithm: DFLASH\n+    algorithm: DDTREE\n"
                        "+    " + "# " + "y" * 200 + "\n"}
    return trep.render(run_dir, TEMPLATES, proposal=proposal, pdf=shutil.which("pdflatex") is not None)


def md_tables(md):
    """{header cells: [rows of cells]} of the Markdown tables."""
    out, lines = {}, md.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            head = tuple(c.strip() for c in line.strip("|").split(" | "))
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("| "):
                    break
                rows.append([c for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))])
            out[head] = rows
    return out


def tex_headers(tex):
    """The header cells of every longtable (the row before \\endhead), TeX markup taken off."""
    out = []
    for line in tex.splitlines():
        if line.rstrip().endswith(r"\endhead"):
            cells = line.split(r"\\")[0].split(" & ")
            out.append(tuple(re.sub(r"\\textbf\{(.*)\}$", r"\1", c.strip()).replace(r"\allowbreak{}", "")
                             .replace(r"\_", "_") for c in cells))
    return out


def test_the_choice_and_the_banners(rendered):
    model = rendered["model"]
    assert model["choice"]["verdict"] == "winner" and model["choice"]["best"]["name"] == "ddtree-b15-k8-shadow-linear"
    assert model["choice"]["runner_up"]["name"] == "ddtree-b15-k8"
    assert rendered["lines"][0] == "the best goodput, its interval clear of the runner-up's."
    assert rendered["lines"][1].startswith("best: ddtree-b15-k8-shadow-linear, goodput 10 [10, 10] req/s at open loop, "
                                           "10 req/s (n=3 rounds)")
    assert model["dummy"] and not model["standin"]


def test_every_column_in_markdown_and_latex(run_dir, rendered):
    md = (run_dir / "report.md").read_text()
    tex = (run_dir / "report.tex").read_text()
    tables = rendered["summary"]["tables"]
    assert [t["id"] for t in tables] == ["goodput", "throughput", "latency", "accept"]
    found = md_tables(md)
    for t in tables:
        head = tuple(t["columns"])
        assert head in found, head
        assert all(len(r) == len(head) for r in found[head]), t["id"]
        assert len(found[head]) == len(t["rows"])
    assert tex_headers(tex) == [tuple(t["columns"]) for t in tables]
    assert "p99" in " ".join(tables[2]["columns"]) and "prefix reuse" in tables[1]["columns"]
    # n and the interval of every figure: a quantile the requests cannot bound says so
    assert "(n < 368)" in md and "[" in tables[0]["rows"][0][3]
    assert "DUMMY WEIGHTS" in md and "DUMMY WEIGHTS" in tex and "STAND-IN" not in md
    assert "s3cret" not in md and "s3cret" not in tex
    assert "`oom` (start): cuda_oom: out of memory -- remedy: lower --mem-fraction-static" in md
    assert "`ddtree-b31-k8`: ct200: configuration ddtree-b31-k8" in md
    # the step that deploys the choice, with this run's folder
    command = f"ansible-playbook playbooks/tune-apply.yml -l ct200 -e tune_run={run_dir}"
    assert f"`{command}`" in md and command.replace("_", r"\_") in tex.replace(r"\allowbreak{}", "")


def test_a_server_that_says_it_is_a_stand_in_is_stamped_with_its_words(run_dir, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(run_dir, d)
    cell = next((d / "cells").glob("dflash__*.json"))
    rec = json.loads(cell.read_text())
    rec["stand_in"] = "dflash-deploy lab stand-in (files/lab/sglang_standin.py): not SGLang, no GPU, canned output"
    cell.write_text(json.dumps(rec))
    out = trep.render(d, TEMPLATES, pdf=False, charts=False)
    assert out["model"]["standin"] == rec["stand_in"]
    md = (d / "report.md").read_text()
    assert f"> **{ch.STANDIN_STAMP}.** A stand-in server answered these requests (it says: {rec['stand_in']})" in md
    assert "STAND-IN FIGURES" in (d / "report.tex").read_text()


def verbatim_lines(tex):
    out, inside = [], False
    for line in tex.splitlines():
        if line.startswith(r"\begin{verbatim}"):
            inside = True
        elif line.startswith(r"\end{verbatim}"):
            inside = False
        elif inside:
            out.append(line)
    return out


def test_long_lines_are_wrapped(run_dir):
    tex = (run_dir / "report.tex").read_text()
    lines = verbatim_lines(tex)
    assert lines and max(len(x) for x in lines) <= trep.TEX_WIDTH
    assert any(x.endswith(" \\") for x in lines)  # shell continuation lines
    # report.md's command lines (the diff block is the file's own lines: it is applied, not read)
    fence, code = None, []
    for line in (run_dir / "report.md").read_text().splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:]
        elif fence == "":
            code.append(line)
    assert code and max(len(x) for x in code) <= trep.MD_WIDTH
    words = ["python", "-m", "x" * 300, "--flag", "v"]
    wrapped = layout.wrap_command(words, 80)
    assert all(len(x) <= 80 for x in wrapped)
    # the shell reads the wrapped lines back as the same command
    out = subprocess.run(["bash", "-c", "printf '%s\\n' " + "\n".join(wrapped)], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == words


def test_column_widths_fit_the_line():
    t = {"columns": ["configuration", "load", "TTFT p99"], "rows": [["ddtree-b15-k8-flashinfer",
                                                                      "open loop, 10 req/s", "10.8 (n < 368)"]]}
    w = layout.col_widths(t)
    assert sum(w) <= layout.LINE_CHARS - layout.COL_GAP_CHARS * 3 + 1e-6
    assert w[0] >= len("ddtree-") and w[2] >= len("(n")


@pytest.mark.parametrize("n", [3, 10, 12, 20, 21, 90, 360])
def test_palette_never_repeats_a_pair(n):
    sty = palette.styles([f"s{i}" for i in range(n)])
    triples = [(s["color"], s["marker"], s["linestyle"]) for s in sty.values()]
    assert len(set(triples)) == n
    if n <= 90:
        assert len({t[:2] for t in triples}) == n  # colour and marker alone tell them apart
    if n <= 20:
        assert len({t[0] for t in triples}) == n  # up to 20 series: every one its own colour
    for a, b in itertools.pairwise(triples):  # neighbours differ in colour and in marker
        assert a[0] != b[0] and a[1] != b[1]


def test_charts_13_series_distinct_styles_one_heatmap_scale(run_dir, rendered):
    drawn = rendered["charts"]
    assert set(drawn) == {"deciding", "curves", "closed", "accept", "heatmap"}
    for name in ("deciding", "curves", "closed"):
        meta = json.loads(ch.png_text(run_dir / "charts" / f"{name}.png")["Description"])
        assert len(meta["series"]) == 13 and meta["dummy"] and not meta["standin"]
        pairs = {(s["color"], s["marker"]) for s in meta["styles"].values()}
        assert len(pairs) == 13, name
    curves = json.loads(ch.png_text(run_dir / "charts" / "curves.png")["Description"])
    closed = json.loads(ch.png_text(run_dir / "charts" / "closed.png")["Description"])
    assert curves["styles"] == closed["styles"]  # a configuration looks the same in every chart
    heat = json.loads(ch.png_text(run_dir / "charts" / "heatmap.png")["Description"])
    assert heat["series"] == ["shadow-linear / release's", "tree / release's"] and heat["colorbars"] == 1
    lo, hi = heat["scale"]
    means = [e["ci"]["mean"] for e in rendered["model"]["entries"] if e["algorithm"] == "DDTREE"]
    assert (lo, hi) == (min(means), max(means))
    acc = json.loads(ch.png_text(run_dir / "charts" / "accept.png")["Description"])
    assert "none" not in acc["series"] and len(acc["series"]) == 12


@pytest.mark.skipif(not (shutil.which("pdflatex") and shutil.which("pdftotext")),
                    reason="pdflatex and pdftotext are not installed: apt-get install --no-install-recommends "
                           "texlive-latex-base poppler-utils (.ci/run does)")
def test_pdf_nothing_off_the_page(run_dir, rendered):
    pdf = run_dir / "report.pdf"
    assert rendered["pdf"] and pdf.exists()
    html = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    pages = re.findall(r'<page width="([\d.]+)" height="([\d.]+)">(.*?)</page>', html, flags=re.DOTALL)
    assert len(pages) >= 5
    margin = 18 / 25.4 * 72  # geometry's 18 mm
    words = []
    for width, _height, body in pages:
        for x1, x2, word in re.findall(r'<word xMin="([\d.]+)" yMin="[\d.]+" xMax="([\d.]+)" yMax="[\d.]+">(.*?)</word>',
                                       body):
            words.append(word)
            assert float(x2) <= float(width) - margin + 2, (word, x2, width)
            assert float(x1) >= margin - 2, (word, x1)
    text = " ".join(words)
    for t in rendered["summary"]["tables"]:
        for col in t["columns"]:
            for w in col.split():
                assert w.replace("&", "&amp;") in text, (t["id"], col)
    assert "DUMMY" in text and "ddtree-b15-k8-shadow-" in text
