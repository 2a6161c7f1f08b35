"""The computed overlay (dflash_layers/overlay.py) and the combined environment's consistency check
(dflash_consistency), with the real uv against wheels written here (no network).

The base plays the seeds' training venv; the overlay needs part of what it has: only the rest may
be installed, the marker lists what came from the base, a base upgraded under us rebuilds the
overlay (and nothing else), and every requirement across both layers must hold.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.dflash_layers import build as L
from ansible.module_utils.dflash_layers import consistency as C
from ansible.module_utils.dflash_layers import overlay as O
from ansible.module_utils.dflash_layers import pep508
from ansible.module_utils.dflash_layers import wheelhouse as WH
from ansible.module_utils.dflash_layers import wheels as W
from test_layers import make_wheel, run_py, snapshot

UV = shutil.which("uv")
needs_uv = pytest.mark.skipif(UV is None, reason="uv is not on PATH (the controller env is made with uv)")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A find-links directory: what 'the index' offers (the base's own wheels are NOT all in it)."""
    d = tmp_path_factory.mktemp("index")
    make_wheel(d, "dfl-a", "1.0")
    make_wheel(d, "dfl-a", "1.1")                     # newer than the base's: must not be taken
    make_wheel(d, "dfl-b", "2.0")
    make_wheel(d, "dfl-new", "1.0")
    make_wheel(d, "dfl-top", "1.0", requires=["dfl-a>=1.0", "dfl-b>=2.0", "dfl-new", "dfl-gpu==2.0"])
    make_wheel(d, "dfl-gpu", "2.0", requires=["dfl-a"])
    make_wheel(d, "dfl-gpu", "2.0+cu128", requires=["dfl-a"])
    return d


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """Wheels only the base was installed from (absent from the index, as on the H200)."""
    d = tmp_path_factory.mktemp("offline")
    make_wheel(d, "dfl-a", "1.0")
    make_wheel(d, "dfl-b", "1.0")
    make_wheel(d, "dfl-b", "2.0")
    make_wheel(d, "dfl-gpu", "2.0+cu130", requires=["dfl-a"])
    make_wheel(d, "dfl-old", "1.0", requires=["dfl-a<2"])
    return d


def venv_with(path, wheel_paths):
    subprocess.run([UV, "venv", "--no-config", "--python", sys.executable, str(path)], check=True,
                   capture_output=True)
    subprocess.run([UV, "pip", "install", "--no-config", "--offline", "--no-index", "--no-deps",
                    "--python", str(path / "bin/python"), *map(str, wheel_paths)], check=True, capture_output=True)


def own_dists(site):
    return sorted(d for d in os.listdir(site) if d.endswith(".dist-info"))


# --------------------------------------------------------------------------- pieces

def test_standin_wheel_carries_the_installed_metadata_and_nothing_else(tmp_path):
    dist = {"name": "Torch", "key": "torch", "version": "2.11.0+cu128",
            "requires": ["sympy>=1.13", "nvidia-cublas-cu12==12.8.4.1; platform_system == 'Linux'",
                         "not a valid requirement !!"],
            "requires_python": ">=3.10", "provides_extra": ["opt-einsum"]}
    name = O.standin_wheel(str(tmp_path), dist)
    assert name == "Torch-2.11.0+cu128-py3-none-any.whl"
    import zipfile

    with zipfile.ZipFile(tmp_path / name) as zf:
        names = zf.namelist()
        meta = zf.read("Torch-2.11.0+cu128.dist-info/METADATA").decode()
    assert sorted(names) == sorted(f"Torch-2.11.0+cu128.dist-info/{f}" for f in ("METADATA", "WHEEL", "RECORD"))
    assert "Requires-Dist: sympy>=1.13" in meta and "Requires-Python: >=3.10" in meta
    assert "Provides-Extra: opt-einsum" in meta and "not a valid" not in meta
    assert O.standin_wheel(str(tmp_path), {**dist, "version": "not-pep440"}) is None


