"""Releases: ids, manifests, ordering from manifests (not mtimes), keep-N, pruning, env files."""

import datetime as dt
import hashlib
import json
import os
import time

import pytest
from ansible.module_utils.dflash_release import envfile, journal, manifest, ops, order, store

FP = {
    "gpu_count": 1,
    "gpus": [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "uuid": "GPU-1",
            "sm": "9.0",
            "memory_total_mib": 143771,
            "memory_used_mib": 0,
            "processes": [],
            "healthy": True,
            "problem": None,
        }
    ],
    "driver_version": "580.159.04",
    "driver_cuda_version": "13.0",
    "problems": [],
}


def flags(port=30001, extra=()):
    return {
        "main": {
            "args": ["--model-path", "/m/q", "--port", str(port), "--speculative-algorithm", "DFLASH", *extra],
            "env": {"CUDA_VISIBLE_DEVICES": "1", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"},
            "applied": [{"rule": "sm120_triton", "reason": "flashinfer JIT rejects SM 12.0", "flags": []}],
        }
    }


def layers(tmp_path, h="aaaa"):
    p = tmp_path / "layers" / f"sglang-{h}"
    p.mkdir(parents=True, exist_ok=True)
    return [{"name": "sglang", "path": str(p), "hash": h, "parent": None, "python": "3.12", "changed": True}]


TREE = {"sglang_version": "0.5.11", "wheel_sha256": "ab" * 32, "patches": [], "files": {"a.py": "00"}}


def prep(tmp_path, **kw):
    args = {
        "prefix": str(tmp_path / "opt"),
        "layers": layers(tmp_path),
        "tree": dict(TREE, path=str(tmp_path / "opt/trees/t1")),
        "flags": flags(),
        "fingerprint": FP,
        "revision": "abc123",
        "dirty": False,
        "host": "ct200",
    }
    args.update(kw)
    return ops.prepare(**args)


def test_fingerprint_digest_ignores_volatile_fields():
    busy = json.loads(json.dumps(FP))
    busy["gpus"][0]["memory_used_mib"] = 80000
    busy["gpus"][0]["processes"] = [{"pid": 42, "name": "python", "used_mib": 80000}]
    busy["gpus"][0]["process_units"] = ["dflash-main.service"]
    busy["gpus"][0]["healthy"] = False
    busy["problems"] = ["GPU 0 busy"]
    assert manifest.fingerprint_digest(busy) == manifest.fingerprint_digest(FP)
    newer = json.loads(json.dumps(FP))
    newer["driver_version"] = "590.10"
    assert manifest.fingerprint_digest(newer) != manifest.fingerprint_digest(FP)
    assert manifest.fingerprint_digest(None) is None


def test_env_file_quoting_round_trips_and_refuses_bad_input():
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "WEIRD": 'a "q" $HOME `x` back\\slash', "FLAG": True}
    text = envfile.render_env_file(env, ["--port", "30001", '--json={"a":1}'], "ct200: instance main")
    parsed = envfile.parse_env_file(text)
    assert parsed["WEIRD"] == env["WEIRD"]
    assert parsed["FLAG"] == "1"
    assert parsed["DFLASH_ARGS"] == '--port 30001 --json={"a":1}'
    assert text.index("CUDA_VISIBLE_DEVICES") < text.index("DFLASH_ARGS")
    with pytest.raises(manifest.ReleaseError, match=r"ct200: instance main: args\[1\]"):
        envfile.render_env_file({}, ["--json-model-override-args", '{"a": 1}'], "ct200: instance main")
    with pytest.raises(manifest.ReleaseError, match="env.X: a value may not contain newlines"):
        envfile.render_env_file({"X": "a\nb"}, [], "ct200: instance main")
    with pytest.raises(manifest.ReleaseError, match="not a valid environment variable name"):
        envfile.render_env_file({"BAD-NAME": "1"}, [], "ct200: instance main")


def test_first_prepare_creates_release_with_manifest_links_and_0600_env(tmp_path):
    now = dt.datetime(2026, 11, 30, 5, 6, 7, tzinfo=dt.UTC)
    res = prep(tmp_path, now=now)
    assert res["created"] and res["activate"] and res["previous"] is None
    assert res["id"].startswith("20261130T050607-") and manifest.RELEASE_ID_RE.match(res["id"])
    path = tmp_path / "opt/releases" / res["id"]
    m = json.loads((path / "manifest.json").read_text())
    assert m["id"] == res["id"] and m["sequence"] == 1 and m["toolkit"] == {"revision": "abc123", "dirty": False}
    assert m["fingerprint_digest"] == manifest.fingerprint_digest(FP)
    assert m["tree"]["files_count"] == 1 and "files" not in m["tree"]
    assert m["instances"]["main"]["applied"][0]["rule"] == "sm120_triton"
    assert os.readlink(path / "venv") == str(tmp_path / "layers/sglang-aaaa")
    envf = path / "instances/main.env"
    assert oct(envf.stat().st_mode & 0o777) == "0o600"
    assert "DFLASH_ARGS=" in envf.read_text()
    assert res["changed_instances"] == ["main"]
    assert not list((tmp_path / "opt/releases").glob(".tmp-*"))


