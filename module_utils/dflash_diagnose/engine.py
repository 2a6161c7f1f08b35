"""The verdict: the root cause is the first fatal error, the earliest strong match, unless a match of higher
priority belongs to the same incident (within ``INCIDENT_LINES`` lines after it)."""

from __future__ import annotations

import bisect
import os

from ansible.module_utils.dflash_diagnose import hang as _hang
from ansible.module_utils.dflash_diagnose import host as _host
from ansible.module_utils.dflash_diagnose import version as _version
from ansible.module_utils.dflash_diagnose.facts import _collect_facts
from ansible.module_utils.dflash_diagnose.fill import _clip, _evidence, _fill
from ansible.module_utils.dflash_diagnose.rule import Rule
from ansible.module_utils.dflash_diagnose.rules import RULES
from ansible.module_utils.dflash_diagnose.scan import (
    CONTEXT_AFTER,
    CONTEXT_BEFORE,
    DEFAULT_MAX_BYTES,
    _Match,
    _match_line,
    _pick,
    _Scan,
    _segments,
    _split_lines,
    read_log,
)
from ansible.module_utils.dflash_diagnose.structure import STRUCT_RULES, raised, structural_matches
from ansible.module_utils.dflash_diagnose.unknown import (
    _OS_ERROR_RE,
    KILL_RE,
    _first_generic_failure,
    _first_traceback,
    _generic_text,
    _kill_after,
    _unknown_hint,
)


def _failed_in_capture(st: dict, source: str) -> dict:
    """An error no rule knows, raised while the start-up was capturing CUDA graphs (its last stage line says capture
    had begun and not ended): the capture is where it failed, whatever the (unknown or cut) error was."""
    return {
        "cause": "cuda_graph_capture",
        "summary": (f"the start-up failed while capturing CUDA graphs (line {st['line'].index + 1} of {source} begins "
                    "the capture, and an error follows before it ends; no rule names the error itself)"),
        "remedy": ("start once with `--disable-cuda-graph` (vLLM: `--enforce-eager`) to confirm it is the capture "
                   "(a large speed loss: a stopgap only); then drop `--enable-torch-compile`, try another attention "
                   "backend (`--attention-backend triton`) or `--disable-custom-all-reduce`, lower "
                   "`--cuda-graph-max-bs`, and read the full traceback of the unit for the kernel that failed"),
    }