def test_offered_holds_back_own_pins_at_another_version_and_excluded():
    spec = {"requirements": ["torch==2.11.0", "six==1.17.0"], "exclude": [{"name": "Flashinfer_Cubin", "reason": "r"}]}
    parent = [{"key": "torch", "version": "2.11.0+cu128"}, {"key": "six", "version": "1.17.0"},
              {"key": "flashinfer-cubin", "version": "0.6.8"}, {"key": "numpy", "version": "2.3.5"}]
    offer, held = O.offered(parent, spec)
    assert [d["key"] for d in offer] == ["six", "numpy"]
    assert {h["name"]: h["why"] for h in held} == {"torch": "the layer pins torch==2.11.0",
                                                    "flashinfer-cubin": "excluded by the layer"}


def test_split_closure_local_labels_are_other_versions():
    parent = [{"key": "torch", "version": "2.11.0+cu128", "location": "/b"}, {"key": "six", "version": "1.17"}]
    got = O.split_closure([("torch", "2.11.0", None), ("six", "1.17.0", None), ("idna", "3.10", None)], parent)
    assert [(e["name"], e["version"], e["source"]) for e in got] == [
        ("idna", "3.10", "layer"), ("six", "1.17.0", "parent"), ("torch", "2.11.0", "layer")]


def test_parse_resolved_txt():
    assert O.parse_resolved_txt("torch==2.11.0+cu130\n# c\n\nsix==1.17.0  # via x\n") == [
        ("torch", "2.11.0+cu130"), ("six", "1.17.0")]
    with pytest.raises(L.LayerError, match="unexpected line"):
        O.parse_resolved_txt("six>=1\n")


def test_consistency_reports_every_unmet_requirement_with_its_owner(tmp_path):
    site1, site2 = tmp_path / "over", tmp_path / "base"

    def dist(site, name, version, requires=()):
        d = site / f"{name}-{version}.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                    + "".join(f"Requires-Dist: {r}\n" for r in requires))

    dist(site1, "sglang", "0.5.11", ["torch==2.11.0", "xgrammar==0.1.32", "soundfile", "uvloop; sys_platform == 'win32'",
                                      "pytest; extra == 'test'"])
    dist(site1, "xgrammar", "0.1.32", ["torch>=1.10"])
    dist(site2, "xgrammar", "0.1.10")            # shadowed by the overlay's
    dist(site2, "torch", "2.11.0+cu128", ["sympy>=1.13.3"])
    dist(site2, "sympy", "1.13.1")
    dists = C.installed_distributions([str(site1), str(site2)])
    assert C.shadowed(dists) == [{"name": "xgrammar", "version": "0.1.10", "location": str(site2),
                                  "shadowed_by": str(site1)}]
    env = {"python_version": "3.12", "sys_platform": "linux", "platform_machine": "x86_64"}
    problems = C.check(dists, env)
    assert [(p["owner"], p["problem"], p["key"], p["found"]) for p in problems] == [
        ("sglang", "missing", "soundfile", None), ("torch", "conflict", "sympy", "1.13.1")]
    assert problems[1]["message"] == (f"torch 2.11.0+cu128 requires sympy>=1.13.3, but sympy 1.13.1 is installed "
                                      f"(in {site2})")
    assert C.check(dists, env, names=["sglang"])[0]["message"] == "sglang 0.5.11 requires soundfile, which is not installed"


# --------------------------------------------------------------------------- real builds

def computed(index, **over):
    return {"name": "overlay", "parent": "train", "no_index": True, "find_links": [str(index)],
            "requirements": ["dfl-top==1.0"], **over}


