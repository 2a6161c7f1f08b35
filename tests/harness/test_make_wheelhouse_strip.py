"""gpu-harness/make_wheelhouse.py: a stripped member keeps the wheel valid (its RECORD row has the new
sha256 and size), dropped members leave RECORD, other members keep their bytes."""

import base64
import hashlib
import importlib.util
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("make_wheelhouse", ROOT / "gpu-harness" / "make_wheelhouse.py")
mw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mw)


def record_row(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("strip")), reason="needs gcc and strip")
def test_strip_rewrites_record_and_keeps_the_rest(tmp_path):
    src = tmp_path / "m.c"
    src.write_text("int answer(void) { return 42; }\n")
    so = tmp_path / "m.so"
    subprocess.run(["gcc", "-g", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    lib, py, junk = so.read_bytes(), b"print('hi')\n", b"x" * 100
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/m.so", lib)
        z.writestr("pkg/__init__.py", py)
        z.writestr("pkg/junk.bin", junk)
        z.writestr("pkg-1.0.dist-info/RECORD", "\n".join(
            [record_row("pkg/m.so", lib), record_row("pkg/__init__.py", py), record_row("pkg/junk.bin", junk),
             "pkg-1.0.dist-info/RECORD,,"]) + "\n")
    out = tmp_path / "out.whl"
    dropped = mw.slim(str(wheel), str(out), ["pkg/junk.bin"], ["pkg/*.so"])
    assert dropped == {"pkg/junk.bin"}
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
        stripped = z.read("pkg/m.so")
        record = z.read("pkg-1.0.dist-info/RECORD").decode().splitlines()
        assert z.read("pkg/__init__.py") == py
    assert "pkg/junk.bin" not in names and len(stripped) < len(lib)
    assert record_row("pkg/m.so", stripped) in record and record_row("pkg/__init__.py", py) in record
    assert not any(r.startswith("pkg/junk.bin") for r in record)
