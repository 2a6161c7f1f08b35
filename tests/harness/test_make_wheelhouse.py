"""gpu-harness/make_wheelhouse.py's packing, both carried forms, with wheels written here (no network):
the wheelhouse (slimmed wheels, RECORD rewritten) and --site (the same wheels installed into one folder)."""

import sys
import tarfile
import zipfile
from pathlib import Path

from ansible.module_utils.dflash_layers import wheels as W

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu-harness"))
import make_wheelhouse as M


def raw_wheels(d):
    d.mkdir()
    W.write_wheel(str(d), "xgrammar", "0.1.32", {"xgrammar/__init__.py": "x = 1\n",
                                                 "xgrammar/lib/libxgrammar.a": b"static"})
    W.write_wheel(str(d), "sglang", "0.5.11", {"sglang/__init__.py": "s = 1\n",
                                              "sglang/__pycache__/x.cpython-312.pyc": b"pyc"})
    return d


def test_wheelhouse_slims_and_keeps_sglang_byte_identical(tmp_path):
    raw = raw_wheels(tmp_path / "raw")
    out = tmp_path / "wh.tar.xz"
    M.pack(str(raw), str(out), None, 2)
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == ["wheelhouse", "wheelhouse/sglang-0.5.11-py3-none-any.whl",
                                          "wheelhouse/xgrammar-0.1.32-py3-none-any.whl"]
        tar.extractall(tmp_path / "x", filter="data")
    wh = tmp_path / "x" / "wheelhouse"
    assert (wh / "sglang-0.5.11-py3-none-any.whl").read_bytes() == (raw / "sglang-0.5.11-py3-none-any.whl").read_bytes()
    with zipfile.ZipFile(wh / "xgrammar-0.1.32-py3-none-any.whl") as zf:
        names = zf.namelist()
        record = zf.read("xgrammar-0.1.32.dist-info/RECORD").decode()
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
    assert "xgrammar/lib/libxgrammar.a" not in names and "libxgrammar.a" not in record
    assert "xgrammar/__init__.py" in names and "xgrammar/__init__.py," in record


def test_site_installs_the_slimmed_wheels_into_one_folder(tmp_path):
    raw = raw_wheels(tmp_path / "raw")
    out = tmp_path / "site.tar.xz"
    M.pack(str(raw), str(out), None, 2, site=True)
    with tarfile.open(out) as tar:
        names = sorted(n.removeprefix("./") for n in tar.getnames() if tar.getmember(n).isfile())
    assert names == ["sglang-0.5.11.dist-info/METADATA", "sglang-0.5.11.dist-info/RECORD",
                     "sglang-0.5.11.dist-info/WHEEL", "sglang/__init__.py",
                     "xgrammar-0.1.32.dist-info/METADATA", "xgrammar-0.1.32.dist-info/RECORD",
                     "xgrammar-0.1.32.dist-info/WHEEL", "xgrammar/__init__.py"]