@needs_uv
def test_overlay_over_an_existing_venv_installs_only_the_difference(tmp_path, index, offline):
    train = tmp_path / "train-venv"
    # the base has dfl-a 1.0 (the index also has 1.1), dfl-b 1.0 (too old), dfl-gpu 2.0+cu130 (not in the
    # index at all: only the base has it), and dfl-old, which the overlay does not need
    venv_with(train, [offline / "dfl_a-1.0-py3-none-any.whl", offline / "dfl_b-1.0-py3-none-any.whl",
                      offline / "dfl_gpu-2.0+cu130-py3-none-any.whl", offline / "dfl_old-1.0-py3-none-any.whl"])
    layers = [{"name": "train", "existing_path": str(train)}, computed(index)]
    prefix = tmp_path / "prefix"
    items, changed, _ = L.LayerBuilder(str(prefix), UV).ensure(layers)
    base, over = L.layers_fact(items)
    assert changed and base["existing"] and over["changed"]
    marker = json.loads((Path(over["path"]) / L.MARKER).read_text())
    assert marker["installed"] == ["dfl-b==2.0", "dfl-new==1.0", "dfl-top==1.0"]
    assert marker["from_parent"] == ["dfl-a==1.0", "dfl-gpu==2.0+cu130"]
    assert marker["closure"] == sorted(marker["installed"] + marker["from_parent"])
    assert marker["parent_freeze"] == ["dfl-a==1.0", "dfl-b==1.0", "dfl-gpu==2.0+cu130", "dfl-old==1.0"]
    assert marker["bytes"]["layer"] > 0 and marker["bytes"]["from_parent"] > 0
    assert own_dists(over["site_packages"][0]) == ["dfl_b-2.0.dist-info", "dfl_new-1.0.dist-info",
                                                   "dfl_top-1.0.dist-info"]
    assert over["closure"] == marker["closure"]
    # the overlay's dfl-b wins, the rest comes from the base; the combined env is consistent
    got = run_py(over["python"], "import dfl_a, dfl_b, dfl_gpu; print(dfl_a.__version__, dfl_b.__version__, "
                                 "dfl_gpu.__version__, dfl_b.__file__)").split()
    assert got[:3] == ["1.0", "2.0", "2.0+cu130"] and got[3].startswith(over["path"])
    env = json.loads(run_py(over["python"], C_ENV))
    assert C.check(C.installed_distributions(over["sys_path_order"]), env) == []

    # unchanged: reused, nothing written
    before = snapshot(prefix)
    _, changed2, _ = L.LayerBuilder(str(prefix), UV).ensure(layers)
    assert not changed2 and snapshot(prefix) == before

    # the base upgraded under us (dfl-b 2.0 now in it): its hash changes, so the overlay is rebuilt,
    # and the new overlay no longer needs dfl-b; the base itself is never written to
    subprocess.run([UV, "pip", "install", "--no-config", "--offline", "--no-index", "--no-deps", "--python",
                    str(train / "bin/python"), str(offline / "dfl_b-2.0-py3-none-any.whl")], check=True,
                   capture_output=True)
    train_before = snapshot(train)
    items3, changed3, _ = L.LayerBuilder(str(prefix), UV).ensure(layers)
    base3, over3 = L.layers_fact(items3)
    assert changed3 and [i["action"] for i in items3] == ["existing", "build"]
    assert base3["hash"] != base["hash"] and over3["path"] != over["path"]
    assert snapshot(train) == train_before
    marker3 = json.loads((Path(over3["path"]) / L.MARKER).read_text())
    assert marker3["installed"] == ["dfl-new==1.0", "dfl-top==1.0"]
    assert "dfl-b==2.0" in marker3["from_parent"]
    assert os.path.isdir(over["path"])  # the old overlay stays until prune


C_ENV = pep508.MARKER_ENV_CODE


@needs_uv
def test_own_pin_at_another_local_version_is_installed_and_exclude_leaves_out(tmp_path, index, offline):
    train = tmp_path / "train-venv"
    venv_with(train, [offline / "dfl_a-1.0-py3-none-any.whl", offline / "dfl_gpu-2.0+cu130-py3-none-any.whl"])
    # the layer pins dfl-gpu==2.0 (the PyPI-style build): 2.0+cu130 in the base does not count, and the
    # index's 2.0+cu128 must not be taken for it either (exact version string at install)
    over = computed(index, requirements=["dfl-top==1.0", "dfl-gpu==2.0"],
                    exclude=[{"name": "dfl-new", "reason": "not needed for serving"}])
    items, _, _ = L.LayerBuilder(str(tmp_path / "prefix"), UV).ensure(
        [{"name": "train", "existing_path": str(train)}, over])
    fact = L.layers_fact(items)[1]
    marker = json.loads((Path(fact["path"]) / L.MARKER).read_text())
    assert marker["installed"] == ["dfl-b==2.0", "dfl-gpu==2.0", "dfl-top==1.0"]
    assert marker["held_back"] == [{"name": "dfl-gpu", "version": "2.0+cu130", "why": "the layer pins dfl-gpu==2.0"}]
    assert fact["exclude"] == ["dfl-new"]
    assert run_py(fact["python"], "import dfl_gpu; print(dfl_gpu.__version__)") == "2.0"
    env = json.loads(run_py(fact["python"], C_ENV))
    problems = C.check(C.installed_distributions(fact["sys_path_order"]), env)
    assert [(p["owner"], p["key"], p["problem"]) for p in problems] == [("dfl-top", "dfl-new", "missing")]


