"""Releases never take an instance off the host unless asked, and leave nothing loose under the prefix:
the absent-instance plan, carrying kept instances into a new release, staging left-overs, world-writable
files, Ansible temp dirs of an earlier boot."""

from __future__ import annotations

import json
import os
import time

from ansible.module_utils.dflash_release import journal, ops

LAYERS = [{"name": "lab", "path": "/opt/dflash/layers/lab-1", "hash": "1", "parent": None, "python": "/usr/bin/python3"}]
CUR = {"id": "r1", "instances": {"old": {"args": ["--port", "30001"]}, "keep": {"args": ["--port", "30002"]}}}
UNITS = ["dflash-old.service", "dflash-keep.service", "dflash-stage-keep.service", "dflash-guard.service",
         "dflash-manual.service"]


def flags(*names, **extra):
    return {n: {"args": ["--model-path", "/m", "--port", str(30000 + i)], "env": {}, "applied": [], "skipped": [],
                **extra.get(n, {})} for i, n in enumerate(names, start=1)}


def test_absent_instances_are_kept_unless_removal_is_asked():
    plan = ops.absent_plan(CUR, UNITS, flags("keep"))
    assert plan["carry"] == ["old"] and plan["kept_units"] == ["dflash-manual.service"]
    # keep no longer stages a model: its staging unit goes, its cache stays
    assert plan["remove"] == [{"instance": "keep", "unit": "dflash-stage-keep.service", "stage_unit": False,
                               "cache": False}]
    assert ops.absent_plan(CUR, UNITS, flags("keep", keep={"model_source": "/data/k"}))["remove"] == []


def test_removal_by_name_and_of_everything_absent():
    asked = ops.absent_plan(CUR, UNITS, flags("keep", keep={"model_source": "/d"}), remove=["old", "nothere"])
    assert asked["carry"] == [] and [r["instance"] for r in asked["remove"]] == ["old"]
    assert asked["unknown"] == ["nothere"]
    everything = ops.absent_plan(CUR, UNITS, flags("keep", keep={"model_source": "/d"}), remove_absent=True)
    assert [r["instance"] for r in everything["remove"]] == ["manual", "old"]
    assert "guard" not in json.dumps(everything)


def test_prepare_carries_a_kept_instance_unchanged(tmp_path):
    prefix = str(tmp_path)
    first = ops.prepare(prefix, LAYERS, None, flags("old", "keep"), None, "rev", False)
    os.symlink(f"releases/{first['id']}", tmp_path / "current")
    old_env = (tmp_path / "releases" / first["id"] / "instances" / "old.env").read_text()
    second = ops.prepare(prefix, LAYERS, None, flags("keep", keep={"env": {"X": "1"}}), None, "rev", False)
    assert second["carried"] == ["old"] and second["remove"] == []
    m = second["manifest"]["instances"]
    assert m["old"]["carried"] and m["old"]["digest"] == first["manifest"]["instances"]["old"]["digest"]
    assert (tmp_path / "releases" / second["id"] / "instances" / "old.env").read_text() == old_env
    assert second["changed_instances"] == ["keep"]  # old is not restarted
    removed = ops.prepare(prefix, LAYERS, None, flags("keep", keep={"env": {"X": "1"}}), None, "rev", False,
                          remove=["old"])
    assert removed["carried"] == [] and [r["instance"] for r in removed["remove"]] == ["old"]
    assert "old" not in removed["manifest"]["instances"]


def test_prepare_sweeps_staging_and_world_writable_files(tmp_path):
    (tmp_path / "releases" / ".tmp-20260101T000000-aaaaaaaa" / "instances").mkdir(parents=True)
    os.symlink("releases/x", tmp_path / ".tmp-current-123")
    lock = tmp_path / "cache" / "uv" / ".lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    os.chmod(lock, 0o666)
    os.symlink("/tmp", tmp_path / "cache" / "link")
    out = ops.prepare(str(tmp_path), LAYERS, None, flags("a"), None, "rev", False)
    assert sorted(os.path.basename(p) for p in out["swept"]) == [".tmp-20260101T000000-aaaaaaaa", ".tmp-current-123"]
    assert oct(lock.stat().st_mode & 0o777) == "0o664" and out["world_writable_fixed"] == 1
    assert not list(tmp_path.rglob(".tmp-*"))


