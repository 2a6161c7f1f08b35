"""Progress of a step that can take minutes: what, how far, how long so far, at a bounded interval.

Two sides share one record, ``{what, done, total, unit, started, updated, note}``:

- the worker (a module on a host, or the controller side of an action plugin) keeps it current with a
  ``Ticker`` (a thread that measures every few seconds and writes the record to a file, atomically);
- the action plugin reads it at its own interval and prints ``line(record)`` for the host.

Written here rather than taken from a library: Ansible has no progress reporting for a module that runs
for an hour (async only says "started"), and tqdm writes bars to a terminal, not records another process
reads. Pure Python, no Ansible import.
"""

from __future__ import annotations

import json
import os
import threading
import time

GIB = 1024 ** 3
MIB = 1024 ** 2


def human_bytes(n) -> str:
    n = float(n or 0)
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{int(n)} B"


def human_seconds(s) -> str:
    s = int(max(0, s or 0))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def amount(value, unit) -> str:
    return human_bytes(value) if unit == "bytes" else f"{int(value or 0)}{' ' + unit if unit else ''}"


def line(record: dict, now: float | None = None) -> str:
    """'layer overlay: uv pip install: 57 of 189 distributions (30%), 2m10s so far (3.1 GiB written)'."""
    now = time.time() if now is None else now
    what = record.get("what") or "working"
    done, total, unit = record.get("done"), record.get("total"), record.get("unit") or ""
    if done is None:
        how_far = "started"
    elif total:
        pct = min(100.0, 100.0 * float(done) / float(total))
        if unit == "bytes":
            how_far = f"{human_bytes(done)} of {human_bytes(total)} ({pct:.0f}%)"
        else:
            how_far = f"{int(done)} of {int(total)} {unit} ({pct:.0f}%)".replace("  ", " ")
    else:
        how_far = amount(done, unit)
    started = record.get("started")
    started = now if started is None else started
    text = f"{what}: {how_far}, {human_seconds(now - started)} so far"
    if record.get("note"):
        text += f" ({record['note']})"
    return text


def write(path: str, record: dict) -> None:
    """Atomically: a reader never sees half a record."""
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)


def read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


class Ticker:
    """Keeps a progress record current while a long call runs in the calling thread.

    ``measure()`` -> ``{done, total, unit, note}`` (any subset) is called every ``every`` seconds (and once
    at the end); each result is merged into the record and handed to ``sink`` (``write`` to a file, or a
    callback that prints). ``with Ticker(...) as t: long_call()``; ``t.set(what=...)`` changes the step.
    """

    def __init__(self, what, sink, measure=None, every=5.0, clock=time.time):
        self.record = {"what": what, "done": None, "total": None, "unit": "", "started": clock(), "updated": None}
        self._sink, self._measure, self._every, self._clock = sink, measure, every, clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = None

    def set(self, **fields):
        with self._lock:
            self.record.update(fields)
        self._emit()

    def _emit(self):
        with self._lock:
            if self._measure is not None:
                try:
                    self.record.update(self._measure() or {})
                except Exception as exc:  # noqa: BLE001 - a measurement that fails must not kill the step it watches
                    self.record["note"] = f"progress not measured: {exc}"
            self.record["updated"] = self._clock()
            snapshot = dict(self.record)
        try:
            self._sink(snapshot)
        except Exception:  # noqa: BLE001, S110 - the sink (a file, a display) failing must not fail the step
            pass

    def _run(self):
        while not self._stop.wait(self._every):
            self._emit()

    def __enter__(self):
        self._emit()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=self._every + 1)
        self._emit()
        return False


def file_sink(path):
    """A sink that writes each record to ``path`` (the file the action plugin reads); None: no file."""
    if not path:
        return lambda record: None
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return lambda record: write(path, record)


def tree_usage(path, suffix=None):
    """(bytes, entries ending with ``suffix``) under ``path``: what a build has written so far."""
    total, count = 0, 0
    for root, dirs, files in os.walk(path):
        if suffix:
            count += sum(1 for d in dirs if d.endswith(suffix))
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total, count


def poll(start, status, progress, say, interval, sleep=time.sleep, clock=time.monotonic, limit=None):
    """Run a step to its end, saying its progress every ``interval`` seconds.

    ``start()`` -> handle; ``status(handle)`` -> (finished, result); ``progress(handle)`` -> record or None;
    ``say(text)``. Returns the final result. ``limit`` (seconds) -> TimeoutError past it.
    """
    handle = start()
    begun = clock()
    while True:
        finished, result = status(handle)
        if finished:
            return result
        if limit is not None and clock() - begun > limit:
            raise TimeoutError(f"still running after {human_seconds(limit)}")
        record = progress(handle)
        if record:
            say(line(record))
        sleep(interval)