def test_a_layer_must_run_its_parents_python(tmp_path):
    def runner(argv, env=None, timeout=None):  # two interpreters, as inspect_interpreter reads them
        version = "3.11.7" if argv[0].endswith("python3.11") else "3.12.3"
        return 0, json.dumps({"executable": argv[0], "version": version, "implementation": "cpython",
                              "site": [f"/x/{version}"], "machine": "x86_64", "libc": ["glibc", "2.36"]}), ""

    layers = [{"name": "base", "python": "/usr/bin/python3.11", "requirements": ["dfl-a==1.0"]},
              {"name": "ov", "parent": "base", "python": "/usr/bin/python3.12", "requirements": ["dfl-b==2.0"]}]
    with pytest.raises(L.LayerError, match="layer ov: python: /usr/bin/python3.12 is Python 3.12 but its parent "
                                           "base runs Python 3.11"):
        L.LayerBuilder(str(tmp_path), "uv", runner=runner).plan(layers)
    layers[1].pop("python")  # inherited: fine
    assert [i["interpreter"]["version"] for i in L.LayerBuilder(str(tmp_path), "uv", runner=runner).plan(layers)] == [
        "3.11.7", "3.11.7"]


@needs_uv
def test_wheelhouse_locks_the_closure_and_fetches_only_the_layers_own_wheels(tmp_path, index):
    """Controller side with the real uv (find-links only): a built base, then the overlay over it."""
    target = {"python_version": f"{sys.version_info[0]}.{sys.version_info[1]}", "arch": "x86_64",
              "glibc": "2.28", "implementation": "cp"}
    specs = L.normalise_layers([
        {"name": "base", "python": sys.executable, "no_index": True, "find_links": [str(index)],
         "requirements": ["dfl-a==1.0", "dfl-b==2.0"]},
        {"name": "overlay", "parent": "base", "no_index": True, "find_links": [str(index)],
         "requirements": ["dfl-top==1.0"]},
    ])
    fetched = []

    def fetch(url, dest):
        fetched.append(os.path.basename(dest).split(".part-")[0])
        shutil.copyfile(url[len("file://"):], dest)

    res = WH.ensure_wheelhouse(str(tmp_path), specs, {"base": target, "overlay": target}, {}, [UV], fetch=fetch)
    by_source = {(e["name"], e["version"], e["source"]) for e in res["locks"]["overlay"]}
    assert by_source == {("dfl-a", "1.0", "parent"), ("dfl-b", "2.0", "parent"), ("dfl-top", "1.0", "layer"),
                         ("dfl-new", "1.0", "layer"), ("dfl-gpu", "2.0+cu128", "layer")} or by_source == {
        ("dfl-a", "1.0", "parent"), ("dfl-b", "2.0", "parent"), ("dfl-top", "1.0", "layer"),
        ("dfl-new", "1.0", "layer"), ("dfl-gpu", "2.0", "layer")}
    assert sorted(fetched) == sorted({e["filename"] for lk in res["locks"].values() for e in lk
                                      if e["source"] == "layer"})
    assert not any(e.get("filename") for e in res["locks"]["overlay"] if e["source"] == "parent")
    lock = json.loads(Path(res["lock_files"]["overlay"]).read_text())
    assert lock["parent_freeze"] == ["dfl-a==1.0", "dfl-b==2.0"]
    # a changed base is another lock (its freeze is part of the key)
    specs2 = [dict(specs[0], requirements=["dfl-a==1.1", "dfl-b==2.0"]), specs[1]]
    res2 = WH.ensure_wheelhouse(str(tmp_path), specs2, {"base": target, "overlay": target}, {}, [UV], fetch=fetch)
    assert res2["lock_files"]["overlay"] != res["lock_files"]["overlay"] and "overlay" in res2["resolved"]
    assert ("dfl-a", "1.1", "parent") in {(e["name"], e["version"], e["source"]) for e in res2["locks"]["overlay"]}
    # and an existing base described by its host: its distributions become the stand-ins
    dists = [{"name": "dfl-a", "key": "dfl-a", "version": "1.0", "requires": [], "requires_python": None,
              "provides_extra": [], "location": "/srv/venv/lib/site-packages"},
             {"name": "dfl-gpu", "key": "dfl-gpu", "version": "2.0+cu130", "requires": ["dfl-a"],
              "requires_python": None, "provides_extra": [], "location": "/srv/venv/lib/site-packages"}]
    specs3 = L.normalise_layers([{"name": "train", "existing_path": "/srv/venv"},
                                 {"name": "overlay", "parent": "train", "python": sys.executable, "no_index": True,
                                  "find_links": [str(index)], "requirements": ["dfl-top==1.0"]}])
    res3 = WH.ensure_wheelhouse(str(tmp_path), specs3, {"overlay": target}, {"train": dists}, [UV], fetch=fetch)
    got = {(e["name"], e["version"], e["source"]) for e in res3["locks"]["overlay"]}
    assert ("dfl-gpu", "2.0+cu130", "parent") in got and ("dfl-a", "1.0", "parent") in got
    assert W.sha256_file(tmp_path / "files" / "dfl_top-1.0-py3-none-any.whl")


