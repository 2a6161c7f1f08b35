"""Where an SGLang server is in its start-up, from its log: loading weights N%, KV pool, CUDA
graph capture N%, warm-up, ready.

A 27B model takes minutes to load and capture CUDA graphs; the play was silent all that time.
``latest_stage(text)`` reads the tail of the unit's log (journal or runner log) and names the
newest stage with its progress; ``replay(text, interval)`` walks a recorded log by its own
timestamps and gives the line a waiting play would have shown every ``interval`` seconds (tests,
bench). tqdm progress bars arrive as carriage-return separated updates on one line: each update
counts. Pure functions, no Ansible import.
"""

from __future__ import annotations

import datetime as _dt
import re

_TS_RE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)?(?: [A-Z]{2,4}\d+)*\]")
_PCT = r"(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)"

# (pattern, template) newest-first matching; the template reads the named groups
STAGES = [
    (re.compile(r"The server is fired up and ready to roll"), "ready"),
    (re.compile(r"Uvicorn running on|Application startup complete"), "HTTP server up, warming up"),
    (re.compile(r"Initialized (?P<algo>\w+) draft runner|(?P<algo2>\w+) draft runner ready"), "{algo} draft runner ready"),
    (re.compile(r"max_total_num_tokens=(?P<tokens>\d+)"), "scheduler ready ({tokens} KV tokens)"),
    (re.compile(r"Capturing num tokens \(num_tokens=(?P<n>\d+)[^)]*\):\s*" + _PCT),
     "capturing piecewise CUDA graphs {pct}% ({done}/{total})"),
    (re.compile(r"Compiling num tokens \(num_tokens=(?P<n>\d+)\):\s*" + _PCT),
     "compiling piecewise CUDA graphs {pct}% ({done}/{total})"),
    (re.compile(r"Capture piecewise CUDA graph end"), "piecewise CUDA graphs captured"),
    (re.compile(r"Capture piecewise CUDA graph begin"), "capturing piecewise CUDA graphs"),
    (re.compile(r"Capturing batches \(bs=(?P<bs>\d+)[^)]*\):\s*" + _PCT),
     "capturing CUDA graphs {pct}% ({done}/{total} batch sizes)"),
    (re.compile(r"Capture cuda graph end\. Time elapsed: (?P<secs>[\d.]+) s"), "CUDA graphs captured in {secs} s"),
    (re.compile(r"Capture cuda graph begin"), "capturing CUDA graphs"),
    (re.compile(r"Memory pool end"), "memory pool ready"),
    (re.compile(r"KV Cache is allocated\. #tokens: (?P<tokens>\d+)"), "KV pool allocated ({tokens} tokens)"),
    (re.compile(r"Load weight end\.[^\n]*?type=(?P<type>\w+)"), "weights loaded ({type})"),
    (re.compile(r"Loading (?:safetensors|pt|bin) checkpoint shards:\s*(?P<pct>\d{1,3})% Completed \|\s*(?P<done>\d+)/(?P<total>\d+)"),
     "loading weights {pct}% ({done}/{total} shards)"),
    (re.compile(r"Load weight begin"), "loading weights"),
    (re.compile(r"Init torch distributed begin"), "initialising torch distributed"),
    (re.compile(r"server_args=ServerArgs\("), "arguments parsed"),
    (re.compile(r"-- dflash-runner: starting "), "process started"),
]


def _segments(text: str) -> list:
    """Every line and every carriage-return update of a progress bar, in order."""
    out = []
    for line in (text or "").split("\n"):
        out.extend(p for p in line.split("\r") if p.strip())
    return out


def stage_of(segment: str) -> str | None:
    for rx, tpl in STAGES:
        m = rx.search(segment)
        if m:
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            if "algo2" in groups and "algo" not in groups:
                groups["algo"] = groups["algo2"]
            return tpl.format_map(_Missing(groups))
    return None


class _Missing(dict):
    def __missing__(self, key):
        return "?"


def says_ready(text: str) -> bool:
    """Whether the log says the server finished its start-up, warm-up included ("fired up")."""
    return bool(text) and STAGES[0][0].search(text) is not None


def latest_stage(text: str, max_segments: int = 4000) -> str | None:
    """The newest start-up stage in a log (its tail), or None when no stage line is there yet."""
    segs = _segments(text)[-max_segments:]
    for seg in reversed(segs):
        st = stage_of(seg)
        if st:
            return st
    return None


def _stamp(segment: str):
    m = _TS_RE.search(segment)
    if not m:
        return None
    try:
        return _dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None


_TQDM_ELAPSED_RE = re.compile(r"\[(?:(\d+):)?(\d+):(\d\d)<")


def _tqdm_elapsed(segment: str):
    """Seconds since the bar started, from tqdm's "[mm:ss<" (or "[h:mm:ss<"), else None."""
    m = _TQDM_ELAPSED_RE.search(segment)
    if not m:
        return None
    h, mi, se = m.group(1), m.group(2), m.group(3)
    return int(h or 0) * 3600 + int(mi) * 60 + int(se)


def replay(text: str, interval: float = 20.0) -> list:
    """[(elapsed seconds, stage)]: what a wait reporting every ``interval`` seconds would have
    shown for a recorded log, timed by the log's own timestamps; a progress-bar update without one
    is timed by the bar's own elapsed time after the last timestamped line."""
    start = now = None
    timed = []
    for seg in _segments(text):
        ts = _stamp(seg)
        if ts is not None:
            now = ts
            start = start or ts
        if now is None:
            continue
        secs = (now - start).total_seconds()
        bar = _tqdm_elapsed(seg) if ts is None else None
        timed.append((secs + bar if bar is not None else secs, seg))
    out, current, tick = [], None, interval
    for secs, seg in timed:
        while secs >= tick:
            if current:
                out.append((tick, current))
            tick += interval
        current = stage_of(seg) or current
    if current and (not out or out[-1][1] != current):
        out.append((timed[-1][0], current))
    return out


def progress_line(name: str, elapsed: float, timeout: float, stage: str | None) -> str:
    """What the play shows for one instance still starting."""
    where = stage or "no start-up stage in the log yet"
    return f"{name}: starting for {int(elapsed)} s (timeout {int(timeout)} s): {where}"