def test_ansible_temp_dirs_of_an_earlier_boot(tmp_path):
    old, new, other = tmp_path / "ansible-tmp-1-2-3", tmp_path / "ansible-tmp-4-5-6", tmp_path / "keepme"
    for d in (old, new, other):
        d.mkdir()
    booted = time.time() - 60
    os.utime(old, (booted - 3600, booted - 3600))
    os.utime(other, (booted - 3600, booted - 3600))
    assert journal.sweep_before_boot(str(tmp_path), booted) == [str(old)]
    assert new.exists() and other.exists()
    assert journal.sweep_before_boot(str(tmp_path), None) == []
    assert journal.boot_time() is None or journal.boot_time() < time.time()


def test_what_an_interrupted_run_left_is_swept_and_said_with_its_size(tmp_path):
    import fcntl

    prefix, units = tmp_path / "opt", tmp_path / "units"
    layers, trees = prefix / "layers", prefix / "trees"
    stage = trees / ".tmp-stage-k2j3h4-dflash-tree"  # the tree stage's upload of the sglang wheel
    stage.mkdir(parents=True)
    (stage / "sglang-0.5.11-cp312-cp312-manylinux_2_34_x86_64.whl").write_bytes(b"w" * 7000)
    (trees / ".tmp-sglang-0.5.11-abc-x1y2").mkdir()  # a tree build killed half-way
    (trees / "sglang-0.5.11-abc").mkdir()  # a finished tree: kept
    (layers / ".tmp-overlay-8c1f0e2a9b3d-5e6f7a8b" / "bin").mkdir(parents=True)
    (layers / ".tmp-overlay-8c1f0e2a9b3d-5e6f7a8b" / "bin" / "python").write_bytes(b"p" * 300)
    (prefix / "releases" / ".tmp-20260101T000000-aaaaaaaa").mkdir(parents=True)
    (prefix / "releases" / "r1" / "instances").mkdir(parents=True)
    (prefix / "releases" / "r1" / "instances" / ".tmp-a.env-123").write_text("x")
    (prefix / ".tmp-activation.json-99").write_text("{}")
    units.mkdir()
    (units / ".tmp-dflash-a.service-77").write_text("[Unit]\n")
    (units / "dflash-a.service").write_text("[Unit]\n")
    seen = ops.sweep_leftovers(str(prefix), [str(layers), str(trees)], str(units), check_mode=True)
    sizes = {os.path.relpath(r["path"], tmp_path): r["bytes"] for r in seen["removed"]}
    assert sizes == {"opt/.tmp-activation.json-99": 2, "opt/releases/.tmp-20260101T000000-aaaaaaaa": 0,
                     "opt/releases/r1/instances/.tmp-a.env-123": 1, "opt/trees/.tmp-stage-k2j3h4-dflash-tree": 7000,
                     "opt/trees/.tmp-sglang-0.5.11-abc-x1y2": 0, "opt/layers/.tmp-overlay-8c1f0e2a9b3d-5e6f7a8b": 300,
                     "units/.tmp-dflash-a.service-77": 7}
    assert stage.exists()  # check mode: said, not removed
    # a layer build holding its lock: its directory is left alone
    with open(layers / ".dflash-layers.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        busy = ops.sweep_leftovers(str(prefix), [str(layers), str(trees)], str(units))
    assert busy["skipped"] == [f"{layers}: a layer build holds its lock (left alone)"]
    assert (layers / ".tmp-overlay-8c1f0e2a9b3d-5e6f7a8b").exists() and not stage.exists()
    assert ops.sweep_leftovers(str(prefix), [str(layers), str(trees)], str(units))["removed"][0]["path"].endswith(
        ".tmp-overlay-8c1f0e2a9b3d-5e6f7a8b")
    left = sorted(os.path.relpath(os.path.join(r, n), tmp_path) for r, ds, fs in os.walk(tmp_path) for n in ds + fs
                  if n.startswith(".tmp-"))
    assert left == [] and (trees / "sglang-0.5.11-abc").is_dir() and (units / "dflash-a.service").exists()
