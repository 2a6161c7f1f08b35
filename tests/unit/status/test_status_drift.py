"""Drift: the unit file, env file, links and tree of the current release against what it recorded, on a host made
by the release stage's own code (conftest.deploy)."""

from __future__ import annotations

import json
import os

from ansible.module_utils.dflash_release import ops
from ansible.module_utils.dflash_release.manifest import EXTRA_KEYS
from ansible.module_utils.dflash_release.store import read_json
from ansible.module_utils.dflash_status.drift import drift
from status_host import FP, deploy, flags, make_tree


def manifest_of(h):
    return read_json(os.path.join(h["release_dir"], "manifest.json"))


def by_kind(found):
    return {(d["kind"], d["instance"]): d for d in found}


def test_a_host_as_deployed_has_no_drift(host):
    found = drift(host["prefix"], manifest_of(host), host["unit_dir"])
    assert {(d["kind"], d["state"]) for d in found} == {("unit", "same"), ("env", "same"), ("tree", "same")}


def test_a_hand_edited_unit_file_is_named_with_the_lines_that_changed(host):
    unit = os.path.join(host["unit_dir"], "dflash-main.service")
    with open(unit, encoding="utf-8") as fh:
        text = fh.read()
    with open(unit, "w", encoding="utf-8") as fh:
        fh.write(text.replace("RestartSec=5", "RestartSec=1") + "Environment=EXTRA=1\n")
    d = by_kind(drift(host["prefix"], manifest_of(host), host["unit_dir"]))[("unit", "main")]
    assert d["state"] == "changed" and d["path"] == unit
    assert d["detail"].startswith(f"differs from what release {host['id']} put live: ")
    assert "-RestartSec=5 +RestartSec=1 +Environment=EXTRA=1" in d["detail"]
    assert "-RestartSec=5" in d["diff"] and "+RestartSec=1" in d["diff"]


def test_a_hand_edited_env_file_says_which_entries(host):
    env = os.path.join(host["release_dir"], "instances", "main.env")
    with open(env, encoding="utf-8") as fh:
        text = fh.read()
    text = text.replace("--enable-metrics", "--enable-metrics --disable-cuda-graph")
    with open(env, "w", encoding="utf-8") as fh:
        fh.write(text + 'NCCL_DEBUG="INFO"\n')
    d = by_kind(drift(host["prefix"], manifest_of(host), host["unit_dir"]))[("env", "main")]
    assert d["state"] == "changed" and d["path"] == env
    assert d["detail"] == (f"differs from what release {host['id']} wrote: DFLASH_ARGS +--disable-cuda-graph; "
                           "NCCL_DEBUG added ('INFO')")


def test_a_secret_changed_by_hand_is_told_without_its_value(tmp_path):
    h = deploy(tmp_path, secrets={"main": {"DFLASH_API_KEY": "sk-lab-first"}})
    env = os.path.join(h["release_dir"], "instances", "main.env")
    with open(env, encoding="utf-8") as fh:
        text = fh.read()
    assert "sk-lab-first" in text
    assert by_kind(drift(h["prefix"], manifest_of(h), h["unit_dir"]))[("env", "main")]["state"] == "same"
    with open(env, "w", encoding="utf-8") as fh:
        fh.write(text.replace("sk-lab-first", "sk-lab-second"))
    found = drift(h["prefix"], manifest_of(h), h["unit_dir"])
    d = by_kind(found)[("env", "main")]
    assert d["state"] == "changed" and d["detail"].endswith("a comment, spacing or a secret's value")
    assert "sk-lab" not in json.dumps(found)
    # removed: said by name only
    with open(env, "w", encoding="utf-8") as fh:
        fh.write("\n".join(ln for ln in text.splitlines() if not ln.startswith("DFLASH_API_KEY")) + "\n")
    assert "DFLASH_API_KEY removed" in by_kind(drift(h["prefix"], manifest_of(h), h["unit_dir"]))[("env", "main")][
        "detail"]


def test_missing_files_and_a_moved_link(host):
    os.unlink(os.path.join(host["unit_dir"], "dflash-main.service"))
    os.unlink(os.path.join(host["release_dir"], "instances", "main.env"))
    link = os.path.join(host["release_dir"], "venv")
    os.unlink(link)
    os.symlink("/opt/elsewhere", link)
    found = by_kind(drift(host["prefix"], manifest_of(host), host["unit_dir"]))
    assert found[("unit", "main")]["state"] == "missing" and found[("env", "main")]["state"] == "missing"
    assert found[("link", None)]["state"] == "changed"
    assert found[("link", None)]["detail"].startswith("points at /opt/elsewhere, the release says ")


