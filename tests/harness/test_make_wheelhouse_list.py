"""gpu-harness/make_wheelhouse.py builds from a committed list of wheel URLs with their sha256 (the overlay
reproducible from a commit); only --refresh writes a list, and a build never touches a tracked file."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from ansible.module_utils.dflash_layers import wheels as W

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "gpu-harness" / "make_wheelhouse.py"
sys.path.insert(0, str(SCRIPT.parent))
import make_wheelhouse as M


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def index(tmp_path):
    """Two wheels served from file:// URLs (what urllib fetches like https://)."""
    d = tmp_path / "index"
    d.mkdir()
    W.write_wheel(str(d), "fastapi", "0.165.0", {"fastapi/__init__.py": "x = 1\n"})
    W.write_wheel(str(d), "uvicorn", "0.55.0", {"uvicorn/__init__.py": "y = 1\n"})
    return {p.name: (p.as_uri(), sha(p)) for p in sorted(d.iterdir())}


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], check=False, capture_output=True,
                          text=True, cwd=cwd)


def test_the_committed_overlay_list_is_locked_and_names_its_inputs():
    locked, specs, digest = M.read_list(ROOT / "gpu-harness" / "overlay-wheels.txt")
    assert len(locked) == 61 and specs == [] and digest
    assert all(e["url"].startswith("https://files.pythonhosted.org/") and e["url"].endswith("/" + e["filename"])
               for e in locked)
    # the list was computed from the inventory's overlay and the captured base as they are now
    assert M.check_inputs(digest, ROOT / M.LAYERS_YML, ROOT / M.BASE_JSON) is None


def test_list_lines(tmp_path):
    good = "https://h/p/a_b-1.0-py3-none-any.whl#sha256=" + "0" * 64
    f = tmp_path / "l.txt"
    f.write_text(f"# header\n\n{good}\nansible-core==2.19.14\nsglang_router-0.3.2-cp38-abi3-x.whl\n")
    locked, specs, digest = M.read_list(f)
    assert locked == [{"url": good.split("#")[0], "filename": "a_b-1.0-py3-none-any.whl", "sha256": "0" * 64}]
    assert specs == ["ansible-core==2.19.14", "sglang_router==0.3.2"] and digest is None
    for bad, why in ((good.split("#")[0], "needs the wheel's hash"), ("rm -rf /", "not a wheel URL")):
        f.write_text(f"# header\n{bad}\n")
        with pytest.raises(ValueError, match=rf"l.txt:2: .*{why}"):
            M.read_list(f)


def test_the_default_build_fetches_the_list_checks_each_hash_and_writes_no_tracked_file(tmp_path):
    files = index(tmp_path)
    lst = tmp_path / "overlay-wheels.txt"
    lst.write_text("# the list\n" + "".join(f"{url}#sha256={h}\n" for url, h in files.values()))
    before = (lst.read_bytes(), lst.stat().st_mtime_ns)
    out = tmp_path / "wh.tar.xz"
    r = run(lst, out)
    assert r.returncode == 0, r.stderr
    with tarfile.open(out) as tar:
        assert sorted(n for n in tar.getnames() if n.endswith(".whl")) == [f"wheelhouse/{n}" for n in files]
    assert (lst.read_bytes(), lst.stat().st_mtime_ns) == before
    # a file that is not the one the list pinned stops the build, before any archive is written
    name, (url, _h) = next(iter(files.items()))
    lst.write_text(f"{url}#sha256={'1' * 64}\n")
    r = run(lst, tmp_path / "other.tar.xz")
    assert r.returncode != 0 and f"{name}: sha256 " in r.stderr and "does not match the list's 1111" in r.stderr
    assert not (tmp_path / "other.tar.xz").exists()