def run_with_progress(fn, measure, what, say, interval, clock=time.time):
    """Run ``fn()`` in a worker thread; every ``interval`` seconds ``say`` one line from ``measure()`` (a
    record's {done, total, unit, note}). The lines come from the calling thread (Ansible's display is not
    for threads). Returns fn's result or raises its exception."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    record = {"what": what, "started": clock()}
    worker.start()
    while True:
        worker.join(interval if interval and interval > 0 else None)
        if not worker.is_alive():
            break
        try:
            record.update(measure() or {})
        except Exception as exc:  # noqa: BLE001 - a measurement that fails must not stop the step
            record["note"] = f"progress not measured: {exc}"
        say(line(record, clock()))
    if "error" in box:
        raise box["error"]
    return box.get("result")


def run_module_with_progress(action, module_name, args, task_vars, progress_file, interval, limit, what, say):
    """Run ``module_name`` on the host with Ansible's async wrapper and ``say`` a line of the progress record it
    keeps in ``progress_file`` every ``interval`` seconds until it ends; -> the module's result. ``action``: the
    action plugin running the task (its connection, become and temporary files; this module imports nothing of
    Ansible itself)."""
    task = action._task
    saved = task.async_val
    task.async_val = int(limit)
    try:
        started = action._execute_module(module_name=module_name, module_args=dict(args, progress_file=progress_file),
                                         task_vars=task_vars, wrap_async=True)
    finally:
        task.async_val = saved
    if started.get("failed") or "ansible_job_id" not in started:
        return started
    jid = started["ansible_job_id"]
    async_dir = action._remote_expand_user(action.get_shell_option("async_dir", default="~/.ansible_async"))

    def status(_handle):
        res = action._execute_module(module_name="ansible.legacy.async_status",
                                     module_args={"jid": jid, "_async_dir": async_dir}, task_vars=task_vars)
        return bool(res.get("finished")) or bool(res.get("failed") and not res.get("started")), res

    def read(_handle):
        out = action._low_level_execute_command(f"cat {progress_file} 2>/dev/null", sudoable=True)
        try:
            return json.loads(out.get("stdout") or "")
        except ValueError:
            return None  # not written yet, or between two layers: no line this time

    try:
        res = poll(lambda: jid, status, read, say, interval, limit=limit + 60)
    except TimeoutError as exc:
        return {"failed": True, "msg": f"{what}: {exc}"}
    action._execute_module(module_name="ansible.legacy.async_status",
                           module_args={"jid": jid, "mode": "cleanup", "_async_dir": async_dir}, task_vars=task_vars)
    for key in ("ansible_job_id", "results_file", "started", "finished", "stdout", "stderr", "stdout_lines",
                "stderr_lines", "erased"):
        res.pop(key, None)
    return res


def interval_arg(args: dict, default: float = 30.0, pop: bool = False, bad: float | None = None) -> float:
    """An action's ``progress_interval`` (seconds; 0 or less: no progress lines), taken out of ``args`` with
    ``pop`` (a module that does not know the option); a value that is not a number gives ``bad`` (default: the
    default, where the module does not check it)."""
    value = args.pop("progress_interval", default) if pop else args.get("progress_interval", default)
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return default if bad is None else bad


def run_module_once(action, module_name, args, task_vars, wrap_async=False) -> dict:
    """The generic action's way: the module once (async wrapped when ``wrap_async``), its temporary directory
    removed unless an async job still needs it."""
    out = action._execute_module(module_name=module_name, module_args=args, task_vars=task_vars, wrap_async=wrap_async)
    if not wrap_async:
        action._remove_tmp_path(action._connection._shell.tmpdir)
    return out


def run_build(action, module_name, args, task_vars, progress_file, interval, limit, what, say, build_action,
              default_action=None) -> dict:
    """An action plugin's run of a module whose ``build_action`` can take long (layers ensure, tree build): with
    progress lines (run_module_with_progress, the record in ``progress_file()``) when the task's ``action`` (or
    ``default_action``) is that one, not in check mode, not the user's own async task and ``interval`` > 0;
    otherwise the module once."""
    wrap_async = action._task.async_val and not action._connection.has_native_async
    if args.get("action", default_action) != build_action or action._task.check_mode or wrap_async or interval <= 0:
        return run_module_once(action, module_name, args, task_vars, wrap_async)
    return run_module_with_progress(action, module_name, args, task_vars, progress_file(), interval, limit, what, say)