def test_the_manifest_records_the_files_it_puts_on_the_host_and_the_fingerprint(tmp_path):
    staged = tmp_path / "opt" / "units"
    staged.mkdir(parents=True)
    (staged / "dflash-main.service").write_text("[Service]\nExecStart=/bin/true\n")
    units = [{"instance": "main", "src": str(staged / "dflash-main.service"),
              "dest": "/etc/systemd/system/dflash-main.service"}]
    res = prep(tmp_path, units=units)
    path = tmp_path / "opt/releases" / res["id"]
    m = json.loads((path / "manifest.json").read_text())
    env = (path / "instances/main.env").read_bytes()
    assert m["files"]["env"] == {"main": {"path": "instances/main.env", "sha256": hashlib.sha256(env).hexdigest()}}
    assert m["files"]["units"] == {"dflash-main.service": {
        "path": "/etc/systemd/system/dflash-main.service", "instance": "main",
        "sha256": hashlib.sha256(b"[Service]\nExecStart=/bin/true\n").hexdigest()}}
    # the fingerprint as the digest sees it (nothing volatile): the digest of the record is the release's
    assert "memory_used_mib" not in m["fingerprint"]["gpus"][0] and m["fingerprint"]["driver_version"] == "580.159.04"
    assert manifest.sha256_hex(manifest.canonical_json(m["fingerprint"])) == m["fingerprint_digest"]
    # outside the content hash: the same release whatever the unit files hold
    assert manifest.content_hash({k: v for k, v in m.items() if k in (
        "layers", "venv", "tree", "tree_path", "instances", "fingerprint_digest")}) == m["content_hash"]


def test_an_env_file_with_a_secret_is_recorded_keyed_with_the_hosts_salt(tmp_path):
    res = prep(tmp_path, secrets={"main": {"DFLASH_API_KEY": "sk-lab-1"}})
    m = res["manifest"]
    rec = m["files"]["env"]["main"]
    assert set(rec) == {"path", "hmac_sha256"} and "sk-lab-1" not in json.dumps(m)
    salt = (tmp_path / "opt/.dflash-secret-salt").read_bytes()
    env = (tmp_path / "opt/releases" / res["id"] / "instances/main.env").read_bytes()
    assert manifest.digest_of(rec, env, salt) == (rec["hmac_sha256"], rec["hmac_sha256"])
    assert manifest.digest_of(rec, env + b"X=1\n", salt)[1] != rec["hmac_sha256"]
    assert manifest.digest_of(rec, env, None) == (rec["hmac_sha256"], None)


def test_a_reused_release_from_before_the_records_gets_them_once(tmp_path):
    first = prep(tmp_path)
    ops.activate(str(tmp_path / "opt"), first["id"])
    mpath = tmp_path / "opt/releases" / first["id"] / "manifest.json"
    old = {k: v for k, v in json.loads(mpath.read_text()).items() if k not in manifest.EXTRA_KEYS}
    mpath.write_text(json.dumps(old, indent=2, sort_keys=True) + "\n")  # as an earlier toolkit wrote it
    check = prep(tmp_path, check_mode=True)
    assert check["recorded"] == ["files", "fingerprint"] and "files" not in json.loads(mpath.read_text())
    again = prep(tmp_path)
    assert again["id"] == first["id"] and not again["created"] and again["recorded"] == ["files", "fingerprint"]
    now = json.loads(mpath.read_text())
    assert now["files"]["env"]["main"]["sha256"] and now["content_hash"] == old["content_hash"]
    assert prep(tmp_path)["recorded"] == []  # recorded once: an unchanged re-run changes nothing


def test_unchanged_rerun_reuses_release_and_reports_nothing(tmp_path):
    first = prep(tmp_path)
    ops.activate(str(tmp_path / "opt"), first["id"])
    again = prep(tmp_path, now=store.utc_now() + dt.timedelta(hours=1))
    assert again["id"] == first["id"] and not again["created"] and not again["activate"]
    assert again["changed_instances"] == []
    assert len(os.listdir(tmp_path / "opt/releases")) == 1
    # volatile fingerprint change (our own server now uses GPU memory) -> still no new release
    busy = json.loads(json.dumps(FP))
    busy["gpus"][0]["memory_used_mib"] = 70000
    assert prep(tmp_path, fingerprint=busy)["id"] == first["id"]


