"""The host lock (module_utils/dflash_common/hostlock.py) on a real prefix in tmp_path: the record, the flock'd
compare-and-replace (real processes racing for it), stale locks (heartbeat age, a gone controller process, an
unreadable record, a takeover asked for), fencing and the heartbeat thread."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time

import pytest
from ansible.module_utils.dflash_common import hostlock as hl


def me(run, **kw):
    rec = {"run_id": run, "controller": "ctl-a", "controller_id": "m-a", "controller_boot": "b-1", "user": "alice",
           "pid": os.getpid(), "pid_start": hl.proc_start(os.getpid()), "playbook": "deploy.yml",
           "play": "Check every host before anything changes", "purpose": "deploy", "host": "ct200"}
    rec.update(kw)
    return rec


def test_first_run_takes_it_and_the_record_names_the_holder(tmp_path):
    prefix = str(tmp_path / "opt")
    out = hl.acquire(prefix, me("r1"), 1800, now=1000.0)
    assert out["acquired"] and not out["reentered"] and out["took_over"] is None
    rec = json.loads((tmp_path / "opt" / "lock").read_text())
    assert rec["run_id"] == "r1" and rec["user"] == "alice" and rec["controller"] == "ctl-a"
    assert rec["started"] == rec["heartbeat"] == 1000.0
    assert oct(os.stat(tmp_path / "opt" / "lock").st_mode & 0o777) == "0o644"


def test_a_second_run_is_told_who_holds_it(tmp_path):
    prefix = str(tmp_path)
    hl.acquire(prefix, me("r1", pid=4242), 1800, now=1000.0)
    out = hl.acquire(prefix, me("r2", user="bob", controller="ctl-b"), 1800, now=1060.0)
    assert not out["acquired"] and out["holder"]["run_id"] == "r1" and out["age"] == 60.0
    words = hl.describe(out["holder"], now=1060.0)
    assert words.startswith("run r1 of alice@ctl-a (pid 4242, deploy.yml play 'Check every host")
    assert "purpose deploy" in words and "since 1970-01-01T00:16:40Z" in words and "last heartbeat 60 s ago" in words
    # the record is untouched
    assert json.loads((tmp_path / "lock").read_text())["run_id"] == "r1"


def test_the_same_run_reenters_and_refreshes_its_heartbeat(tmp_path):
    hl.acquire(str(tmp_path), me("r1"), 1800, now=1000.0)
    out = hl.acquire(str(tmp_path), me("r1"), 1800, now=1500.0)
    assert out["acquired"] and out["reentered"]
    rec = json.loads((tmp_path / "lock").read_text())
    assert rec["started"] == 1000.0 and rec["heartbeat"] == 1500.0


def test_a_lock_without_heartbeat_for_longer_than_stale_after_is_taken_over_and_said(tmp_path):
    hl.acquire(str(tmp_path), me("r1"), 1800, now=1000.0)
    assert not hl.acquire(str(tmp_path), me("r2"), 1800, now=2799.0)["acquired"]
    out = hl.acquire(str(tmp_path), me("r2"), 1800, now=2801.0)
    assert out["acquired"] and out["took_over"]["holder"]["run_id"] == "r1"
    assert out["took_over"]["why"] == "no heartbeat for 1801 s (more than dflash_lock_stale_after, 1800 s)"


def test_an_unreadable_record_and_an_asked_takeover(tmp_path):
    (tmp_path / "lock").write_text('{"run_id": "r1", "heart')  # a record cut short
    out = hl.acquire(str(tmp_path), me("r2"), 1800)
    assert out["acquired"] and out["took_over"]["why"].startswith("the lock record could not be read (not JSON")
    # a fresh lock of another run, taken over because the user says its run is over
    assert not hl.acquire(str(tmp_path), me("r3"), 1800, takeover="r9")["acquired"]  # not the holder's id
    out = hl.acquire(str(tmp_path), me("r3"), 1800, takeover="r2", takeover_why="asked")
    assert out["acquired"] and out["took_over"] == {"holder": out["took_over"]["holder"], "why": "asked"}


def _race(prefix, run, barrier, results):
    barrier.wait()
    results.put((run, hl.acquire(prefix, me(run, pid=os.getpid()), 1800)["acquired"]))


def test_runs_starting_in_the_same_instant_cannot_both_win(tmp_path):
    # real processes released together: the flock'd read-and-replace lets exactly one through, every time
    ctx = multiprocessing.get_context("fork")
    for attempt in range(5):
        prefix = str(tmp_path / f"p{attempt}")
        barrier, results = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_race, args=(prefix, f"r{i}", barrier, results)) for i in range(6)]
        for p in procs:
            p.start()
        got = dict(results.get(timeout=30) for _ in procs)
        for p in procs:
            p.join(timeout=30)
        winners = [r for r, ok in got.items() if ok]
        assert len(winners) == 1, got
        assert hl.read_holder(prefix)["run_id"] == winners[0]


def test_touch_is_fencing(tmp_path):
    hl.acquire(str(tmp_path), me("r1"), 1800, now=1000.0)
    assert hl.touch(str(tmp_path), "r1", now=1100.0)["held"]
    assert json.loads((tmp_path / "lock").read_text())["heartbeat"] == 1100.0
    with pytest.raises(hl.LockError, match=r"no longer this run's \(r2\): it is held by run r1 of alice@ctl-a"):
        hl.touch(str(tmp_path), "r2")
    # a record that went missing: written again for the run that still goes on, or left missing
    os.unlink(tmp_path / "lock")
    assert hl.touch(str(tmp_path), "r1", recreate=False) == {"held": False, "rewritten": False, "holder": None}
    assert hl.touch(str(tmp_path), "r1")["rewritten"]
    assert json.loads((tmp_path / "lock").read_text())["run_id"] == "r1"


def test_release_removes_only_its_own(tmp_path):
    hl.acquire(str(tmp_path), me("r1"), 1800)
    out = hl.release(str(tmp_path), "r2")
    assert not out["released"] and out["holder"]["run_id"] == "r1" and (tmp_path / "lock").exists()
    assert hl.release(str(tmp_path), "r1") == {"released": True, "holder": None}
    assert not (tmp_path / "lock").exists()
    assert hl.release(str(tmp_path / "never-deployed"), "r1") == {"released": False, "holder": None}
    assert not (tmp_path / "never-deployed").exists()


def test_fence_reads_the_run_from_the_environment(tmp_path):
    assert hl.fence({}) is None  # a role used without the lock
    assert hl.fence({"DFLASH_LOCK_RUN": "r1", "DFLASH_LOCK_PREFIX": str(tmp_path / "absent")}) is None
    hl.acquire(str(tmp_path), me("r1"), 1800)
    env = {"DFLASH_LOCK_RUN": "r1", "DFLASH_LOCK_PREFIX": str(tmp_path)}
    assert hl.fence(env)["held"]
    with pytest.raises(hl.LockError, match="held by run r1"):
        hl.fence(dict(env, DFLASH_LOCK_RUN="r2"))


def test_heartbeat_thread_keeps_the_lock_fresh_while_a_long_step_runs(tmp_path):
    hl.acquire(str(tmp_path), me("r1"), 1800, now=1000.0)
    env = {"DFLASH_LOCK_RUN": "r1", "DFLASH_LOCK_PREFIX": str(tmp_path)}
    with hl.Heartbeat(every=0.05, environ=env) as beat:
        time.sleep(0.4)
    assert beat.beats >= 3
    assert json.loads((tmp_path / "lock").read_text())["heartbeat"] > time.time() - 5
    # another run's lock: the thread leaves it alone
    hl.release(str(tmp_path), "r1")
    hl.acquire(str(tmp_path), me("r2"), 1800, now=1000.0)
    with hl.Heartbeat(every=0.05, environ=env) as beat:
        time.sleep(0.2)
    assert beat.beats == 0 and json.loads((tmp_path / "lock").read_text())["heartbeat"] == 1000.0


def test_a_holder_of_this_controller_whose_process_is_gone(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    mine = me("r2")
    assert hl.holder_gone(me("r1", pid=gone.pid, pid_start="1"), mine) == \
        f"its ansible-playbook process {gone.pid} on ctl-a is gone"
    # alive: this very process with its start time
    assert hl.holder_gone(me("r1"), mine) is None
    # the pid now belongs to another process (another start time)
    assert "the pid is another process now" in hl.holder_gone(me("r1", pid_start="12"), mine)
    # the controller restarted since: whatever runs under that pid now
    assert hl.holder_gone(me("r1", controller_boot="b-0"), mine) == "ctl-a has restarted since that run began"
    # another controller cannot be judged from here: its heartbeat decides
    assert hl.holder_gone(me("r1", controller_id="m-b", pid=gone.pid), mine) is None
    assert hl.holder_gone({"corrupt": "x"}, mine) is None
