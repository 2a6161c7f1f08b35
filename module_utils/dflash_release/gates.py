"""Smoke gates of one instance: the output gates on the T=0 reply, the speculative and
performance gates on several short generations, and the failure message that names the gate,
the figure, the threshold and both releases.

``smoke_instance`` (smoke.py) calls ``output_gates`` after the chat request and
``perf_gates`` after the speculative proof; ``failure`` turns failed gates into the message that
fails the smoke test (and so reaches the release's rescue, which puts the previous release back).
Pure functions (the code check starts one sandboxed subprocess); no Ansible import.
"""

from __future__ import annotations

import os

from ansible.module_utils.dflash_release.gates_output import (
    degenerate_reply,
    extract_code,
    match_patterns,
    reply_texts,
    run_code,
)
from ansible.module_utils.dflash_release.gates_perf import (
    PerfError,
    conditions,
    find_baseline,
    judge,
    measure,
)


def _skip(gate, reason):
    return {"gate": gate, "ran": False, "reason": reason}


def _call(function, args):
    return f"{function}({', '.join(repr(a) for a in args)})"


def output_gates(message: dict, finish_reason, gates: dict, code_runner=run_code) -> list:
    """Gate results of the T=0 reply (a chat completion ``message``)."""
    if not gates.get("output", True):
        return [_skip("output", "output gates are off (smoke_gates.output: false, e.g. dummy weights)")]
    texts = reply_texts(message)
    cut = " (the reply was cut at max_tokens: finish_reason=length)" if finish_reason == "length" else ""
    only_reasoning = not texts["content"].strip() and texts["reasoning"].strip()
    hint = (f"{cut}; a reasoning model thinks first: raise smoke_gates.max_tokens or send "
            "smoke_gates.chat_template_kwargs {enable_thinking: false}") if only_reasoning and cut else cut
    out = []
    if gates.get("degenerate", True):
        why = degenerate_reply(texts, finish_reason)
        out.append({"gate": "output.degenerate", "ran": True, "passed": why is None,
                    "detail": why or "the reply reads like text"})
    else:
        out.append(_skip("output.degenerate", "degenerate is off (smoke_gates.degenerate: false)"))
    patterns = gates.get("expect") or []
    if patterns:
        found = match_patterns(patterns, texts)
        missing = [f["pattern"] for f in found if not f["found_in"]]
        where = sorted({f["found_in"] for f in found if f["found_in"]})
        out.append({"gate": "output.expect", "ran": True, "passed": not missing,
                    "figure": f"{len(found) - len(missing)}/{len(found)} patterns",
                    "detail": (f"missing {', '.join(repr(p) for p in missing)} in content and reasoning_content{hint}"
                               if missing else f"all {len(found)} patterns found (in {', '.join(where)})")})
    else:
        out.append(_skip("output.expect", "no expected patterns (a custom prompt without smoke_gates.expect)"))
    if gates.get("code_check"):
        fn, args = gates.get("code_function", "fibonacci"), list(gates.get("code_args") or [])
        call = _call(fn, args)
        code = extract_code(texts["content"], fn) or extract_code(texts["reasoning"], fn)
        if code is None:
            out.append({"gate": "output.code", "ran": True, "passed": False, "threshold": gates.get("code_expect"),
                        "detail": f"no Python code defining {fn} in the reply{hint}"})
        else:
            res = code_runner(code, fn, args, timeout=float(gates.get("code_timeout", 5)))
            expect = list(gates.get("code_expect") or [])
            if not res.get("ok"):
                out.append({"gate": "output.code", "ran": True, "passed": False, "threshold": expect,
                            "detail": f"{call}: {res.get('error')}{cut}"})
            else:
                value = res.get("value")
                ok = value in expect and not res.get("not_json")
                out.append({"gate": "output.code", "ran": True, "passed": ok, "figure": res.get("repr"),
                            "threshold": expect,
                            "detail": f"{call} returned {res.get('repr')}"
                                      + ("" if ok else f", expected {' or '.join(repr(e) for e in expect)}{cut}")})
    else:
        out.append(_skip("output.code", "code_check is off (a custom prompt, or smoke_gates.code_check: false)"))
    return out


def perf_gates(http, base_url, body, gates: dict, speculative: bool, ctx: dict, timeout: float, clock) -> tuple:
    """(measurement record, gate results). ``ctx``: {name, args, prompt, max_new_tokens, stand_in,
    releases_root, baseline_release}."""
    wanted = gates.get("perf", True) or (speculative and float(gates.get("min_accept_length") or 0) > 0)
    if not wanted:
        return None, [_skip("perf", "perf is off and no minimum accept length applies")]
    try:
        measured = measure(http, base_url, body, gates.get("perf_samples", 3), timeout, clock)
    except PerfError as exc:
        return None, [{"gate": "perf.samples", "ran": True, "passed": False, "detail": str(exc)}]
    measured["conditions"] = conditions(ctx.get("args"), ctx.get("prompt"), ctx.get("max_new_tokens"),
                                        measured["timing"], ctx.get("stand_in"))
    baseline, notes = None, []
    root, start = ctx.get("releases_root"), ctx.get("baseline_release")
    if gates.get("perf", True) and root and start:
        baseline, notes = find_baseline(root, start, ctx["name"], measured["conditions"])
    elif gates.get("perf", True):
        notes = ["no previous release given (a first deploy, a rollback or an on-demand smoke test)"]
    if baseline:
        measured["baseline"] = {k: baseline.get(k) for k in ("release", "tokens_per_s_median",
                                                             "accept_length_median")}
    return measured, judge(measured, baseline, gates, speculative, notes)


def failed(results) -> list:
    return [r for r in results or [] if r.get("ran") and not r.get("passed")]


def summary(results) -> str:
    """One line: which gates ran (and passed or not) and which were skipped, with why."""
    ran = [f"{r['gate']} {'ok' if r.get('passed') else 'FAILED'}" for r in results or [] if r.get("ran")]
    skipped = [f"{r['gate']} ({r.get('reason')})" for r in results or [] if not r.get("ran")]
    out = "gates ran: " + (", ".join(ran) or "none")
    if skipped:
        out += "; skipped: " + "; ".join(skipped)
    return out


def release_context(release_dir: str | None, baseline_release: str | None) -> dict:
    """{release, previous, releases_root} of a smoke test run on ``release_dir``."""
    if not release_dir:
        return {"release": None, "previous": baseline_release, "releases_root": None}
    real = os.path.realpath(release_dir)
    return {"release": os.path.basename(real), "previous": baseline_release, "releases_root": os.path.dirname(real)}


def failure(results, ctx: dict) -> str:
    """The message of failed gates: each gate with its figure and threshold, and both releases."""
    rel = ctx.get("release") or "(no release)"
    prev = ctx.get("previous") or "none"
    parts = [f"gate {r['gate']} failed: {r.get('detail')}" for r in failed(results)]
    return f"release {rel} (previous {prev}): " + "; ".join(parts)