def test_changed_flags_make_new_release_with_previous_and_only_that_instance_changed(tmp_path):
    prefix = str(tmp_path / "opt")
    fl = flags()
    fl["other"] = {"args": ["--port", "30002"], "env": {"CUDA_VISIBLE_DEVICES": "2"}}
    first = prep(tmp_path, flags=fl)
    ops.activate(prefix, first["id"])
    fl2 = json.loads(json.dumps(fl))
    fl2["main"]["args"] += ["--grammar-backend", "none"]
    second = prep(tmp_path, flags=fl2)
    assert second["created"] and second["id"] != first["id"] and second["previous"] == first["id"]
    assert second["changed_instances"] == ["main"]
    m = store.read_json(os.path.join(second["path"], "manifest.json"))
    assert m["sequence"] == 2 and m["previous"] == first["id"]
    # a new venv changes every instance
    ops.activate(prefix, second["id"])
    third = prep(tmp_path, flags=fl2, layers=layers(tmp_path, "bbbb"))
    assert third["changed_instances"] == ["main", "other"]


def test_check_mode_writes_nothing(tmp_path):
    res = prep(tmp_path, check_mode=True)
    assert res["created"] and not (tmp_path / "opt/releases").exists()
    assert ops.activate(str(tmp_path / "opt"), res["id"], check_mode=True)["changed"]
    r_act = ops.activate(str(tmp_path / "opt"), prep(tmp_path)["id"], check_mode=True)
    assert r_act["changed"] and not os.path.lexists(tmp_path / "opt/current")


def test_activate_is_atomic_relative_and_idempotent(tmp_path):
    prefix = str(tmp_path / "opt")
    res = prep(tmp_path)
    assert ops.activate(prefix, res["id"])["changed"]
    assert os.readlink(tmp_path / "opt/current") == f"releases/{res['id']}"
    assert not ops.activate(prefix, res["id"])["changed"]
    with pytest.raises(manifest.ReleaseError, match="not found"):
        ops.activate(prefix, "20260101T000000-deadbeef")
    assert ops.deactivate(prefix)["changed"] and journal.current_target(prefix) is None


def test_reused_release_with_drifted_env_file_is_repaired(tmp_path):
    res = prep(tmp_path)
    envf = tmp_path / "opt/releases" / res["id"] / "instances/main.env"
    envf.write_text("DFLASH_ARGS=--hand-edited\n")
    again = prep(tmp_path)
    assert again["id"] == res["id"] and again["repaired"]
    assert "--hand-edited" not in envf.read_text()


def _manifest(rid, seq, created="2026-01-01T00:00:00Z", **kw):
    return dict(id=rid, sequence=seq, created=created, **kw)


def test_order_comes_from_manifests_not_mtimes(tmp_path):
    prefix = str(tmp_path / "opt")
    ids = []
    for i, h in enumerate(["aaaa", "bbbb", "cccc"]):
        res = prep(tmp_path, layers=layers(tmp_path, h), now=store.utc_now() + dt.timedelta(seconds=i))
        ids.append(res["id"])
    # make the oldest release look newest on disk
    future = time.time() + 10000
    os.utime(tmp_path / "opt/releases" / ids[0], (future, future))
    listed = ops.listing(prefix)["releases"]
    assert [row["id"] for row in listed] == ids
    # sequence wins over created and id
    ms = [_manifest("b", 2, "2020"), _manifest("a", 1, "2030"), _manifest("c", 3, "2000")]
    assert [m["id"] for m in order.order_releases(ms)] == ["a", "b", "c"]


def test_keep_n_protects_current_and_previous():
    ms = [_manifest(f"r{i}", i) for i in range(1, 8)]
    kept, removed = order.plan_prune(ms, 3, protect=("r1",))
    assert kept == ["r1", "r5", "r6", "r7"] and removed == ["r2", "r3", "r4"]
    with pytest.raises(manifest.ReleaseError):
        order.plan_prune(ms, 0)


