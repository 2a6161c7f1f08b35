"""Releases across sglang versions: each instance records its version, venv and tree; an instance of another version
than the host's runs its own venv (DFLASH_PYTHON, through dflash-launch) and tree (PYTHONPATH); an upgrade of the
host's version is a new release whose manifest says what changed; pruning keeps every venv and tree a kept release
uses, the other version's too; the wait reads each instance's version from the manifest."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from ansible.module_utils.dflash_common import sglang
from ansible.module_utils.dflash_layers.build import prune_candidates as layer_prune_candidates
from ansible.module_utils.dflash_release import ops, order, target
from ansible.module_utils.dflash_release.wait import diagnose_unit
from ansible.module_utils.dflash_tree.prune import prune_candidates as tree_prune_candidates
from test_release import FP, TREE

ROOT = Path(__file__).resolve().parents[3]


def layer(tmp_path, name, h):
    p = tmp_path / "opt" / "layers" / f"{name}-{h}"
    p.mkdir(parents=True, exist_ok=True)
    return {"name": name, "path": str(p), "hash": h, "parent": None, "python": "/usr/bin/python3", "changed": False}


def entry(port, version, venv=None, tree=None):
    out = {"args": ["--model-path", "/m/q", "--port", str(port), "--speculative-algorithm", "DFLASH"],
           "env": {"CUDA_VISIBLE_DEVICES": str(port - 30000), "PYTHONPATH": tree or "/t/host"},
           "applied": [], "port": port, "base_url": f"http://127.0.0.1:{port}", "sglang_version": version}
    if venv:
        out.update(venv=venv, tree_path=tree)
    return out


def prepare(tmp_path, host_layer, flags, extra_layers=(), tree_path="/t/host", tree_version="0.5.11"):
    return ops.prepare(str(tmp_path / "opt"), [host_layer], dict(TREE, sglang_version=tree_version, path=tree_path),
                       flags, FP, "abc", False, host="ct200", extra_layers=list(extra_layers))


def env_file(tmp_path, res, name):
    return (Path(res["path"]) / "instances" / f"{name}.env").read_text()


def test_an_instance_of_another_version_runs_its_own_venv_and_tree(tmp_path):
    host = layer(tmp_path, "overlay", "a" * 12)
    other = layer(tmp_path, "overlay", "b" * 12)
    flags = {"old": entry(30001, "0.5.11", host["path"], "/t/sglang-0.5.11-a"),
             "new": entry(30002, "0.5.17", other["path"], "/t/sglang-0.5.17-b")}
    res = prepare(tmp_path, host, flags, [other], tree_path="/t/sglang-0.5.11-a")
    m = res["manifest"]
    assert m["venv"] == host["path"] and m["tree_path"] == "/t/sglang-0.5.11-a"
    assert [x["path"] for x in m["layers"]] == [host["path"], other["path"]]
    assert {n: (i["sglang_version"], i["venv"], i["tree_path"]) for n, i in m["instances"].items()} == {
        "old": ("0.5.11", host["path"], "/t/sglang-0.5.11-a"), "new": ("0.5.17", other["path"], "/t/sglang-0.5.17-b")}
    # the unit starts <current>/venv/bin/python: the other version's instance says which interpreter to become
    assert "DFLASH_PYTHON" not in env_file(tmp_path, res, "old")
    assert f'DFLASH_PYTHON="{other["path"]}/bin/python"' in env_file(tmp_path, res, "new")
    assert 'PYTHONPATH="/t/sglang-0.5.17-b"' in env_file(tmp_path, res, "new")
    # the wait and the smoke test read each instance's version from the manifest
    got = target.load_manifest_instances(res["path"])
    assert {i["name"]: i["sglang_version"] for i in got} == {"new": "0.5.17", "old": "0.5.11"}
    # an unchanged re-run finds the same release
    again = prepare(tmp_path, host, flags, [other], tree_path="/t/sglang-0.5.11-a")
    assert not again["created"] and again["id"] == res["id"]


def test_an_upgrade_of_the_hosts_version_is_a_new_release_and_rollback_crosses_back(tmp_path):
    v11 = layer(tmp_path, "overlay", "a" * 12)
    v17 = layer(tmp_path, "overlay", "b" * 12)
    first = prepare(tmp_path, v11, {"main": entry(30001, "0.5.11", v11["path"], "/t/sglang-0.5.11-a")},
                    tree_path="/t/sglang-0.5.11-a")
    ops.activate(str(tmp_path / "opt"), first["id"])
    ops.mark(str(tmp_path / "opt"), first["id"], "healthy", {})
    up = prepare(tmp_path, v17, {"main": entry(30001, "0.5.17", v17["path"], "/t/sglang-0.5.17-b")},
                 tree_path="/t/sglang-0.5.17-b", tree_version="0.5.17")
    assert up["created"] and up["changed_instances"] == ["main"] and up["previous"] == first["id"]
    ops.activate(str(tmp_path / "opt"), up["id"])
    plan = ops.plan_rollback(str(tmp_path / "opt"))
    assert plan["target"] == first["id"] and plan["changed_instances"] == ["main"]
    assert "sglang: 0.5.17 -> 0.5.11" in plan["changes"]
    assert "instance main: sglang 0.5.17 -> 0.5.11; env changed" in plan["changes"]
    # back to 0.5.17 by id (rollback.yml -e rollback_to=...)
    ops.activate(str(tmp_path / "opt"), first["id"])
    fwd = ops.plan_rollback(str(tmp_path / "opt"), up["id"])
    assert fwd["target"] == up["id"] and "sglang: 0.5.11 -> 0.5.17" in fwd["changes"]


def test_pruning_keeps_every_venv_and_tree_a_kept_release_uses(tmp_path):
    v11 = layer(tmp_path, "overlay", "a" * 12)
    v17 = layer(tmp_path, "overlay", "b" * 12)
    gone = layer(tmp_path, "overlay", "c" * 12)
    trees = tmp_path / "opt" / "trees"
    for name in ("sglang-0.5.11-aaaaaaaaaaaa", "sglang-0.5.17-bbbbbbbbbbbb", "sglang-0.5.17-cccccccccccc"):
        (trees / name).mkdir(parents=True)
    flags = {"old": entry(30001, "0.5.11", v11["path"], str(trees / "sglang-0.5.11-aaaaaaaaaaaa")),
             "new": entry(30002, "0.5.17", v17["path"], str(trees / "sglang-0.5.17-bbbbbbbbbbbb"))}
    res = prepare(tmp_path, v11, flags, [v17], tree_path=str(trees / "sglang-0.5.11-aaaaaaaaaaaa"))
    ops.activate(str(tmp_path / "opt"), res["id"])
    pruned = ops.prune(str(tmp_path / "opt"), keep=1)
    kept = pruned["kept_manifests"]
    assert kept[0]["instances"]["new"] == {"venv": v17["path"], "tree_path": str(trees / "sglang-0.5.17-bbbbbbbbbbbb")}
    assert str(trees / "sglang-0.5.17-bbbbbbbbbbbb") in pruned["referenced_trees"]
    assert v17["path"] in pruned["referenced_layers"]
    # the tree stage's and the layers stage's own prune, from those manifests
    assert tree_prune_candidates(sorted(str(p) for p in trees.iterdir()), kept, trees_dir=str(trees)) == [
        str(trees / "sglang-0.5.17-cccccccccccc")]
    layer_dirs = [v11["path"], v17["path"], gone["path"]]
    assert layer_prune_candidates(layer_dirs, kept, keep=0) == [gone["path"]]
    assert order.referenced_paths(kept)["trees"] == sorted([str(trees / "sglang-0.5.11-aaaaaaaaaaaa"),
                                                           str(trees / "sglang-0.5.17-bbbbbbbbbbbb")])


def _launch_module():
    spec = importlib.util.spec_from_file_location("dflash_launch", ROOT / "roles/dflash_instances/files/dflash-launch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dflash_launch_becomes_the_instances_own_interpreter(tmp_path):
    launch = _launch_module()
    env = {"DFLASH_PYTHON": "/opt/dflash/layers/overlay-b/bin/python", "X": "1"}
    assert launch.reexec_target(env, ["-m", "sglang.launch_server", "--port", "1"], "/opt/dflash/libexec/l") == [
        "/opt/dflash/layers/overlay-b/bin/python", "/opt/dflash/libexec/l", "-m", "sglang.launch_server", "--port", "1"]
    assert env == {"X": "1"}  # once only: the new process does not exec again
    assert launch.reexec_target({}, ["x.py"], "/l") is None
    # for real: a script run by the launcher reports the interpreter it ended up in
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    script = tmp_path / "who.py"
    script.write_text("import json, os, sys\nprint(json.dumps([sys.prefix, os.environ.get('DFLASH_PYTHON')]))\n")
    out = subprocess.run([sys.executable, str(ROOT / "roles/dflash_instances/files/dflash-launch.py"), str(script)],
                         env=dict(os.environ, DFLASH_PYTHON=str(venv / "bin" / "python")), capture_output=True,
                         text=True, check=True)
    assert json.loads(out.stdout) == [str(venv), None]


class _Logs:
    log_lags = False
    log_source = staticmethod(lambda unit: "journal")

    def has_logs(self):
        return True

    def logs(self, unit, since=None):
        return "ImportError: cannot import name 'StructuralTag' from 'xgrammar'\n"


def test_the_diagnosis_of_a_failed_instance_speaks_to_its_version():
    from ansible.module_utils.dflash_diagnose.engine import diagnose_text

    d17 = diagnose_unit(_Logs(), "dflash-new.service", 0, diagnose_text, sglang=sglang.facts("0.5.17").host())
    assert "xgrammar==0.2.1 (what sglang 0.5.17 pins)" in d17["remedy"]
    d11 = diagnose_unit(_Logs(), "dflash-old.service", 0, diagnose_text, sglang=sglang.facts("0.5.11").host())
    assert "xgrammar==0.1.32 (what sglang 0.5.11 pins)" in d11["remedy"]
