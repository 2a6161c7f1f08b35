"""The progress lines of long steps (module_utils/dflash_common/progress.py): what, how far, how long so far, at a
bounded interval, whether the step runs here (a download, a push: run_with_progress) or on a host (a record file
a Ticker keeps, read by poll)."""

from __future__ import annotations

import threading
import time

from ansible.module_utils.dflash_common import progress


def test_line_says_what_how_far_and_how_long():
    rec = {"what": "layer overlay: uv pip install", "done": 57, "total": 189, "unit": "distributions",
           "started": 100.0, "note": "3.1 GiB written"}
    assert progress.line(rec, now=230.0) == ("layer overlay: uv pip install: 57 of 189 distributions (30%), 2m10s so "
                                             "far (3.1 GiB written)")
    assert progress.line({"what": "model x: downloading", "done": 3 * 2**30, "total": 12 * 2**30, "unit": "bytes",
                          "started": 0.0}, now=3725.0) == "model x: downloading: 3.0 GiB of 12.0 GiB (25%), 1h02m05s so far"
    assert progress.line({"what": "tree", "done": 5 * 2**20, "unit": "bytes", "started": 1.0}, now=4.0) == \
        "tree: 5.0 MiB, 3s so far"


def test_run_with_progress_says_a_line_per_interval_from_the_calling_thread():
    said, state = [], {"n": 0}
    caller = threading.get_ident()

    def work():
        for _ in range(6):
            time.sleep(0.1)
            state["n"] += 10
        return "done"

    def say(text):
        assert threading.get_ident() == caller
        said.append(text)

    out = progress.run_with_progress(work, lambda: {"done": state["n"], "total": 60, "unit": "MiB-ish"},
                                     "step", say, 0.15)
    assert out == "done"
    assert 2 <= len(said) <= 5, said
    assert all(s.startswith("step: ") and " of 60 MiB-ish (" in s and "so far" in s for s in said)


def test_run_with_progress_hands_the_error_back():
    def boom():
        raise ValueError("nope")

    try:
        progress.run_with_progress(boom, dict, "step", print, 0.05)
    except ValueError as exc:
        assert str(exc) == "nope"
    else:
        raise AssertionError("no error")


def test_ticker_keeps_a_record_file_that_poll_reads(tmp_path):
    path = str(tmp_path / "p.json")
    count = {"n": 0}

    def measure():
        count["n"] += 1
        return {"done": count["n"], "total": 100, "unit": "files"}

    lines = []
    with progress.Ticker("copying", progress.file_sink(path), measure, every=0.05) as ticker:
        time.sleep(0.2)
        ticker.set(what="checking")
        rec = progress.read(path)
        assert rec["what"] == "checking" and rec["done"] >= 2
        polls = iter([False, False, True])
        result = progress.poll(lambda: "job", lambda h: (next(polls), {"ok": h}), lambda h: progress.read(path),
                               lines.append, 0.01)
    assert result == {"ok": "job"}
    assert len(lines) == 2 and all(ln.startswith("checking: ") and " of 100 files" in ln for ln in lines)