@needs_uv
def test_probe_consistency_gates_on_the_closure_and_reports_the_rest(tmp_path, index, offline):
    from ansible.module_utils.dflash_layers import probe as P

    train = tmp_path / "train-venv"
    venv_with(train, [offline / "dfl_a-1.0-py3-none-any.whl", offline / "dfl_gpu-2.0+cu130-py3-none-any.whl"])
    # the hand-listed way (no_deps, exactly the pins): dfl-top without dfl-new and dfl-b
    over = computed(index, no_deps=True, requirements=["dfl-top==1.0"])
    items, _, _ = L.LayerBuilder(str(tmp_path / "prefix"), UV).ensure(
        [{"name": "train", "existing_path": str(train)}, over])
    fact = L.layers_fact(items)[1]
    assert fact["closure"] == ["dfl-top==1.0"]
    res = P.probe_consistency(fact["python"], closure=fact["closure"], excluded=["dfl-new"])
    assert not res["ok"] and res["distributions"] == 3
    assert [p["message"] for p in res["problems"]] == ["dfl-top 1.0 requires dfl-b>=2.0, which is not installed"]
    assert [p["key"] for p in res["excluded"]] == ["dfl-new"]
    probe = {"consistency": res}
    assert P.gate(probe) == ["consistency: dfl-top 1.0 requires dfl-b>=2.0, which is not installed"]
    assert "consistency: FAILED (3 distributions; 1 unmet, 1 excluded on purpose, 0 outside the closure)" in P.summary(
        probe)
    # without a closure every owner counts; a broken interpreter is a problem, not a crash
    assert len(P.probe_consistency(fact["python"])["problems"]) == 2
    bad = P.probe_consistency(str(tmp_path / "no-python"))
    assert not bad["ok"] and "cannot read the environment" in bad["error"]
    assert P.gate({"consistency": bad})[0].startswith("consistency: FileNotFoundError")


def test_view_paths_runs_pth_imports_with_the_standard_library(tmp_path):
    """A base venv's .pth lines import stdlib modules (the H200's torch venv did): the view keeps the
    standard library importable while they run, and reports only the site dirs and what they add."""
    site_a, extra = tmp_path / "a", tmp_path / "extra"
    site_a.mkdir()
    extra.mkdir()
    (site_a / "zz-uses-stdlib.pth").write_text("import textwrap, traceback; textwrap.dedent('x')\n")
    (site_a / "more.pth").write_text(f"{extra}\n")

    def runner(cmd, timeout=None):
        p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    got = O.view_paths(sys.executable, [str(site_a)], runner)
    assert got == [str(site_a), str(extra)]