def test_prune_removes_old_releases_only_and_hands_the_kept_manifests_to_the_stages(tmp_path):
    prefix = str(tmp_path / "opt")
    trees = tmp_path / "opt/trees"
    ids = []
    for i in range(4):
        t = trees / f"sglang-0.5.11-{i:012x}"
        (t / "site-packages").mkdir(parents=True)
        res = prep(
            tmp_path,
            tree=dict(TREE, path=str(t / "site-packages")),
            now=store.utc_now() + dt.timedelta(seconds=i),
        )
        ids.append(res["id"])
    (trees / ".tmp-building").mkdir()
    ops.activate(prefix, ids[0])  # current is the oldest: it must survive keep=2
    out = ops.prune(prefix, keep=2)
    assert out["removed"] == [ids[1]]
    assert sorted(os.listdir(tmp_path / "opt/releases")) == sorted([ids[0], ids[2], ids[3]])
    # the trees are the tree stage's: release leaves them all and says what the kept releases use
    assert len(os.listdir(trees)) == 5 and "removed_trees" not in out
    assert sorted(m["id"] for m in out["kept_manifests"]) == sorted([ids[0], ids[2], ids[3]])
    assert all(m["tree_path"].endswith("/site-packages") and m["layers"] for m in out["kept_manifests"])
    assert str(tmp_path / "layers/sglang-aaaa") in out["referenced_layers"]
    from ansible.module_utils.dflash_tree import prune
    removed = prune.prune_trees(str(trees), out["kept_manifests"])
    assert [os.path.basename(p) for p in removed] == ["sglang-0.5.11-000000000001"]
    assert sorted(os.listdir(trees)) == [".tmp-building"] + [f"sglang-0.5.11-{i:012x}" for i in (0, 2, 3)]


def test_rollback_target_skips_failed_and_honours_rollback_to(tmp_path):
    prefix = str(tmp_path / "opt")
    ids = [
        prep(tmp_path, layers=layers(tmp_path, h), now=store.utc_now() + dt.timedelta(seconds=i))["id"]
        for i, h in enumerate(["aaaa", "bbbb", "cccc"])
    ]
    ops.activate(prefix, ids[2])
    ops.mark(prefix, ids[1], "failed", {"main": "crash"})
    plan = ops.plan_rollback(prefix)
    assert plan["current"] == ids[2] and plan["target"] == ids[0]
    assert any(line.startswith("venv:") for line in plan["changes"])
    assert plan["changed_instances"] == ["main"]
    assert ops.plan_rollback(prefix, ids[1])["target"] == ids[1]
    with pytest.raises(manifest.ReleaseError, match="no such release"):
        ops.plan_rollback(prefix, "20990101T000000-00000000")
    ops.activate(prefix, ids[0])
    with pytest.raises(manifest.ReleaseError, match="no release to go back to"):
        ops.plan_rollback(prefix)


def test_broken_release_dir_is_reported_not_used(tmp_path):
    res = prep(tmp_path)
    (tmp_path / "opt/releases/20260101T000000-00000000").mkdir()
    listed = ops.listing(str(tmp_path / "opt"))
    assert [row["id"] for row in listed["releases"]] == [res["id"]]
    assert "no readable manifest.json" in listed["problems"][0]


def test_mark_is_idempotent(tmp_path):
    prefix = str(tmp_path / "opt")
    rid = prep(tmp_path)["id"]
    assert ops.mark(prefix, rid, "healthy", {"main": {"tokens_per_s": 1.0}})["changed"]
    assert not ops.mark(prefix, rid, "healthy", {"main": {"tokens_per_s": 1.0}})["changed"]
    assert store.load_statuses(prefix, [rid])[rid]["status"] == "healthy"


def test_listing_lines_mark_current(tmp_path):
    prefix = str(tmp_path / "opt")
    rid = prep(tmp_path)["id"]
    ops.activate(prefix, rid)
    out = ops.listing(prefix)
    assert out["lines"][0].startswith(rid) and out["lines"][0].endswith("<- current")
    assert "rev abc123" in out["lines"][0] and "[main]" in out["lines"][0]


def test_rollback_plans_and_switches_in_one_step(tmp_path):
    prefix = str(tmp_path / "opt")
    ids = [
        prep(tmp_path, layers=layers(tmp_path, h), now=store.utc_now() + dt.timedelta(seconds=i))["id"]
        for i, h in enumerate(["aaaa", "bbbb"])
    ]
    ops.activate(prefix, ids[1])
    dry = ops.rollback(prefix, check_mode=True)
    assert dry["changed"] and dry["target"] == ids[0] and journal.current_target(prefix) == ids[1]
    assert dry["lines"][1].endswith("<- current")
    done = ops.rollback(prefix)
    assert done["changed"] and journal.current_target(prefix) == ids[0] and done["changed_instances"] == ["main"]
    assert not ops.rollback(prefix, ids[0])["changed"]
