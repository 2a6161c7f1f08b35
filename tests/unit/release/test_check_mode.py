"""Check mode tells the truth: a changed env is shown as a diff (secrets masked, a changed secret said by name),
the activation plans from the release a real run would create (which instances would restart, the unit files
that would change), and nothing is written: no release, no journal, no unit file."""

from __future__ import annotations

import os

from ansible.module_utils.dflash_release import activation, journal, ops

LAYERS = [{"name": "lab", "path": "/opt/dflash/layers/lab-1", "hash": "1", "parent": None, "python": "/usr/bin/python3"}]


class Backend:
    name = "systemd"

    def __init__(self, active=()):
        self.active = set(active)

    def is_active(self, unit):
        return unit in self.active

    def is_enabled(self, unit):
        return unit in self.active


def flags(env_new=None):
    return {"new": {"args": ["--model-path", "/m", "--port", "30011"], "env": dict(env_new or {}), "applied": [],
                    "skipped": []},
            "keep": {"args": ["--model-path", "/m", "--port", "30012"], "env": {"HF_TOKEN": "********"}, "applied": [],
                     "skipped": []}}


def deployed(tmp_path):
    prefix = str(tmp_path / "opt")
    first = ops.prepare(prefix, LAYERS, None, flags({"DFLASH_STANDIN_START_DELAY": "2"}), None, "rev", False,
                        secrets={"keep": {"HF_TOKEN": "hf_first1234"}, "new": {"DFLASH_API_KEY": "sk-one-5678"}})
    journal.point_current(prefix, first["id"])
    return prefix, first


def releases(prefix):
    return sorted(n for n in os.listdir(os.path.join(prefix, "releases")))


def test_check_mode_shows_the_env_diff_and_writes_no_release(tmp_path):
    prefix, first = deployed(tmp_path)
    before = releases(prefix)
    out = ops.prepare(prefix, LAYERS, None, flags({"DFLASH_STANDIN_START_DELAY": "5", "NCCL_DEBUG": "INFO"}), None,
                      "rev", False, check_mode=True,
                      secrets={"keep": {"HF_TOKEN": "hf_second999"}, "new": {"DFLASH_API_KEY": "sk-one-5678"}})
    assert out["created"] and out["activate"] and out["id"] != first["id"]
    assert releases(prefix) == before  # nothing written
    assert not os.path.exists(os.path.join(prefix, "releases", out["id"]))
    assert out["changes"] == ["instance keep: env HF_TOKEN: changed (a secret: not shown)",
                              "instance new: env DFLASH_STANDIN_START_DELAY: 2 -> 5; env +NCCL_DEBUG=INFO"]
    diffs = {d["after_header"]: d for d in out["diff"]}
    new_diff = diffs[f"{out['id']}/instances/new.env"]
    assert new_diff["before_header"] == f"{first['id']}/instances/new.env"
    assert 'DFLASH_STANDIN_START_DELAY="2"' in new_diff["before"] and 'DFLASH_STANDIN_START_DELAY="5"' in new_diff["after"]
    assert 'DFLASH_API_KEY=********\n' in new_diff["after"]  # unchanged secret: masked, not said changed
    keep_diff = diffs[f"{out['id']}/instances/keep.env"]
    assert "HF_TOKEN=******** (changed)" in keep_diff["after"]
    text = repr(out)
    for secret in ("hf_first1234", "hf_second999", "sk-one-5678"):
        assert secret not in text


def test_check_mode_plans_from_the_release_a_real_run_would_create(tmp_path):
    prefix, first = deployed(tmp_path)
    units = tmp_path / "units"
    units.mkdir()
    (units / "dflash-new.service").write_text("[Service]\nExecStart=/bin/new v1\n")
    (units / "dflash-keep.service").write_text("[Service]\nExecStart=/bin/keep v1\n")
    out = ops.prepare(prefix, LAYERS, None, flags({"DFLASH_STANDIN_START_DELAY": "5"}), None, "rev", False,
                      check_mode=True, secrets={"keep": {"HF_TOKEN": "hf_first1234"}, "new": {"DFLASH_API_KEY": "sk-one-5678"}})
    # the units as the instances stage would render them (nothing staged on disk in check mode)
    staged = [{"instance": "new", "src": str(tmp_path / "opt" / "units" / "dflash-new.service"),
               "dest": str(units / "dflash-new.service"), "content": "[Service]\nExecStart=/bin/new v1\n"},
              {"instance": "keep", "src": str(tmp_path / "opt" / "units" / "dflash-keep.service"),
               "dest": str(units / "dflash-keep.service"), "content": "[Service]\nExecStart=/bin/keep v2\n"}]
    prev = journal.read_manifest(prefix, first["id"])
    the_plan = activation.plan(prefix, out["id"], sorted(out["manifest"]["instances"]), staged,
                               out["changed_instances"], [], previous=prev, manifest=out["manifest"])
    assert the_plan["restart"] == ["keep", "new"]  # new: its env; keep: its unit file
    assert [d["before_header"] for d in the_plan["diff"]] == [str(units / "dflash-keep.service")]
    assert the_plan["diff"][0]["after"].endswith("keep v2\n")
    j = activation.begin(prefix, out["id"], the_plan, Backend({"dflash-new.service", "dflash-keep.service"}),
                         check_mode=True)
    assert not j["noop"] and j["restart"] == ["keep", "new"]
    assert journal.read_journal(prefix) is None  # no journal written
    assert (units / "dflash-keep.service").read_text().endswith("keep v1\n")
