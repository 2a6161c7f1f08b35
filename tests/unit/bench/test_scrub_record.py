"""scripts/gpu/scrub_record.py: a GPU record's device paths become <out>, <repo>, <home>, inside
compressed files and archives too, and --check finds any left."""

import io
import lzma
import os
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
import scrub_record as S

TEXT = "PYTHONPATH=/srv/repo/bench:/home/gpu/site out=/home/gpu/out/ddtree/summary.md\n"
WANT = "PYTHONPATH=<repo>/bench:<home>/site out=<out>/ddtree/summary.md\n"


def make_record(folder):
    (folder / "run.log").write_text(TEXT)
    (folder / "summary.json.xz").write_bytes(lzma.compress(TEXT.encode()))
    (folder / "weights.bin").write_bytes(b"/home/gpu/out not text")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in (("a.server.log", TEXT.encode()), ("tree.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (folder / "logs.tar.xz").write_bytes(buf.getvalue())


def test_paths_become_placeholders_everywhere_and_check_finds_none_after(tmp_path, capsys):
    make_record(tmp_path)
    args = [str(tmp_path), "--repo", "/srv/repo", "--home", "/home/gpu", "--out", "/home/gpu/out"]
    assert S.main([*args, "--check"]) == 1
    assert "run.log" in capsys.readouterr().out
    assert S.main(args) == 0
    assert (tmp_path / "run.log").read_text() == WANT
    assert lzma.decompress((tmp_path / "summary.json.xz").read_bytes()).decode() == WANT
    with tarfile.open(tmp_path / "logs.tar.xz") as tar:
        assert tar.extractfile("a.server.log").read().decode() == WANT
        assert tar.extractfile("tree.json").read() == b"{}"
    assert (tmp_path / "weights.bin").read_bytes() == b"/home/gpu/out not text"  # not a text file: left alone
    assert S.main([*args, "--check"]) == 0


def test_a_clean_file_keeps_its_bytes(tmp_path):
    (tmp_path / "summary.md").write_text("nothing here\n")
    before = (tmp_path / "summary.md").stat().st_mtime_ns
    assert S.main([str(tmp_path), "--repo", "/srv/repo"]) == 0
    assert (tmp_path / "summary.md").stat().st_mtime_ns == before


def test_empty_paths_are_not_replaced():
    assert S.replacements("", "", "/srv/repo") == [("/srv/repo", "<repo>")]
