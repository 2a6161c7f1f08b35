"""The wait after a restart: fail fast, or healthy.

The seeds' lesson: a server that crashed at import was polled for minutes ("don't wait so long when it fails
fast"). ``wait_units`` polls, for every instance at once, the unit's ActiveState/SubState/NRestarts (the service
backend's ``state``: ``systemctl show``, or the runner's pidfile) *and* ``/health`` every ``interval`` (0.25 s by
default) under one overall timeout. The first unit that failed, exited or was restarted by systemd ends the wait at
once; healthy means ``/health`` answered 200 while the unit is active and was not restarted.

Pure logic plus injected I/O (``show``, ``health``, ``clock``, ``sleep``) so tests run it against real local HTTP
servers and recorded ``systemctl show`` output. No Ansible import.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from ansible.module_utils.dflash_release.startup import latest_stage, progress_line, says_ready


def judge(show: dict, health: int | None, baseline_restarts: int = 0) -> str:
    """One poll's verdict: healthy | starting | failed | restarted | exited | missing."""
    if show.get("LoadState") in ("not-found", "error"):
        return "missing"
    active, sub = show.get("ActiveState"), show.get("SubState")
    if active == "failed":
        return "failed"
    if (show.get("NRestarts") or 0) > baseline_restarts or sub == "auto-restart":
        return "restarted"
    if active in ("inactive", "deactivating"):
        return "exited"
    if active == "active" and health == 200:
        return "healthy"
    return "starting"


FAILING = ("failed", "restarted", "exited", "missing", "unanswered")

# the log says the server finished its warm-up ("fired up and ready to roll"), yet /health gave no 200 for
# this long: the health URL does not reach it (host, port, proxy); waiting out the timeout tells nothing more
READY_GRACE = 60.0
READY_CHECK_EVERY = 5.0


# sglang's /health (and /health_generate) queues a one-token probe request and sleeps a whole second
# before it looks for the probe's answer (http_server.health_generate, up to 20 s): a healthy server
# never answers in under 1 s, so a 1 s client timeout reads every healthy answer as none.
HEALTH_TIMEOUT = 5.0


def wait_units(instances, show, health, timeout, interval=0.25, clock=time.monotonic, sleep=time.sleep,
               baseline_restarts=0, logged_ready=None, ready_since=None, ready_grace=READY_GRACE):
    """Poll every instance until all are healthy, one fails (returned at once) or time is up.

    ``instances``: [{name, unit, health_url}]; ``show(unit) -> dict`` (parsed systemctl show);
    ``health(url, timeout) -> status or None``; ``baseline_restarts``: NRestarts that do not count
    (an int, or {unit: int}; 0 right after a manual restart, which resets the counter).
    ``logged_ready(inst) -> bool``: whether the instance's log says it finished its warm-up (read every
    READY_CHECK_EVERY s while /health is not 200); an instance whose log has said so for ``ready_grace`` s
    without a 200 fails as "unanswered". ``ready_since``: {name: clock()} from an earlier chunk of the same
    wait. Returns {verdict: healthy|failed|timeout, seconds, failed: [names], instances: {name: {verdict,
    seconds, show, health, polls, ready_since}}}."""
    t0 = clock()
    deadline = t0 + float(timeout)
    state = {
        i["name"]: {"verdict": "starting", "seconds": None, "show": {}, "health": None, "polls": 0}
        for i in instances
    }
    pending = [i for i in instances]
    ready_at = dict(ready_since or {})
    next_look = {}
    while True:
        for inst in list(pending):
            st = state[inst["name"]]
            remaining = max(0.05, deadline - clock())
            sh = show(inst["unit"])
            code = None
            if sh.get("ActiveState") in ("active", "activating", "reloading"):
                # never under 2 s, even at the end of a chunk of the action plugin or of the timeout:
                # a healthy sglang needs more than 1 s to answer (the wait may overrun by that much)
                code = health(inst["health_url"], min(HEALTH_TIMEOUT, max(remaining, 2.0)))
            st.update(show=sh, health=code, polls=st["polls"] + 1)
            base = (baseline_restarts.get(inst["unit"], 0) if isinstance(baseline_restarts, dict)
                    else baseline_restarts)
            verdict = judge(sh, code, base)
            if verdict == "starting" and logged_ready:
                now = clock()
                if inst["name"] not in ready_at and now >= next_look.get(inst["name"], 0.0):
                    next_look[inst["name"]] = now + READY_CHECK_EVERY
                    if logged_ready(inst):
                        ready_at[inst["name"]] = now
                if inst["name"] in ready_at:
                    st["ready_since"] = ready_at[inst["name"]]
                    if now - ready_at[inst["name"]] >= ready_grace:
                        verdict = "unanswered"
            if verdict != "starting":
                st["verdict"] = verdict
                st["seconds"] = round(clock() - t0, 3)
                pending.remove(inst)
                if verdict in FAILING:
                    return _wait_result(state, "failed", clock() - t0)
        if not pending:
            return _wait_result(state, "healthy", clock() - t0)
        if clock() >= deadline:
            for inst in pending:
                state[inst["name"]]["verdict"] = "timeout"
                state[inst["name"]]["seconds"] = round(clock() - t0, 3)
            return _wait_result(state, "timeout", clock() - t0)
        sleep(max(0.0, min(interval, deadline - clock())))