def test_a_patched_file_of_the_tree_changed_by_hand(host):
    path = os.path.join(host["tree"]["path"], "sglang", "srt", "server_args.py")
    os.chmod(path, 0o644)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("# hot fix\n")
    d = by_kind(drift(host["prefix"], manifest_of(host), host["unit_dir"]))[("tree", None)]
    assert d["state"] == "changed" and d["detail"] == "files differ from the manifest: sglang/srt/server_args.py"
    # not hashed when asked not to
    assert ("tree", None) not in by_kind(drift(host["prefix"], manifest_of(host), host["unit_dir"], check_tree=False))


def test_a_release_from_before_the_digests_is_read_all_the_same(host):
    mpath = os.path.join(host["release_dir"], "manifest.json")
    old = {k: v for k, v in read_json(mpath).items() if k not in EXTRA_KEYS}
    with open(mpath, "w", encoding="utf-8") as fh:
        json.dump(old, fh)
    found = by_kind(drift(host["prefix"], old, host["unit_dir"]))
    assert found[("unit", "main")]["state"] == "same" and "recorded no digest" in found[("unit", "main")]["detail"]
    assert found[("env", "main")]["state"] == "same"
    unit = os.path.join(host["unit_dir"], "dflash-main.service")
    with open(unit, "a", encoding="utf-8") as fh:
        fh.write("Nice=5\n")
    env = os.path.join(host["release_dir"], "instances", "main.env")
    with open(env, "a", encoding="utf-8") as fh:
        fh.write('X="1"\n')
    found = by_kind(drift(host["prefix"], old, host["unit_dir"]))
    assert found[("unit", "main")]["state"] == "changed" and "+Nice=5" in found[("unit", "main")]["detail"]
    assert found[("env", "main")]["detail"] == ("differs from the manifest's entries (the release recorded no "
                                                "digest): X added ('1')")
    # no rendered copy either: unknown, not drift
    os.unlink(os.path.join(host["staged"], "dflash-main.service"))
    assert by_kind(drift(host["prefix"], old, host["unit_dir"]))[("unit", "main")]["state"] == "unrecorded"


def test_an_instance_on_another_sglang_version_has_its_own_tree_checked(tmp_path):
    """An instance whose sglang_version is not the host's runs its version's venv and tree (the release stage
    records them on the instance): status checks that tree against its own manifest and says when it is gone."""
    prefix = tmp_path / "opt"
    venv, other_venv = prefix / "layers" / "base-000000000001", prefix / "layers" / "sglang-0.5.17-000000000002"
    for d in (venv, other_venv):
        d.mkdir(parents=True)
    tree = make_tree(str(prefix / "trees"), {"sglang/__init__.py": b"__version__ = '0.5.11'\n"})
    other = make_tree(str(prefix / "trees"), {"sglang/__init__.py": b"__version__ = '0.5.17'\n"})
    f = flags(30001)
    f["old"] = dict(flags(30002)["main"], sglang_version="0.5.17", venv=str(other_venv), tree_path=other["path"])
    layers = [{"name": "base", "path": str(venv), "hash": "000000000001", "parent": None, "python": "/usr/bin/python3"}]
    res = ops.prepare(str(prefix), layers, tree, f, FP, "abc123", False, host="ct200",
                      extra_layers=[{"name": "sglang-0.5.17", "path": str(other_venv), "hash": "000000000002"}])
    ops.activate(str(prefix), res["id"])
    m = read_json(os.path.join(prefix, "releases", res["id"], "manifest.json"))
    assert m["instances"]["old"]["tree_path"] == other["path"]
    trees = {(d["instance"], d["path"]): d["state"] for d in drift(str(prefix), m, str(tmp_path)) if d["kind"] == "tree"}
    assert trees == {(None, tree["path"]): "same", ("old", other["path"]): "same"}
    path = os.path.join(other["path"], "sglang", "__init__.py")
    os.chmod(path, 0o644)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("# hot fix\n")
    d = by_kind(drift(str(prefix), m, str(tmp_path)))[("tree", "old")]
    assert d["state"] == "changed" and d["detail"] == "files differ from the manifest: sglang/__init__.py"
    os.rename(other_venv, str(other_venv) + ".gone")
    gone = [d for d in drift(str(prefix), m, str(tmp_path)) if d["path"] == str(other_venv)]
    assert gone == [{"kind": "link", "instance": "old", "path": str(other_venv), "state": "missing",
                     "detail": "the venv of sglang 0.5.17 is gone", "diff": []}]
