"""gpu-harness/split_carry.py (plan: the carry calls within the limit) + carry.sh + wheels.sh / ddtree_setup.sh: an
archive carried whole or in parts over warm device calls is kept and joined, exactly as if carried whole (temp dirs, real tar/xz)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("split_carry", ROOT / "gpu-harness/split_carry.py")
split_carry = importlib.util.module_from_spec(spec)
spec.loader.exec_module(split_carry)


def _archive(path: Path, files: dict[str, bytes]) -> None:
    src = path.parent / (path.name + ".src")
    for name, data in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    with tarfile.open(path, "w:xz") as tar:
        for top in sorted({name.split("/")[0] for name in files}):
            tar.add(src / top, arcname=top)
    shutil.rmtree(src)


def test_split_parts_join_to_the_same_bytes(tmp_path):
    a = tmp_path / "x.tar.xz"
    a.write_bytes(os.urandom(10_001))
    names = split_carry.split(str(a), 3)
    assert [Path(n).name for n in names] == ["x.tar.xz.part1of3", "x.tar.xz.part2of3", "x.tar.xz.part3of3"]
    assert b"".join(Path(n).read_bytes() for n in names) == a.read_bytes()
    with pytest.raises(ValueError):
        split_carry.split(str(a), 0)


def _call(workdir: Path, home: Path, carried: list[Path]) -> str:
    """One device call: a fresh tree with only the carried files under .gpu, the same $HOME (warm)."""
    if workdir.exists():
        shutil.rmtree(workdir)
    (workdir / ".gpu").mkdir(parents=True)
    for f in carried:
        shutil.copy(f, workdir / ".gpu" / f.name)
    script = f'say() {{ echo "$*"; }}; STAGES=unpack; PY=true; . {ROOT}/gpu-harness/wheels.sh'
    out = subprocess.run(["bash", "-c", script], check=False, cwd=workdir, env={**os.environ, "HOME": str(home)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_wheelhouse_in_two_calls(tmp_path):
    built = tmp_path / "built"
    built.mkdir()
    whl = os.urandom(50_000)
    _archive(built / "wheelhouse.tar.xz", {"wheelhouse/sglang-0.5.11-py3-none-any.whl": whl})
    _archive(built / "ctl-wheelhouse.tar.xz", {"wheelhouse/ansible_core-2.19.0-py3-none-any.whl": b"ctl"})
    p1, p2 = (Path(n) for n in split_carry.split(str(built / "wheelhouse.tar.xz"), 2))
    home = tmp_path / "home"
    home.mkdir()
    first = _call(tmp_path / "call1", home, [built / "ctl-wheelhouse.tar.xz", p1])
    assert "1 of 2 parts here" in first
    assert not (home / "wh/wheelhouse").exists()
    assert (home / "wh/ctl/ansible_core-2.19.0-py3-none-any.whl").read_bytes() == b"ctl"
    second = _call(tmp_path / "call2", home, [p2])
    assert "joined wheelhouse.tar.xz from 2 parts" in second
    assert (home / "wh/wheelhouse/sglang-0.5.11-py3-none-any.whl").read_bytes() == whl
    assert "1 overlay wheels, 1 controller wheels" in second
    third = _call(tmp_path / "call3", home, [])  # a later call of the warm machine: nothing joined again
    assert "joined" not in third and "1 overlay wheels" in third


def _ddtree_call(workdir: Path, home: Path, carried: list[Path]) -> subprocess.CompletedProcess:
    """One device call of gpu-harness/ddtree_*.sh up to its setup (PY=true: no server, no tree)."""
    if workdir.exists():
        shutil.rmtree(workdir)
    (workdir / ".gpu").mkdir(parents=True)
    for f in carried:
        shutil.copy(f, workdir / ".gpu" / f.name)
    env = {**os.environ, "HOME": str(home), "PY": shutil.which("true"), "OUT": str(workdir / "out"), "WORK": str(home / "work"),
           "SITE": str(home / "site"), "TAG": "t", "FAMILIES": "hybrid", "WEIGHTS": "", "DRYRUN": "1"}
    return subprocess.run(["bash", str(ROOT / "gpu-harness/ddtree_setup.sh")], check=False, cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=60)


def test_site_bundle_in_two_calls(tmp_path):
    built = tmp_path / "built"
    built.mkdir()
    code = os.urandom(40_000)
    _archive(built / "site.tar.xz", {"sglang/__init__.py": b"# sglang\n", "sglang/blob.bin": code})
    p1, p2 = (Path(n) for n in split_carry.split(str(built / "site.tar.xz"), 2))
    home = tmp_path / "home"
    home.mkdir()
    first = _ddtree_call(tmp_path / "call1", home, [p1])
    assert first.returncode == 0, first.stdout + first.stderr
    assert "site.tar.xz: 1 of 2 parts here" in first.stdout and "nothing run" in first.stdout
    assert not (home / "site").exists()
    second = _ddtree_call(tmp_path / "call2", home, [p2])
    assert second.returncode == 0, second.stdout + second.stderr
    assert "joined site.tar.xz from 2 parts" in second.stdout
    assert (home / "site/sglang/blob.bin").read_bytes() == code
    # nothing carried, nothing kept: say where to look
    bare = _ddtree_call(tmp_path / "call3", tmp_path / "fresh-home", [])
    assert bare.returncode == 2 and "missing site.tar.xz: carry it first (gpu-harness/README.md" in bare.stdout


def _carry_call(workdir: Path, home: Path, carried: list[Path]) -> str:
    """One carry call as split_carry.py plan prints it: bash gpu-harness/carry.sh in a fresh tree."""
    if workdir.exists():
        shutil.rmtree(workdir)
    (workdir / ".gpu").mkdir(parents=True)
    (workdir / "gpu-harness").mkdir()
    for f in ("carry.sh", "join_parts.sh"):
        shutil.copy(ROOT / "gpu-harness" / f, workdir / "gpu-harness" / f)
    for f in carried:
        shutil.copy(f, workdir / ".gpu" / f.name)
    # run from elsewhere: carry.sh finds the tree from its own place, not from the caller's directory
    out = subprocess.run(["bash", str(workdir / "gpu-harness/carry.sh")], check=False, cwd=workdir.parent,
                         env={**os.environ, "HOME": str(home)}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_plan_fits_every_call_and_the_carry_calls_bring_every_archive(tmp_path):
    built = tmp_path / "built"
    built.mkdir()
    whl, code = os.urandom(900_000), os.urandom(1_000_000)
    _archive(built / "wheelhouse.tar.xz", {"wheelhouse/sglang-0.5.11-py3-none-any.whl": whl})
    _archive(built / "ctl-wheelhouse.tar.xz", {"wheelhouse/ansible_core-2.19.0-py3-none-any.whl": b"ctl"})
    _archive(built / "site.tar.xz", {"sglang/__init__.py": b"# sglang\n", "sglang/blob.bin": code})
    (built / "site.tar.xz.part1of3").write_bytes(b"an earlier split")  # replaced, not carried
    archives = [built / n for n in ("ctl-wheelhouse.tar.xz", "wheelhouse.tar.xz", "site.tar.xz")]
    sizes = {a.name: a.stat().st_size for a in archives}
    # a 1.5 MB tree under a 2.5 MB limit (margin 0.2 MB): 0.8 MB a call, so both big archives come in parts
    limit, tree, margin = 2_500_000, 1_500_000, 200_000
    calls = split_carry.plan([str(a) for a in archives], tree, limit=limit, margin=margin)
    for paths in calls:
        assert sum(os.path.getsize(p) for p in paths) <= limit - tree - margin and len(paths) <= 8
    carried = [Path(p).name for c in calls for p in c]
    assert carried[0] == "ctl-wheelhouse.tar.xz" and "wheelhouse.tar.xz.part1of2" in carried
    assert "site.tar.xz.part1of2" in carried and not (built / "site.tar.xz.part1of3").exists()
    assert sum(os.path.getsize(p) for c in calls for p in c) == sum(sizes.values())
    home = tmp_path / "home"
    home.mkdir()
    said = [_carry_call(tmp_path / f"carry{i}", home, [Path(p) for p in c]) for i, c in enumerate(calls)]
    assert "[carry] kept ctl-wheelhouse.tar.xz" in said[0]
    assert "joined wheelhouse.tar.xz from 2 parts" in "".join(said) and "joined site.tar.xz" in "".join(said)
    for a in archives:
        assert (home / "wh" / a.name).read_bytes() == a.read_bytes()
    # the stages' calls carry nothing: the overlay (wheels.sh) and the site bundle (ddtree_setup.sh) are found
    stage = _call(tmp_path / "stage", home, [])
    assert "1 overlay wheels, 1 controller wheels" in stage
    assert (home / "wh/wheelhouse/sglang-0.5.11-py3-none-any.whl").read_bytes() == whl
    setup = _ddtree_call(tmp_path / "stage2", home, [])
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert (home / "site/sglang/blob.bin").read_bytes() == code


def test_no_room_is_said(tmp_path):
    a = tmp_path / "x.tar.xz"
    a.write_bytes(b"x" * 10)
    with pytest.raises(ValueError, match="leaves no room"):
        split_carry.plan([str(a)], 63 << 20)