def _wait_result(state, verdict, seconds):
    failed = sorted(n for n, s in state.items() if s["verdict"] in FAILING + ("timeout",))
    return {"verdict": verdict, "seconds": round(seconds, 3), "failed": failed, "instances": state}


def describe_failure(name, st, diagnosis=None) -> str:
    sh = st.get("show") or {}
    what = {
        "failed": "the unit failed",
        "restarted": "systemd restarted the unit (it crashed)",
        "exited": "the server exited",
        "missing": "the unit does not exist",
        "timeout": "not healthy before the timeout (hang)",
        "unanswered": (f"its log says it is up and ready, but /health gave no 200 for {READY_GRACE:g} s after "
                       "that (no answer: the health URL does not reach it, or it stopped answering; 503: sglang "
                       "finds it unhealthy)"),
    }.get(st.get("verdict"), st.get("verdict"))
    msg = (
        f"instance {name}: {what} after {st.get('seconds')} s "
        f"(ActiveState={sh.get('ActiveState')}, SubState={sh.get('SubState')}, "
        f"NRestarts={sh.get('NRestarts')}, ExecMainStatus={sh.get('ExecMainStatus')}, "
        f"/health={st.get('health')})"
    )
    if diagnosis:
        msg += f"; cause={diagnosis.get('cause')}: {diagnosis.get('summary')}"
        if diagnosis.get("remedy"):
            msg += f"; remedy: {diagnosis['remedy']}"
        if st.get("verdict") == "timeout" and "the server reported ready" in str(diagnosis.get("summary")):
            msg += (f"; the log says the server is up but /health gave no 200 within {HEALTH_TIMEOUT:g} s a poll: "
                    "check that the health URL (host, port, API key, proxy) reaches this server")
    return msg


