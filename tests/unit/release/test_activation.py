"""The activation transaction (module_utils/dflash_release/activation.py) on a real prefix in tmp_path.

A fake service backend records what would be stopped / enabled and says which units are active;
everything else (journal, backups, unit files, the current link) is the real filesystem code.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from ansible.module_utils.dflash_release import activation, journal

RID_OLD = "20260101T000000-aaaaaaaa"
RID_NEW = "20260102T000000-bbbbbbbb"


class FakeBackend:
    name = "systemd"

    def __init__(self, active=(), enabled=()):
        self.active, self.enabled = set(active), set(enabled)
        self.calls = []

    def reload(self):
        self.calls.append(("reload",))

    def enable(self, units):
        self.calls.append(("enable", tuple(units)))
        self.enabled |= set(units)

    def disable(self, units):
        self.calls.append(("disable", tuple(units)))
        self.enabled -= set(units)

    def stop(self, units):
        self.calls.append(("stop", tuple(units)))
        self.active -= set(units)

    def is_active(self, unit):
        return unit in self.active

    def is_enabled(self, unit):
        return unit in self.enabled


def release(prefix, rid, instances):
    d = prefix / "releases" / rid
    (d / "instances").mkdir(parents=True)
    man = {"id": rid, "instances": {n: {"unit": f"dflash-{n}.service", "args": ["--port", str(p)]}
                                    for n, p in instances.items()}}
    (d / "manifest.json").write_text(json.dumps(man))
    return man


@pytest.fixture
def host(tmp_path):
    """A host serving RID_OLD (instance old on 30001, keep on 30002) with their unit files, and RID_NEW
    prepared (old renamed to new on 30001, keep unchanged)."""
    prefix, units, staged = tmp_path / "opt", tmp_path / "units", tmp_path / "opt" / "units"
    units.mkdir(parents=True)
    staged.mkdir(parents=True)
    release(prefix, RID_OLD, {"old": 30001, "keep": 30002})
    release(prefix, RID_NEW, {"new": 30001, "keep": 30002})
    os.symlink(f"releases/{RID_OLD}", prefix / "current")
    for n in ("old", "keep"):
        (units / f"dflash-{n}.service").write_text(f"[Service]\nExecStart=/bin/{n} v1\n")
    (staged / "dflash-new.service").write_text("[Service]\nExecStart=/bin/new v2\n")
    (staged / "dflash-keep.service").write_text("[Service]\nExecStart=/bin/keep v2\n")
    backend = FakeBackend(active={"dflash-old.service", "dflash-keep.service"},
                          enabled={"dflash-old.service", "dflash-keep.service"})
    staged_units = [{"instance": n, "src": str(staged / f"dflash-{n}.service"), "dest": str(units / f"dflash-{n}.service")}
                    for n in ("new", "keep")]
    return {"prefix": str(prefix), "units": units, "staged": staged_units, "backend": backend}


def start(h, restart_all=False, remove=()):
    prev = journal.read_manifest(h["prefix"], journal.current_target(h["prefix"]))
    p = activation.plan(h["prefix"], RID_NEW, ["new", "keep"], h["staged"], ["new"], ["new"], restart_all, list(remove), prev)
    return p, activation.begin(h["prefix"], RID_NEW, p, h["backend"], host="ct200", controller="me@box", boot="boot-1")


def test_plan_restarts_changed_units_and_stops_the_instance_whose_port_is_taken(host):
    p, _j = start(host)
    assert p["restart"] == ["keep", "new"]  # keep: its unit file changes
    assert p["stop_first"] == [{"instance": "old", "unit": "dflash-old.service", "port": 30001, "for": "new"}]
    assert [u["change"] for u in p["units"]] == ["new", "update"]
    # begin changes nothing that serves: same current, same unit files, the backup and the journal only
    assert journal.current_target(host["prefix"]) == RID_OLD
    assert (host["units"] / "dflash-keep.service").read_text().endswith("v1\n")
    assert not (host["units"] / "dflash-new.service").exists()
    jr = journal.read_journal(host["prefix"])
    assert jr["state"] == "begun" and jr["previous"] == RID_OLD and jr["boot_id"] == "boot-1"
    assert oct(os.stat(journal.journal_path(host["prefix"])).st_mode & 0o777) == "0o600"
    assert jr["active_before"] == {"keep": True, "new": False, "old": True}
    assert host["backend"].calls == []


def test_a_second_begin_is_refused_while_one_is_unfinished(host):
    start(host)
    with pytest.raises(journal.ActivationError, match="unfinished"):
        start(host)


def test_full_transaction_then_commit(host):
    start(host, remove=[{"instance": "old", "unit": "dflash-old.service", "stage_unit": False, "cache": True}])
    activation.install(host["prefix"], RID_NEW, host["backend"])
    assert (host["units"] / "dflash-new.service").read_text().endswith("v2\n")
    assert ("enable", ("dflash-new.service", "dflash-keep.service")) in host["backend"].calls
    activation.switch(host["prefix"], RID_NEW, host["backend"])
    assert journal.current_target(host["prefix"]) == RID_NEW
    assert ("stop", ("dflash-old.service",)) in host["backend"].calls
    assert journal.decide(journal.read_journal(host["prefix"]), {}) == "revert"  # not proven yet
    activation.commit(host["prefix"], RID_NEW, host["backend"], str(host["units"]), cache_root=str(host["units"] / "cache"))
    assert journal.read_journal(host["prefix"]) is None
    assert not (host["units"] / "dflash-old.service").exists()
    assert not os.path.exists(os.path.join(host["prefix"], journal.BACKUPS))
    # the release says which unit files it put live, as they are now (status's drift check reads them)
    units = journal.read_manifest(host["prefix"], RID_NEW)["files"]["units"]
    assert sorted(units) == ["dflash-keep.service", "dflash-new.service"]
    assert units["dflash-new.service"] == {
        "path": str(host["units"] / "dflash-new.service"), "instance": "new",
        "sha256": hashlib.sha256(b"[Service]\nExecStart=/bin/new v2\n").hexdigest()}
    # remembered: a dflash_remove_instances that still names it after its releases are pruned is no typo
    with open(os.path.join(host["prefix"], activation.REMOVED), encoding="utf-8") as fh:
        assert json.load(fh) == ["old"]


def test_revert_after_switch_puts_back_exactly_what_was(host):
    before = {p.name: p.read_text() for p in host["units"].iterdir()}
    start(host)
    activation.install(host["prefix"], RID_NEW, host["backend"])
    activation.switch(host["prefix"], RID_NEW, host["backend"])
    host["backend"].active |= {"dflash-new.service"}  # the smoke test started it
    out = activation.revert(host["prefix"], host["backend"])
    assert journal.current_target(host["prefix"]) == RID_OLD
    assert {p.name: p.read_text() for p in host["units"].iterdir()} == before
    # old ran before and was stopped for its port, keep's unit changed: both restarted; new stopped
    assert out["restart"] == ["keep", "old"] and out["stopped"] == ["new"]
    assert "dflash-new.service" not in host["backend"].active
    assert ("enable", ("dflash-keep.service",)) in host["backend"].calls
    assert journal.read_journal(host["prefix"])["state"] == "reverting"
    # an interrupted revert is simply done again
    again = activation.revert(host["prefix"], host["backend"])
    assert again["restart"] == ["keep", "old"] and again["restored_units"] == []
    activation.finish(host["prefix"])
    assert journal.read_journal(host["prefix"]) is None


def test_revert_leaves_stopped_what_did_not_run_before(host):
    host["backend"].active.discard("dflash-keep.service")
    start(host)
    activation.install(host["prefix"], RID_NEW, host["backend"])
    activation.switch(host["prefix"], RID_NEW, host["backend"])
    out = activation.revert(host["prefix"], host["backend"])
    assert out["restart"] == ["old"] and sorted(out["stopped"]) == ["keep", "new"]


def test_first_deploy_revert_removes_current(tmp_path):
    prefix, units = tmp_path / "opt", tmp_path / "units"
    units.mkdir()
    release(prefix, RID_NEW, {"new": 30001})
    (prefix / "units").mkdir()
    (prefix / "units" / "dflash-new.service").write_text("x")
    staged = [{"instance": "new", "src": str(prefix / "units" / "dflash-new.service"),
               "dest": str(units / "dflash-new.service")}]
    b = FakeBackend()
    p = activation.plan(str(prefix), RID_NEW, ["new"], staged, ["new"], ["new"], False, [], {})
    activation.begin(str(prefix), RID_NEW, p, b, boot="b")
    activation.install(str(prefix), RID_NEW, b)
    activation.switch(str(prefix), RID_NEW, b)
    out = activation.revert(str(prefix), b)
    assert out["restart"] == [] and out["stopped"] == ["new"]
    assert journal.current_target(str(prefix)) is None and not (units / "dflash-new.service").exists()
    assert ("disable", ("dflash-new.service",)) in b.calls


def test_unchanged_rerun_writes_no_journal(host):
    journal.point_current(host["prefix"], RID_NEW)
    for u in host["staged"]:
        with open(u["src"]) as src, open(u["dest"], "w") as dst:
            dst.write(src.read())
    host["backend"].active = {"dflash-new.service", "dflash-keep.service"}
    p = activation.plan(host["prefix"], RID_NEW, ["new", "keep"], host["staged"], [], [], False, [],
               journal.read_manifest(host["prefix"], RID_NEW))
    j = activation.begin(host["prefix"], RID_NEW, p, host["backend"])
    assert j["noop"] and journal.read_journal(host["prefix"]) is None


def test_decide_commit_only_when_proven_after_the_journal(host):
    start(host)
    activation.install(host["prefix"], RID_NEW, host["backend"])
    activation.switch(host["prefix"], RID_NEW, host["backend"])
    j = journal.read_journal(host["prefix"])
    assert journal.decide(j, {"status": "healthy", "at": "2000-01-01T00:00:00.000000Z"}) == "revert"
    assert journal.decide(j, {"status": "failed", "at": "2999-01-01T00:00:00.000000Z"}) == "revert"
    assert journal.decide(j, {"status": "healthy", "at": "2999-01-01T00:00:00.000000Z"}) == "commit"
    assert journal.decide(None, {}) == "none"
    j["state"] = "units"
    assert journal.decide(j, {"status": "healthy", "at": "2999-01-01T00:00:00.000000Z"}) == "revert"


def test_boot_guard_reverts_an_unproven_activation_of_an_earlier_boot(host):
    start(host)
    activation.install(host["prefix"], RID_NEW, host["backend"])
    activation.switch(host["prefix"], RID_NEW, host["backend"])
    assert "same boot" in journal.boot_guard(host["prefix"], host["backend"], boot="boot-1")
    assert journal.current_target(host["prefix"]) == RID_NEW
    said = journal.boot_guard(host["prefix"], host["backend"], boot="boot-2")
    assert "reverted at boot" in said and journal.current_target(host["prefix"]) == RID_OLD
    assert not (host["units"] / "dflash-new.service").exists()
    assert journal.read_journal(host["prefix"])["state"] == "reverted-at-boot"
    assert "already reverted" in journal.boot_guard(host["prefix"], host["backend"], boot="boot-3")
    # the next run finishes it: restart what ran before, then the journal goes
    assert activation.revert(host["prefix"], host["backend"])["restart"] == ["keep", "old"]


def test_boot_id_tells_a_restarted_container_apart(tmp_path):
    # a container shares its host kernel's boot id: PID 1's start time (field 22) tells a restart apart
    kernel = tmp_path / "boot_id"
    kernel.write_text("6891950c-1618-441b-a8f5-0027604af2a3\n")
    init = tmp_path / "stat"
    init.write_text("1 (systemd) S 0 1 1 0 -1 4194560 " + " ".join(["0"] * 12) + " 2951234 123 0\n")
    first = journal.boot_id(str(kernel), str(init))
    assert first == "6891950c-1618-441b-a8f5-0027604af2a3/2951234"
    init.write_text("1 (init (x)) S 0 1 1 0 -1 4194560 " + " ".join(["0"] * 12) + " 3100000 123 0\n")
    second = journal.boot_id(str(kernel), str(init))
    assert second.endswith("/3100000") and not journal.same_boot(first, second)
    assert journal.same_boot(first, first)
    # no readable init (another /proc): the kernel's id alone; a journal of an older version (kernel id
    # only) is compared on that part
    assert journal.boot_id(str(kernel), str(tmp_path / "none")) == "6891950c-1618-441b-a8f5-0027604af2a3"
    assert journal.same_boot("6891950c-1618-441b-a8f5-0027604af2a3", second)
    assert not journal.same_boot("other", second) and not journal.same_boot(None, second)
    assert journal.boot_id(str(tmp_path / "none")) is None


def test_boot_guard_reverts_after_a_container_restart(host):
    start(host)
    activation.install(host["prefix"], RID_NEW, host["backend"])
    activation.switch(host["prefix"], RID_NEW, host["backend"])
    j = journal.read_journal(host["prefix"])
    j["boot_id"] = "kernel-1/2951234"
    journal.write_journal(host["prefix"], j)
    assert "same boot" in journal.boot_guard(host["prefix"], host["backend"], boot="kernel-1/2951234")
    said = journal.boot_guard(host["prefix"], host["backend"], boot="kernel-1/3100000")
    assert "reverted at boot" in said and journal.current_target(host["prefix"]) == RID_OLD


def test_boot_guard_leaves_a_proven_release(host):
    start(host)
    activation.install(host["prefix"], RID_NEW, host["backend"])
    activation.switch(host["prefix"], RID_NEW, host["backend"])
    with open(os.path.join(host["prefix"], "releases", RID_NEW, "status.json"), "w") as fh:
        fh.write(json.dumps({"status": "healthy", "at": "2999-01-01T00:00:00.000000Z"}))
    assert "passed the smoke test" in journal.boot_guard(host["prefix"], host["backend"], boot="boot-2")
    assert journal.current_target(host["prefix"]) == RID_NEW


def test_serving_checks_units_and_health(host):
    got = activation.serving(host["prefix"], host["backend"], check=lambda url: 200 if url.endswith(":30001/health") else None)
    assert got["current"] == RID_OLD
    assert got["instances"]["old"]["serving"] and not got["instances"]["keep"]["serving"]
    assert got["lines"][2] == ("old: serving on http://127.0.0.1:30001 (unit dflash-old.service active, /health 200)")
    assert "keep: NOT serving" in got["lines"][1] and "/health no answer" in got["lines"][1]


def test_steps_refuse_without_a_journal(host):
    with pytest.raises(journal.ActivationError, match="no activation of"):
        activation.install(host["prefix"], RID_NEW, host["backend"])
    assert activation.revert(host["prefix"], host["backend"])["changed"] is False


def test_unreadable_journal_says_what_to_do(host):
    with open(journal.journal_path(host["prefix"]), "w") as fh:
        fh.write("{half")
    with pytest.raises(journal.ActivationError, match="interrupted while writing"):
        journal.read_journal(host["prefix"])


def test_guard_main_without_journal(host, capsys):
    assert journal.main(["boot-guard", "--prefix", host["prefix"]]) == 0
    assert "no unfinished activation" in capsys.readouterr().out


def test_a_started_commit_is_finished_never_reverted(host):
    start(host, remove=[{"instance": "old", "unit": "dflash-old.service", "stage_unit": False, "cache": True}])
    activation.install(host["prefix"], RID_NEW, host["backend"])
    activation.switch(host["prefix"], RID_NEW, host["backend"])
    j = journal.read_journal(host["prefix"])
    journal.write_journal(host["prefix"], j, "committing")  # as commit() does before its removals
    assert journal.decide(journal.read_journal(host["prefix"]), {}) == "commit"
    with pytest.raises(journal.ActivationError, match="not reverted; run the play again"):
        activation.revert(host["prefix"], host["backend"])
    activation.commit(host["prefix"], RID_NEW, host["backend"], str(host["units"]), cache_root=str(host["units"] / "c"))
    assert journal.read_journal(host["prefix"]) is None and journal.current_target(host["prefix"]) == RID_NEW
