"""dflash-stage-model (roles/dflash_instances/files): copies a model onto tmpfs with progress."""

import importlib.util
import io
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("dflash_stage_model",
                                               ROOT / "roles/dflash_instances/files/dflash-stage-model.py")
stage_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage_mod)


def make_model(d: Path):
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (d / "model-00001.safetensors").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (d / "sub" / "tokenizer.json").write_bytes(os.urandom(100_000))


def test_stage_copies_everything_with_progress(tmp_path):
    src, dst = tmp_path / "persistent", tmp_path / "shm" / "model"
    make_model(src)
    out = io.StringIO()
    stage_mod.CHUNK = 256 * 1024
    assert stage_mod.stage(str(src), str(dst), out=out, every_pct=10.0) == 0
    for rel in ("config.json", "model-00001.safetensors", "sub/tokenizer.json"):
        assert (dst / rel).read_bytes() == (src / rel).read_bytes()
        assert int((dst / rel).stat().st_mtime) == int((src / rel).stat().st_mtime)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"dflash-stage: {src} -> {dst}: 3 file(s) to copy")
    pcts = [float(ln.split()[1].rstrip("%")) for ln in lines[1:-1]]
    assert len(pcts) >= 5 and pcts == sorted(pcts)
    assert lines[-1].startswith("dflash-stage: done, 100.0%")
    assert not list(dst.rglob("*.dflash-tmp-*"))
    marker = json.loads((dst / stage_mod.MARKER).read_text())
    assert marker["files_copied"] == 3 and marker["bytes"] == marker["copied_bytes"]


def test_second_run_copies_nothing_and_changed_file_is_recopied(tmp_path):
    src, dst = tmp_path / "persistent", tmp_path / "shm" / "model"
    make_model(src)
    assert stage_mod.stage(str(src), str(dst), out=io.StringIO()) == 0
    out = io.StringIO()
    assert stage_mod.stage(str(src), str(dst), out=out) == 0
    assert ": 0 file(s) to copy" in out.getvalue().splitlines()[0]
    (src / "config.json").write_text(json.dumps({"model_type": "qwen3", "x": 1}))
    os.utime(src / "config.json", (1, 1))
    out = io.StringIO()
    assert stage_mod.stage(str(src), str(dst), out=out) == 0
    assert ": 1 file(s) to copy" in out.getvalue().splitlines()[0]
    assert (dst / "config.json").read_text() == (src / "config.json").read_text()


def test_missing_source_fails(tmp_path):
    out = io.StringIO()
    assert stage_mod.stage(str(tmp_path / "nope"), str(tmp_path / "dst"), out=out) == 2
    assert "is not a directory" in out.getvalue()