def test_resolving_live_only_with_refresh(tmp_path):
    r = run("--compute", M.LAYERS_YML, "--base", M.BASE_JSON, "--write-list", tmp_path / "l.txt", tmp_path / "o.tar.xz")
    assert r.returncode == 2 and "a build no longer resolves live" in r.stderr and "--refresh" in r.stderr
    assert not (tmp_path / "l.txt").exists()
    r = run("--compute", M.LAYERS_YML, "--base", M.BASE_JSON, tmp_path / "o.tar.xz")
    assert r.returncode == 2 and "builds from the committed list" in r.stderr
    r = run("--refresh", tmp_path / "l.txt")
    assert r.returncode == 2 and "--compute LAYERS_YML --base BASE_JSON" in r.stderr


def test_refresh_writes_the_list_and_says_what_moved(tmp_path, monkeypatch, capsys):
    files = index(tmp_path)
    entries = [{"filename": n, "url": u, "sha256": h} for n, (u, h) in files.items()]
    lst = tmp_path / "overlay-wheels.txt"
    lst.write_text("# old\nhttps://h/p/uvicorn-0.54.0-py3-none-any.whl#sha256=" + "2" * 64 + "\n"
                   "https://h/p/orjson-3.0-py3-none-any.whl#sha256=" + "3" * 64 + "\n")
    res = {"closure": list(range(136)), "from_parent": list(range(75))}
    monkeypatch.setattr(M, "compute", lambda layers, base, work: (entries, res))
    monkeypatch.setattr(sys, "argv", ["make_wheelhouse.py", "--refresh", str(lst), "--compute",
                                      str(ROOT / M.LAYERS_YML), "--base", str(ROOT / M.BASE_JSON)])
    M.main()
    said = capsys.readouterr().out
    assert said.strip() == f"{lst}: 2 wheels; +fastapi 0.165.0; -orjson 3.0; uvicorn 0.54.0 -> 0.55.0"
    locked, specs, digest = M.read_list(lst)
    assert sorted(e["filename"] for e in locked) == sorted(files) and specs == []
    assert digest == M.inputs_digest(ROOT / M.LAYERS_YML, ROOT / M.BASE_JSON)
    text = lst.read_text()
    assert "--refresh <this list> --compute inventory/gpu/group_vars/all/layers.yml --base gpu-harness/h200-base.json" in text
    assert "closure (136) less what the base provides (75)" in text


def test_a_build_warns_when_the_lists_inputs_changed(tmp_path):
    base = tmp_path / "base.json"
    base.write_text((ROOT / M.BASE_JSON).read_text())
    digest = M.inputs_digest(ROOT / M.LAYERS_YML, base)
    assert M.check_inputs(digest, ROOT / M.LAYERS_YML, base) is None
    data = json.loads(base.read_text())
    data["distributions"] = data["distributions"][1:]
    base.write_text(json.dumps(data))
    warning = M.check_inputs(digest, ROOT / M.LAYERS_YML, base)
    assert "changed since this list was computed" in warning and "--refresh" in warning


def test_the_inventorys_0_5_17_overlay_is_the_one_its_wheel_list_was_computed_from():
    """inventory/gpu's dflash_layers_overlays["0.5.17"] is gpu-harness/overlay-0.5.17.yml's overlay (whose closure
    less the base is overlay-wheels-0.5.17.txt) but for its find-links folder, where wheels.sh unpacks that archive."""
    import yaml

    inv = yaml.safe_load((ROOT / "inventory" / "gpu" / "group_vars" / "all" / "layers.yml").read_text())
    ours = inv["dflash_layers_overlays"]["0.5.17"]
    theirs = yaml.safe_load((ROOT / "gpu-harness" / "overlay-0.5.17.yml").read_text())["dflash_layers_overlay"]
    assert ours["find_links"] == ["/root/wh/0.5.17/wheelhouse"] and inv["dflash_layers_overlays"]["0.5.11"][
        "find_links"] == ["/root/wh/wheelhouse"]
    assert {k: v for k, v in ours.items() if k != "find_links"} == {k: v for k, v in theirs.items() if k != "find_links"}
    assert M.gpu_overlay(ROOT / "inventory" / "gpu" / "group_vars" / "all" / "layers.yml", "0.5.17")["requirements"] == \
        M.gpu_overlay(ROOT / "gpu-harness" / "overlay-0.5.17.yml")["requirements"]