def health_status(url, timeout=HEALTH_TIMEOUT):
    """HTTP status of GET url, None when nothing answers in time."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, urllib.error.URLError, ValueError):
        return None


# ----------------------------------------------------------------------------- the wait of library/dflash_wait.py


def diagnose_unit(backend, unit, since, diagnose, sleep=time.sleep, fingerprint=None, hung=False, clock=time.time,
                  sglang=None):
    """The diagnosis of the unit's log since ``since`` (``diagnose(text, source, fingerprint, silent_seconds)``:
    dflash_diagnose's engine), with the log's last 30 lines as ``journal_tail``. ``fingerprint``: the host's fact
    (the remedy names its GPU and topology). ``hung``: the instance timed out still starting; how long its log has
    been silent then tells a hang from a slow start. journald may lag the unit state by a few hundred ms: while the
    log holds no decisive line it is read again (up to ~2 s) where the backend's log lags (not for a hang: the
    silence is the point). ``sglang``: the facts of the instance's sglang version (the remedies name its pins and
    options), handed to ``diagnose`` when given."""
    if not backend.has_logs():
        return None
    silent = max(0.0, clock() - backend.last_log_at(unit, since)) if hung else None
    attempts = 5 if backend.log_lags and not hung else 1
    diag, text = None, ""
    for attempt in range(attempts):
        text = backend.logs(unit, since=since)
        extra = {"sglang": sglang} if sglang else {}
        diag = diagnose(text, source=backend.log_source(unit), fingerprint=fingerprint, silent_seconds=silent, **extra)
        if diag.get("cause") != "unknown" or attempt == attempts - 1:
            break
        sleep(0.4)
    diag = dict(diag or {})
    diag["journal_tail"] = text.splitlines()[-30:]
    return diag


def restart_and_wait(insts, backend, p, diagnose, where="", record=None, clock=time.time):
    """library/dflash_wait.py's work between its arguments and the smoke test: restart the units (unless a later
    chunk of the same wait: ``p["resume"]``), wait for them (``wait_units``, in chunks of ``p["chunk_seconds"]``),
    diagnose the first that failed (None where the host keeps no log: systemd without journalctl). ``insts``: [{name, unit, health_url}]; ``backend``: a dflash_service backend;
    ``p``: the module's parameters (restart, timeout, interval, diagnose, chunk_seconds, ready_grace, resume,
    fingerprint);
    ``record(name, st)``: writes the instance's wait record. -> ("starting", {progress, resume, seconds,
    changed}) when the chunk ended undecided, else ("done", result, failure messages)."""
    resume = p.get("resume") or {}
    since = float(resume.get("since") or clock())
    restart_out = resume.get("restart")
    restarted = bool(resume.get("restarted", p["restart"]))
    if not resume and p["restart"]:
        # a unit that cannot even start (missing EnvironmentFile, bad ExecStart) makes this fail;
        # the poll below sees the unit state and the log says why
        restart_out = backend.restart([i["unit"] for i in insts])
    # a manual restart resets NRestarts; without one, restarts from before this wait do not count
    if "baseline" in resume:
        baseline = resume["baseline"]
    else:
        baseline = 0 if restarted else {i["unit"]: backend.state(i["unit"]).get("NRestarts") or 0 for i in insts}
    t_wait = clock()
    offset = max(0.0, t_wait - since)  # seconds of earlier chunks (and the restart)
    left = max(0.05, p["timeout"] - offset)
    chunk = p["chunk_seconds"] if p.get("chunk_seconds") and p["chunk_seconds"] > 0 else None

    def logged_ready(inst):  # the log since the restart says "fired up" (read every few seconds at most)
        return says_ready(backend.logs(inst["unit"], since=since, lines=400))

    res = wait_units(insts, show=backend.state, health=health_status, timeout=min(left, chunk) if chunk else left,
                     interval=p["interval"], baseline_restarts=baseline, logged_ready=logged_ready,
                     ready_since=resume.get("ready_since"), ready_grace=p["ready_grace"])
    _shift(res, offset)
    if res["verdict"] == "timeout" and chunk and chunk < left:
        # not decided in this chunk: say where each pending instance is, the action plugin asks again
        progress = {}
        for inst in insts:
            if res["instances"][inst["name"]]["verdict"] in ("timeout", "starting"):
                text = backend.logs(inst["unit"], since=since, lines=400)
                progress[inst["name"]] = progress_line(inst["name"], clock() - since, p["timeout"], latest_stage(text))
        return "starting", {
            "changed": restarted, "seconds": round(clock() - since, 3), "progress": progress,
            "resume": {"since": since, "restart": restart_out, "restarted": restarted, "baseline": baseline,
                       "ready_since": {n: s["ready_since"] for n, s in res["instances"].items()
                                       if s.get("ready_since") is not None}}}
    verdict_at = clock()
    msgs = []
    for inst in insts:
        st = res["instances"][inst["name"]]
        st["unit"] = inst["unit"]
        if inst["name"] in res["failed"]:
            # a start-up past the timeout: how long its log has been silent tells a hang from a slow start
            hung = st.get("verdict") == "timeout"
            st["diagnosis"] = (diagnose_unit(backend, inst["unit"], since, diagnose, fingerprint=p.get("fingerprint"),
                                             hung=hung, clock=clock, sglang=inst.get("sglang"))
                               if p["diagnose"] else None)
            msgs.append(where + describe_failure(inst["name"], st, st["diagnosis"]))
        if record:
            record(inst["name"], dict(st, since=since, restart=restart_out))
    return "done", {
        # epoch seconds on the host: restart issued, polling started, verdict reached, module done
        "timings": {"restart_at": since, "wait_from": t_wait, "verdict_at": verdict_at, "done_at": clock()},
        "changed": restarted,
        "verdict": res["verdict"],
        "seconds": res["seconds"],
        "failed_instances": res["failed"],
        "instances": res["instances"],
        "restart": restart_out,
    }, msgs


def _shift(res, offset):
    """Seconds of a later chunk counted from the restart."""
    if offset <= 0:
        return
    res["seconds"] = round(res["seconds"] + offset, 3)
    for st in res["instances"].values():
        if st.get("seconds") is not None:
            st["seconds"] = round(st["seconds"] + offset, 3)