def diagnose_text(text: str, *, source: str = "log", read_info: dict | None = None, fingerprint: dict | None = None,
                  silent_seconds: float | None = None, sglang: dict | None = None) -> dict:
    """Diagnose a log given as text. Returns {cause, summary, remedy, evidence, ...}.

    ``fingerprint``: the host's ``dflash_fingerprint`` (its GPU, SM, driver, CUDA and toolkits replace what the
    log seems to say; result key ``host``). ``silent_seconds``: how long the log has been silent while the
    server was still starting (the wait knows it): a log without an error is then a hang (``startup_hang``)
    wherever it stopped. ``sglang``: the facts of the sglang version the server runs (dflash_common/sglang.py
    ``Facts.host``): the remedies name that version's pins and options (diagnose/version.py)."""
    lines = _split_lines(text or "")
    scan = _Scan(lines)
    segs = _segments(lines, scan)
    host = _host.summary(fingerprint)
    facts, host_notes = _host.merge(_collect_facts([lines[i].text for i in sorted(scan.fact_lines)]), host)
    if host.get("sm"):
        facts["host_sm"], facts["host_gpu"] = host["sm"], host.get("gpu")
    facts.update(_version.fill(sglang))
    rule_lines = sorted(scan.rule_lines)
    exceptions = raised(lines)

    chosen = None
    seg_matches: list[_Match] = []
    seg_no, seg = len(segs), segs[-1] if segs else (0, 0)
    weak_only: list[_Match] = []
    survived: list[_Match] = []
    # latest start of the unit that failed; if none failed, the whole log
    for i in range(len(segs) - 1, -1, -1):
        a, b = segs[i]
        lo, hi = bisect.bisect_left(rule_lines, a), bisect.bisect_left(rule_lines, b)
        ms = [m for li in rule_lines[lo:hi] for m in _match_line(lines[li])] + structural_matches(exceptions, a, b)
        # an error the same start went on past, to the end of its warm-up, did not stop the server
        ready = [r for r in scan.ready_lines if a <= r < b]
        gone_past = [m for m in ms if not m.rule.weak and ready and ready[-1] > m.line.index]
        if gone_past:
            ms = [m for m in ms if m not in gone_past]
            if i == len(segs) - 1:
                survived = gone_past
        pick = _pick(ms)
        if pick:
            chosen, seg_matches, seg_no, seg = pick, ms, i + 1, (a, b)
            break
        if i == len(segs) - 1:
            weak_only = [m for m in ms if m.rule.weak]
            seg_matches = ms

    result = {
        "cause": "unknown",
        "summary": "",
        "remedy": "",
        "evidence": [],
        "facts": {k: v for k, v in facts.items() if k not in ("driver_cuda_raw", "host_sm", "host_gpu")},
        "lines": len(lines),
        "source": source,
        "starts": len(segs),
    }
    if read_info:
        result.update(read_info)
    if host:
        result["host"] = {k: v for k, v in host.items() if k != "topology"}
    if host_notes:
        result["notes"] = host_notes
    if silent_seconds is not None:
        result["silent_seconds"] = round(float(silent_seconds), 1)

    superseded = None
    if chosen is not None and not chosen.rule.weak:
        kill = _kill_after(lines, chosen.line.index, seg[1], scan.rule_lines)
        if kill is not None:
            superseded, chosen = (chosen, kill), None
    if chosen is None and weak_only:
        hint = min(weak_only, key=lambda m: (-m.rule.priority, m.line.index))
        healthy_after = any(i >= hint.line.index for i in scan.healthy_lines)
        generic = _first_generic_failure(lines[hint.line.index:])
        # a warning the start-up went on past (later stage lines, no error) does not outrank the stage it then hung
        # in: NCCL RAS's "bind failed: Address already in use" while the communicator set-up carries on
        quiet = generic is None or KILL_RE.search(generic.text)  # a kill ends a hang too: the stage is named then
        st = _hang.last_stage(lines) if quiet and _first_traceback(lines[hint.line.index:]) is None else None
        went_on = st is not None and st["line"].index > hint.line.index and (st["under_way"] or silent_seconds)
        if (not healthy_after or generic) and not went_on:
            chosen = hint  # a warning that explains a crash nobody named
    if chosen is None:
        healthy = [lines[i] for i in scan.healthy_lines]
        # a generic error line before the end of the last start's warm-up did not stop it either
        last_seg = segs[-1] if segs else (0, len(lines))
        ready = [r for r in scan.ready_lines if last_seg[0] <= r < last_seg[1]]
        generic = superseded[1] if superseded else _first_generic_failure(lines[ready[-1]:] if ready else lines)
        notes = "; ".join(sorted({m.rule.summary.split("{")[0].strip() for m in weak_only}))
        if generic is not None:
            first = _generic_text(lines, generic)
            result["summary"] = (f"no known cause matched in {source} ({len(lines)} lines); first error: "
                                 f"{_clip(first)}")
            hint = _unknown_hint(first)
            result["remedy"] = (f"{hint}; " if hint else "") + (
                "read the evidence line and the lines before it; rerun the server in the foreground to see "
                "the full traceback")
            result["evidence"] = [_clip(generic.raw)]
            # a kill that ends a start-up which had stopped inside a stage: say where it was
            st = _hang.last_stage(lines[: generic.index])
            if st is not None and st["under_way"] and KILL_RE.search(generic.text):
                result["summary"] += (f"; the start-up had stopped in {_hang.STAGE_WORDS[st['stage']]} ({st['stage']}) "
                                      "with no error line before that")
                result["stage"] = st["stage"]
            elif st is not None and st["under_way"] and st["stage"] == "graph_capture":
                result.update(_failed_in_capture(st, source))
            if superseded:
                early = superseded[0]
                result["summary"] += (f"; the earlier {early.rule.cause} line {early.line.index + 1} did not stop "
                                      "the process (it went on until it was killed)")
                result["evidence"].insert(0, _clip(early.line.raw))
        elif (tb := _first_traceback(lines)) is not None and not healthy:
            result["summary"] = (f"a traceback starts at line {tb.index + 1} of {source} but the log ends "
                                 "before its error line (log cut short?)")
            result["remedy"] = ("read the full journal of the unit (journalctl -u <unit> --no-pager) or "
                                "rerun the server in the foreground to see the exception")
            result["evidence"] = [_clip(tb.raw)]
            st = _hang.last_stage(lines[: tb.index])
            if st is not None and st["under_way"] and st["stage"] == "graph_capture":
                result.update(_failed_in_capture(st, source))
                result["evidence"].insert(0, _clip(st["line"].raw))
            # an OS error logged before the traceback (even one the program chose to ignore) is the lead
            oserr = next((ln for ln in lines[: tb.index] if _OS_ERROR_RE.search(ln.text)), None)
            if oserr is not None:
                result["summary"] += f"; an OS error precedes it: {_clip(oserr.text)}"
                hint = _unknown_hint(oserr.text)
                if hint:
                    result["remedy"] = f"{hint}; {result['remedy']}"
                result["evidence"].insert(0, _clip(oserr.raw))
        elif (hung := _hang_verdict(lines, healthy, silent_seconds, host)) is not None:
            result.update(hung)
        else:
            state = "the server reported ready" if healthy else "no error line"
            result["summary"] = f"no failure found in {source} ({len(lines)} lines; {state})"
            if notes:
                result["summary"] += f"; warnings only: {notes}"
            result["remedy"] = "nothing to fix from this log"
            result["evidence"] = [_clip(healthy[-1].raw)] if healthy else []
            if survived:
                kept = []
                for m in sorted(survived, key=lambda m: m.line.index):
                    text = m.rule.summary.format_map(_fill(m, facts, lines, m.line.raw))
                    if text not in kept:
                        kept.append(text)
                result["summary"] += ("; errors the server survived (logged before it was up and ready): "
                                      + "; ".join(kept))
                result["survived"] = kept
                result["remedy"] = ("nothing stopped the server; what the survived errors need (e.g. an optional "
                                    "module for one endpoint) is missing until fixed, as their lines say")
                result["evidence"] = [_clip(m.line.raw) for m in survived[:3]] + result["evidence"]
        return result

    # the text around the decision (remedy details such as OOM numbers or NCCL hints come from here)
    lo = max(seg[0], chosen.line.index - CONTEXT_BEFORE)
    hi = min(seg[1], chosen.line.index + CONTEXT_AFTER)
    seg_text = "\n".join(ln.raw for ln in lines[lo:hi])
    fill = _fill(chosen, facts, lines, seg_text)
    rule = chosen.rule
    if rule.name == "sglang_watchdog_timeout":  # the stage the server hung in: the start-up lines before it
        st = _hang.last_stage(lines[seg[0]: chosen.line.index])
        up = st is not None and st["marker_stage"] == "ready"
        stage = st["stage"] if st and not up else "other"
        if st is None:  # no start-up line before it: the stack the watchdog dumped says where it stood
            stage = _hang.stage_from_stack(lines[chosen.line.index + 1: min(seg[1], chosen.line.index + 40)]) or stage
        words = "serving, after the start-up" if up else _hang.STAGE_WORDS[stage]
        fill.update(stage=stage, stage_words=words, hang_remedy=_hang.remedy(stage, seg_text, host)
                    or "rerun with NCCL_DEBUG=INFO and read the stack dump the watchdog printed")
    summary = rule.summary.format_map(fill)
    if len(segs) > 1:
        summary += f" (start {seg_no} of {len(segs)} in this log)"
    others = []
    for m in sorted(seg_matches, key=lambda m: m.line.index):
        if m.rule.cause != rule.cause and not m.rule.weak and m.rule.cause not in others:
            others.append(m.rule.cause)
    result.update({
        "cause": rule.cause,
        "summary": summary,
        "remedy": rule.remedy.format_map(fill),
        "evidence": _evidence(chosen, seg_matches, lines),
        "rule": rule.name,
        "line": chosen.line.index + 1,
        "also_seen": others,
    })
    if rule.weak:
        result["summary"] += " (from a warning: no fatal error line was found)"
    if rule.cause == "startup_hang":
        result["stage"] = fill.get("stage", "other")
    return result


