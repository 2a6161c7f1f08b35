"""Repairs said out loud: a current release whose manifest.json is cut short, an env file of the current release
edited on the host, a unit file edited on the host. Each is named (what, where, what is done about it) and the
instance concerned is restarted and smoke-tested, never a silent new release or a plain restart."""

from __future__ import annotations

import os

from ansible.module_utils.dflash_release import activation, journal, ops

LAYERS = [{"name": "lab", "path": "/opt/dflash/layers/lab-1", "hash": "1", "parent": None, "python": "/usr/bin/python3"}]


class Backend:
    name = "systemd"

    def __init__(self):
        self.calls = []

    def is_active(self, unit):
        return True

    def is_enabled(self, unit):
        return True

    def reload(self):
        self.calls.append("reload")

    def enable(self, units):
        self.calls.append(("enable", tuple(units)))

    def stop(self, units):
        self.calls.append(("stop", tuple(units)))

    disable = stop


def flags(x="1"):
    return {n: {"args": ["--model-path", "/m", "--port", str(p)], "env": {"X": x}, "applied": [], "skipped": []}
            for n, p in (("new", 30011), ("keep", 30012))}


def test_a_truncated_manifest_of_current_is_named_not_silently_replaced(tmp_path):
    prefix = str(tmp_path)
    first = ops.prepare(prefix, LAYERS, None, flags(), None, "rev", False)
    journal.point_current(prefix, first["id"])
    path = tmp_path / "releases" / first["id"] / "manifest.json"
    path.write_text(path.read_text()[:100])
    out = ops.prepare(prefix, LAYERS, None, flags(), None, "rev", False)
    assert out["created"] and out["id"] != first["id"] and out["changed_instances"] == ["keep", "new"]
    (repair,) = out["repairs"]
    assert repair.startswith(f"current release {first['id']}: {path} is corrupt or truncated (100 bytes, not JSON: ")
    assert repair.endswith(f"): it cannot be compared nor reused; the release made from the inventory replaces it "
                           f"(every instance restarts and is smoke-tested; releases/{first['id']} is left on disk as it is)")
    assert os.path.isdir(tmp_path / "releases" / first["id"])


def test_an_edited_env_file_of_current_is_put_back_and_its_instance_restarted(tmp_path):
    prefix = str(tmp_path)
    first = ops.prepare(prefix, LAYERS, None, flags(), None, "rev", False)
    journal.point_current(prefix, first["id"])
    env = tmp_path / "releases" / first["id"] / "instances" / "keep.env"
    good = env.read_text()
    env.write_text(good.replace('X="1"', 'X="2"'))
    check = ops.prepare(prefix, LAYERS, None, flags(), None, "rev", False, check_mode=True)
    assert check["repairs"] == [(f"release {first['id']}: {env} was edited on the host (it differs from what the release "
                                "wrote) (check mode: would be put back)")]
    assert env.read_text() != good
    out = ops.prepare(prefix, LAYERS, None, flags(), None, "rev", False)
    assert out["id"] == first["id"] and not out["created"]
    assert out["repairs"] == [(f"release {first['id']}: {env} was edited on the host (it differs from what the release "
                              "wrote): put back; keep restarted and smoke-tested so that what serves is the release's")]
    assert out["restart_repaired"] == ["keep"] and env.read_text() == good
    assert ops.prepare(prefix, LAYERS, None, flags(), None, "rev", False)["repairs"] == []  # once


def test_a_unit_file_edited_on_the_host_is_told_apart_from_an_update(tmp_path):
    prefix = str(tmp_path / "opt")
    first = ops.prepare(prefix, LAYERS, None, flags(), None, "rev", False)
    units, staged = tmp_path / "units", tmp_path / "opt" / "units"
    units.mkdir()
    staged.mkdir()
    for n in ("new", "keep"):
        (staged / f"dflash-{n}.service").write_text(f"[Service]\nExecStart=/bin/{n}\n")
    plan_units = [{"instance": n, "src": str(staged / f"dflash-{n}.service"), "dest": str(units / f"dflash-{n}.service")}
                  for n in ("new", "keep")]
    be = Backend()
    p = activation.plan(prefix, first["id"], ["keep", "new"], plan_units, ["keep", "new"], [])
    activation.begin(prefix, first["id"], p, be)
    activation.install(prefix, first["id"], be)
    activation.switch(prefix, first["id"], be)
    activation.commit(prefix, first["id"], be, str(units))
    assert set(journal.read_unit_record(prefix)) == {str(units / "dflash-new.service"), str(units / "dflash-keep.service")}
    # nothing changed: nothing to do
    again = activation.plan(prefix, first["id"], ["keep", "new"], plan_units, [], [])
    assert again["restart"] == [] and again["drifted"] == []
    # keep's unit edited by hand: restarted, and said to be a repair
    (units / "dflash-keep.service").write_text("[Service]\nExecStart=/bin/keep --debug\n")
    edited = activation.plan(prefix, first["id"], ["keep", "new"], plan_units, [], [])
    assert edited["restart"] == ["keep"]
    assert edited["drifted"] == [{"dest": str(units / "dflash-keep.service"), "instance": "keep"}]
    # the toolkit renders a new unit for new (an update, not a repair)
    (staged / "dflash-new.service").write_text("[Service]\nExecStart=/bin/new v2\n")
    updated = activation.plan(prefix, first["id"], ["keep", "new"], plan_units, [], [])
    assert updated["restart"] == ["keep", "new"] and [d["instance"] for d in updated["drifted"]] == ["keep"]
