"""bench.yml's report as issue 38 read the H200 record (gpu-harness/records/2026-12-02-h200-bench, run-1, re-rendered
from its cells): the LaTeX results table has every column of the Markdown one (p99 and prefix reuse were
dropped), command and flag lines are wrapped to the page, the 12 configurations of the concurrency chart each
have their own colour and marker (`none` and `ddtree-b31-k8` were both orange), the heatmap has one colour
scale for all its panels, and the dummy weights are said on the page and on every chart. Where pdflatex and
pdftotext are installed: no word of the PDF past the right margin."""

import io
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from ansible.module_utils.dflash_bench import charts as ch
from ansible.module_utils.dflash_bench import latex, markdown
from ansible.module_utils.dflash_bench import report as rp
from gpu_records import record_file

REC = "2026-12-02-h200-bench"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("h200") / "run-1"
    (d / "cells").mkdir(parents=True)
    (d / "run.json").write_bytes(record_file(REC, "run-1/run.json"))
    with tarfile.open(fileobj=io.BytesIO(record_file(REC, "run-1/cells.tar.xz"))) as tf:
        for m in tf.getmembers():
            if m.name.endswith(".json"):
                (d / "cells" / Path(m.name).name).write_bytes(tf.extractfile(m).read())
    summary = rp.render_run(str(d), pdf=shutil.which("pdflatex") is not None)
    return d, summary


def test_every_markdown_column_in_the_latex_table(run):
    d, _ = run
    tex = (d / "report.tex").read_text()
    heads = [line.split(r"\\")[0] for line in tex.splitlines() if line.rstrip().endswith(r"\endhead")]
    cells = [re.sub(r"\\textbf\{(.*)\}", r"\1", c.strip()).replace(r"\allowbreak{}", "") for c in heads[0].split(" & ")]
    assert cells == markdown.cells_columns(False)
    assert "TTFT p50 / p99 ms" in cells and "prefix reuse" in cells
    rows = [line for line in tex.splitlines() if line.endswith(r" \\") and " & " in line and "endhead" not in line]
    assert len(rows) == 48 and all(r.count(" & ") == len(cells) - 1 for r in rows)


def test_command_and_flag_lines_fit_the_page(run):
    d, _ = run
    tex = (d / "report.tex").read_text()
    verb, inside = [], False
    for line in tex.splitlines():
        inside = (inside or line.startswith(r"\begin{verbatim}")) and not line.startswith(r"\end{verbatim}")
        if inside and not line.startswith(r"\begin"):
            verb.append(line)
    assert len(verb) > 12 and max(len(x) for x in verb) <= latex.TEX_WIDTH
    flags = (d / "report.md").read_text().split("## Configurations (full flags)")[1]
    code = [x for block in re.findall(r"^```\n(.*?)^```", flags, flags=re.DOTALL | re.MULTILINE)
            for x in block.splitlines()]
    assert len(code) > 12 and max(len(x) for x in code) <= markdown.MD_WIDTH


def test_charts_colours_markers_one_scale_dummy(run):
    d, _ = run
    conc = json.loads(ch.png_text(d / "charts" / "concurrency.png")["Description"])
    sty = conc["styles"]
    assert len(sty) == 12 and len({(s["color"], s["marker"]) for s in sty.values()}) == 12
    assert len({s["color"] for s in sty.values()}) == 12  # up to 20 series: a colour each
    assert sty["none"]["color"] != sty["ddtree-b31-k8"]["color"]
    heat = json.loads(ch.png_text(d / "charts" / "heatmap.png")["Description"])
    assert heat["colorbars"] == 1 and len(heat["series"]) == 4 and heat["scale"][0] < heat["scale"][1]
    for name in ("throughput", "heatmap", "concurrency"):
        assert json.loads(ch.png_text(d / "charts" / f"{name}.png")["Description"])["dummy"] is True
    assert "DUMMY WEIGHTS" in (d / "report.md").read_text() and "DUMMY WEIGHTS" in (d / "report.tex").read_text()


@pytest.mark.skipif(not (shutil.which("pdflatex") and shutil.which("pdftotext")),
                    reason="pdflatex and pdftotext are not installed: apt-get install --no-install-recommends "
                           "texlive-latex-base poppler-utils (.ci/run does)")
def test_pdf_nothing_off_the_page(run):
    d, summary = run
    assert summary["pdf"]
    html = subprocess.run(["pdftotext", "-bbox", str(d / "report.pdf"), "-"], capture_output=True, text=True,
                          check=True).stdout
    margin = 18 / 25.4 * 72
    n = 0
    for width, body in re.findall(r'<page width="([\d.]+)" height="[\d.]+">(.*?)</page>', html, flags=re.DOTALL):
        for x2, word in re.findall(r'xMax="([\d.]+)" yMax="[\d.]+">(.*?)</word>', body):
            n += 1
            assert float(x2) <= float(width) - margin + 2, word
    assert n > 1000