def _hang_verdict(lines, healthy, silent_seconds, host) -> dict | None:
    """startup_hang for a log without an error: it stops inside a start-up stage, or the wait says it has been
    silent (then wherever it stopped). None when it is no hang (ready, died, or merely cut after a step)."""
    st = _hang.last_stage(lines)
    if st is not None and (st["marker_stage"] == "ready" or st["died"] is not None):
        return None
    if healthy and not (silent_seconds is not None and st is not None and st["stage"] == "warmup"):
        return None
    if silent_seconds is None and (st is None or not st["under_way"]):
        return None
    stage = st["stage"] if st else "other"
    text = "\n".join(ln.raw for ln in lines)
    quiet = _hang.silence_text(silent_seconds)
    if st is not None:
        where = f"the last start-up line (line {st['line'].index + 1}) is {_clip(st['line'].text)[:160]!r}"
    else:
        where = f"the log ({len(lines)} lines) names no start-up stage"
    if quiet:
        summary = (f"the start-up hangs in {_hang.STAGE_WORDS[stage]} ({stage}): no error line, {where}, and the log "
                   f"has been silent for {quiet}")
    else:
        summary = (f"the start-up stops in {_hang.STAGE_WORDS[stage]} ({stage}) with no error line: {where}; if the "
                   "server has been silent since, it hangs there")
    if host.get("gpus"):
        summary += f" (host: {host['gpus']})"
    evidence = [_clip(st["line"].raw)] if st is not None else []
    return {"cause": "startup_hang", "stage": stage, "summary": summary,
            "remedy": _hang.remedy(stage, text, host), "evidence": evidence,
            "rule": "startup_stage", "line": st["line"].index + 1 if st else None}


def diagnose_file(path: str, max_bytes: int = DEFAULT_MAX_BYTES, fingerprint: dict | None = None,
                  silent_seconds: float | None = None, sglang: dict | None = None) -> dict:
    text, info = read_log(path, max_bytes=max_bytes)
    return diagnose_text(text, source=os.path.basename(path), read_info=info, fingerprint=fingerprint,
                         silent_seconds=silent_seconds, sglang=sglang)


def fields_for(cause: str) -> list[Rule]:
    """The rules of one cause, line rows and structural rows (for docs and tests)."""
    return [r for r in [*RULES, *STRUCT_RULES] if r.cause == cause]
