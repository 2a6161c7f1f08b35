"""gpu-harness/pack_record.py: a record keeps README.md readable and the raw run in one deterministic
raw.tar.xz; and the committed records are laid out that way."""

from __future__ import annotations

import io
import lzma
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gpu-harness"))
import pack_record as P
import scrub_record as S

RECORDS = ROOT / "gpu-harness" / "records"


def returned_files(folder: Path) -> Path:
    """A record as a device call returns it, with a log compressed on its own and a nested archive."""
    (folder / "call2-e2e").mkdir(parents=True)
    (folder / "README.md").write_text("# 2026-12-03: the run\n\n| t15 | 1.104 |\n")
    (folder / "call2-e2e" / "summary.md").write_text("| t15 | 1.104 |\n")
    (folder / "deploy.log.xz").write_bytes(lzma.compress(b"PLAY RECAP\nok=114 changed=20\n"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as t:
        info = tarfile.TarInfo("t15.server.log")
        info.size = 3
        t.addfile(info, io.BytesIO(b"up\n"))
    (folder / "call2-e2e" / "logs.tar.xz").write_bytes(buf.getvalue())
    return folder


def test_pack_keeps_the_readme_and_archives_the_rest(tmp_path):
    rec = returned_files(tmp_path / "2026-12-03-ddtree-step")
    nested = (rec / "call2-e2e" / "logs.tar.xz").read_bytes()
    r = P.pack(rec)
    assert r["packed"] == 3 and r["bytes_after"] == (rec / "raw.tar.xz").stat().st_size
    assert sorted(p.name for p in rec.iterdir()) == ["README.md", "raw.tar.xz"]
    assert (rec / "README.md").read_text().startswith("# 2026-12-03")
    with tarfile.open(rec / "raw.tar.xz") as t:
        got = {m.name: (t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()}
        times = {m.mtime for m in t.getmembers()}
        owners = {(m.uid, m.gid, m.uname, m.gname) for m in t.getmembers()}
    # the lone .xz is stored under the name the READMEs use, the returned archive as it came
    assert got == {"call2-e2e": None, "call2-e2e/logs.tar.xz": nested, "call2-e2e/summary.md": b"| t15 | 1.104 |\n",
                   "deploy.log": b"PLAY RECAP\nok=114 changed=20\n"}
    assert times == {1796256000} and owners == {(0, 0, "", "")}  # 2026-12-03 00:00 UTC, no local owner


def test_pack_is_deterministic(tmp_path):
    a = returned_files(tmp_path / "a" / "2026-12-03-x")
    b = returned_files(tmp_path / "b" / "2026-12-03-x")
    (b / "deploy.log.xz").touch()  # other times on disk, same contents
    P.pack(a)
    P.pack(b)
    assert (a / "raw.tar.xz").read_bytes() == (b / "raw.tar.xz").read_bytes()


def test_refusals_change_nothing(tmp_path):
    rec = returned_files(tmp_path / "2026-12-03-x")
    (rec / "README.md").unlink()
    with pytest.raises(ValueError, match="no README.md"):
        P.pack(rec)
    (rec / "README.md").write_text("# x\n")
    (rec / "deploy.log").write_text("plain too\n")
    with pytest.raises(ValueError, match=r"both deploy.log and deploy.log.xz"):
        P.pack(rec)
    assert not (rec / "raw.tar.xz").exists() and (rec / "deploy.log.xz").exists()
    (rec / "deploy.log").unlink()
    assert P.main([str(rec)]) == 0
    (rec / "late.json").write_text("{}")
    assert P.main([str(rec)]) == 1  # an archive and loose files: say so, keep both
    assert (rec / "late.json").exists() and (rec / "raw.tar.xz").exists()
    (rec / "late.json").unlink()
    assert P.pack(rec) == {"record": str(rec), "packed": 0}  # packed already: nothing to do


def test_the_committed_records_are_readme_plus_archive():
    records = sorted(p for p in RECORDS.iterdir() if p.is_dir())
    assert len(records) >= 20
    for rec in records:
        names = sorted(p.name for p in rec.iterdir())
        assert names == ["README.md", "raw.tar.xz"], rec.name
        assert "gpu-harness/" in (rec / "README.md").read_text(), rec.name  # its commands, at their place
        with tarfile.open(rec / "raw.tar.xz", mode="r:xz") as t:  # xz's checks: the archive reads whole
            assert [m for m in t.getmembers() if m.isfile() and t.extractfile(m).read() is not None], rec.name


def test_the_committed_records_name_no_device_path(capsys):
    """scrub_record.py --check over every record, inside raw.tar.xz too (device paths are <home>, <out>, <repo>)."""
    assert S.main([*map(str, sorted(p for p in RECORDS.iterdir() if p.is_dir())), "--check"]) == 0, capsys.readouterr().out
