"""gpu-harness/layers_h200.py's CPU dry run: a computed overlay over an existing venv built with the role's
code (real uv, wheels written here), its marker laid out as gpu-harness/e2e.sh collects it
(artifacts/layers/<layer dir>.json), and the summary the script prints from it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ansible.module_utils.dflash_layers import build as L
from test_layers import make_wheel
from test_overlay import computed, needs_uv, venv_with

SCRIPT = Path(__file__).resolve().parents[2] / "gpu-harness" / "layers_h200.py"


@needs_uv
def test_summary_of_a_recorded_overlay(tmp_path):
    index, offline = tmp_path / "index", tmp_path / "offline"
    index.mkdir()
    offline.mkdir()
    make_wheel(index, "dfl-b", "2.0")
    make_wheel(index, "dfl-new", "1.0")
    make_wheel(index, "dfl-top", "1.0", requires=["dfl-a>=1.0", "dfl-b>=2.0", "dfl-new"])
    make_wheel(offline, "dfl-a", "1.0")
    make_wheel(offline, "dfl-b", "1.0")
    base = tmp_path / "torch-venv"
    venv_with(base, [offline / "dfl_a-1.0-py3-none-any.whl", offline / "dfl_b-1.0-py3-none-any.whl"])
    layers = [{"name": "base", "existing_path": str(base)},
              computed(index, parent="base", exclude=[{"name": "dfl-big", "reason": "not served here"}])]
    items, _, _ = L.LayerBuilder(str(tmp_path / "prefix"), os.environ.get("UV", "uv")).ensure(layers)
    over = L.layers_fact(items)[-1]
    art = tmp_path / "results" / "artifacts" / "layers"
    art.mkdir(parents=True)
    (art / f"{os.path.basename(over['path'])}.json").write_text((Path(over["path"]) / L.MARKER).read_text())
    (art / "du.txt").write_text("0\t/opt/dflash/layers/x/\n")  # collected beside the markers: not one
    hand = tmp_path / "hand.txt"
    hand.write_text("# written by hand\ndfl_b-2.0-py3-none-any.whl\ndfl_gone-1.0-py3-none-any.whl\n")
    out = tmp_path / "layers_h200.md"
    printed = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "results"), "--out", str(out),
                              "--hand-written", str(hand)], capture_output=True, text=True, check=True).stdout
    assert out.read_text() == printed
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in printed.splitlines() if ln.startswith("| ")]
    rows = {c[0]: c[1] for c in cells}
    assert rows["base"] == "the machine's torch venv (existing_path), 2 distributions"
    marker = json.loads((Path(over["path"]) / L.MARKER).read_text())
    assert rows["overlay closure"] == "4 distributions" and len(marker["closure"]) == 4
    assert rows["excluded on purpose"] == "1: dfl-big"
    assert rows["taken from the base"] == "1" and rows["installed by the overlay"] == "3"
    assert rows["overlay build time (venv + offline resolution + install)"] == f"{marker['build_seconds']} s"
    full = (marker["bytes"]["layer"] + marker["bytes"]["from_parent"]) / 1048576
    assert f"| {full:.1f} MiB |" in printed
    assert ("computed and hand-written both: 1; only computed: dfl-new, dfl-top; only hand-written: dfl-gone."
            in printed)
    assert "Installed: dfl-b==2.0, dfl-new==1.0, dfl-top==1.0" in printed
    # the same run kept as a record (README.md + raw.tar.xz, gpu-harness/pack_record.py): read in place
    record = tmp_path / "records" / "2026-12-01-e2e-deploy"
    shutil.copytree(tmp_path / "results", record)
    (record / "README.md").write_text("# the run\n")
    subprocess.run([sys.executable, str(SCRIPT.with_name("pack_record.py")), str(record)], check=True,
                   capture_output=True)
    assert sorted(p.name for p in record.iterdir()) == ["README.md", "raw.tar.xz"]
    from_record = subprocess.run([sys.executable, str(SCRIPT), str(record), "--hand-written", str(hand)],
                                 capture_output=True, text=True, check=True).stdout
    assert from_record.splitlines()[3:] == printed.splitlines()[3:] and str(record) in from_record.splitlines()[2]


def test_no_marker_is_a_clear_error(tmp_path):
    (tmp_path / "artifacts" / "layers").mkdir(parents=True)
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], check=False, capture_output=True, text=True)
    assert r.returncode != 0 and "no computed overlay marker under artifacts/layers/" in r.stderr
