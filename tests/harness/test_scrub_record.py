"""gpu-harness/scrub_record.py: a GPU record's device paths become <out>, <repo>, <home>, inside
compressed files and archives too, and --check finds any left."""

import io
import lzma
import os
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gpu-harness"))
import scrub_record as S

WANT = "PYTHONPATH=<repo>/bench:<home>/site out=<out>/ddtree/summary.md\n"


def device_paths(tmp_path):
    """A made-up device: its home, $OUT below it, and the repository copy (under the test's own folder)."""
    home = str(tmp_path / "device-home")
    return {"repo": str(tmp_path / "device-repo"), "home": home, "out": home + "/out"}


def device_text(paths):
    return f"PYTHONPATH={paths['repo']}/bench:{paths['home']}/site out={paths['out']}/ddtree/summary.md\n"


def make_record(folder, paths):
    text = device_text(paths)
    folder.mkdir()
    (folder / "run.log").write_text(text)
    (folder / "summary.json.xz").write_bytes(lzma.compress(text.encode()))
    (folder / "weights.bin").write_bytes(paths["out"].encode() + b" not text")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in (("a.server.log", text.encode()), ("tree.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (folder / "logs.tar.xz").write_bytes(buf.getvalue())


def test_paths_become_placeholders_everywhere_and_check_finds_none_after(tmp_path, capsys):
    paths = device_paths(tmp_path)
    rec = tmp_path / "record"
    make_record(rec, paths)
    args = [str(rec), "--repo", paths["repo"], "--home", paths["home"], "--out", paths["out"]]
    assert S.main([*args, "--check"]) == 1
    assert "run.log" in capsys.readouterr().out
    assert S.main(args) == 0
    assert (rec / "run.log").read_text() == WANT
    assert lzma.decompress((rec / "summary.json.xz").read_bytes()).decode() == WANT
    with tarfile.open(rec / "logs.tar.xz") as tar:
        assert tar.extractfile("a.server.log").read().decode() == WANT
        assert tar.extractfile("tree.json").read() == b"{}"
    assert (rec / "weights.bin").read_bytes() == paths["out"].encode() + b" not text"  # not a text file: left alone
    assert S.main([*args, "--check"]) == 0


def test_a_clean_file_keeps_its_bytes(tmp_path):
    (tmp_path / "summary.md").write_text("nothing here\n")
    before = (tmp_path / "summary.md").stat().st_mtime_ns
    assert S.main([str(tmp_path), "--repo", device_paths(tmp_path)["repo"]]) == 0
    assert (tmp_path / "summary.md").stat().st_mtime_ns == before


def test_empty_paths_are_not_replaced(tmp_path):
    repo = device_paths(tmp_path)["repo"]
    assert S.replacements("", "", repo) == [(repo, "<repo>")]
