"""Smoke test of SGLang instances: fail-fast wait, real generation, speculative-decoding proof.

The seeds' lesson: a server that crashed at import was polled for minutes ("don't wait so long
when it fails fast"), a green /v1/models did not prove generation and nothing proved that
speculative decoding was on.  So:

* ``wait_units`` polls, for every instance at once, the unit's ActiveState/SubState/NRestarts
  (``systemctl show``) *and* ``/health`` every ``interval`` (0.25 s by default) under one overall
  timeout.  The first unit that failed, exited or was restarted by systemd ends the wait at once
  (fail fast); healthy means ``/health`` answered 200 while the unit is active and was not
  restarted.
* ``smoke_instance`` then sends a real chat completion (temperature 0, max_tokens 128, the
  seeds' fibonacci prompt) that must return ``content`` or ``reasoning_content`` and records
  tokens/s; for a speculative instance ``/get_server_info`` must name the algorithm and a
  ``/generate`` must show verify steps (``spec_verify_ct`` > 0) and an accept length.

Pure logic plus injected I/O (``show``, ``health``, ``http``, ``clock``, ``sleep``) so tests run
it against real local HTTP servers and recorded ``systemctl show`` output.  No Ansible import.
"""

from __future__ import annotations

import functools
import json
import os
import time
import urllib.error
import urllib.request

from ansible.module_utils.dflash_common.secrets import SECRET_FIELDS, env_file_secrets, redact
from ansible.module_utils.dflash_instances.tp import secondary_rank_record
from ansible.module_utils.dflash_release.activation import health as _health
from ansible.module_utils.dflash_release.gates import failed as gates_failed
from ansible.module_utils.dflash_release.gates import failure as gates_failure
from ansible.module_utils.dflash_release.gates import output_gates, perf_gates, release_context
from ansible.module_utils.dflash_release.gates import summary as gates_summary
from ansible.module_utils.dflash_release.gates_config import gate_errors, resolve
from ansible.module_utils.dflash_release.gates_perf import sample_body
from ansible.module_utils.dflash_service.runner import parse_env_file

API_KEY_VAR = SECRET_FIELDS["api_key"][0]

FIBONACCI_PROMPT = "Write a Python function fibonacci(n) using iteration. Return only code."
SHOW_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "ExecMainPID",
    "ExecMainStatus",
    "ExecMainCode",
)
SPECULATIVE_PROOF = ("DFLASH", "DDTREE")
# token ids used when the server runs with --skip-tokenizer-init (no chat possible): any ids work
FALLBACK_INPUT_IDS = [(i * 7919 + 13) % 150000 for i in range(32)]


class SmokeError(Exception):
    """A smoke step failed; ``record`` holds what was measured up to the failure."""

    def __init__(self, msg, record=None):
        super().__init__(msg)
        self.record = record or {}


# ----------------------------------------------------------------------------- arguments


def arg_value(args, flag):
    """Value of ``--flag value`` or ``--flag=value`` (the last one wins), else None."""
    value = None
    args = [str(a) for a in args or []]
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def has_flag(args, flag) -> bool:
    return any(str(a) == flag or str(a).startswith(flag + "=") for a in args or [])


def endpoint(args, port=None) -> str:
    """Base URL to reach an instance from its own host."""
    host = arg_value(args, "--host") or "127.0.0.1"
    if host in ("0.0.0.0", "::", "[::]", ""):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    port = port or arg_value(args, "--port") or 30000
    return f"http://{host}:{int(port)}"


def expected_algorithm(args, algorithm=None):
    algo = algorithm or arg_value(args, "--speculative-algorithm")
    if not algo or str(algo).upper() in ("NONE", "NULL", "OFF"):
        return None
    return str(algo).upper()


def unit_name(instance: str) -> str:
    return f"dflash-{instance}.service"


def instances_from_manifest(manifest: dict, names=None) -> list:
    """[{name, unit, args}] of a release manifest, for ``names`` (default: all of them)."""
    have = manifest.get("instances") or {}
    names = sorted(have) if names is None else list(names)
    unknown = [n for n in names if n not in have]
    if unknown:
        raise SmokeError(f"release {manifest.get('id')}: no instance {', '.join(unknown)} "
                         f"(it has: {', '.join(sorted(have)) or 'none'})")
    return [{"name": n, "unit": have[n].get("unit") or unit_name(n), "args": list(have[n].get("args") or [])}
            for n in names]


def load_manifest_instances(release_dir: str, names=None) -> list:
    """The instances of a release; each with its API key (``api_key``, sent as Authorization: Bearer) and
    every secret of its env file (``secrets``, masked in what the smoke test returns and records)."""
    try:
        with open(os.path.join(release_dir, "manifest.json"), encoding="utf-8") as fh:
            manifest = json.load(fh)
    except (OSError, ValueError) as exc:
        raise SmokeError(f"{release_dir}/manifest.json: {exc}") from None
    out = instances_from_manifest(manifest, names)
    for item in out:
        try:
            with open(os.path.join(release_dir, "instances", item["name"] + ".env"), encoding="utf-8") as fh:
                secrets = env_file_secrets(parse_env_file(fh.read()))
        except OSError:
            secrets = {}
        if secrets.get(API_KEY_VAR):
            item["api_key"] = secrets[API_KEY_VAR]
        if secrets:
            item["secrets"] = sorted(set(secrets.values()))
    return out


def instance_secret_values(instances) -> set:
    """Every secret the instances of a call carry (their API keys and env-file secrets)."""
    vals = set()
    for item in instances or []:
        vals |= set(item.get("secrets") or [])
        if item.get("api_key"):
            vals.add(str(item["api_key"]))
    return vals


# ----------------------------------------------------------------------------- module arguments
# What library/dflash_smoke.py and library/dflash_wait.py both take, defined once (their DOCUMENTATION
# stays per module). Functions, so that each AnsibleModule gets dicts of its own.


def target_argument_spec() -> dict:
    """Which instances a call is about (the list, or a release's manifest narrowed to names), where the
    records go, the host name for messages."""
    return {
        "instances": {"type": "list", "elements": "dict"},
        "release_dir": {"type": "path"},
        "names": {"type": "list", "elements": "str"},
        "record_dir": {"type": "path"},
        "host": {"type": "str", "default": ""},
    }


def target_constraints() -> dict:
    """AnsibleModule keyword arguments: exactly one of instances / release_dir."""
    return {"required_one_of": [("instances", "release_dir")], "mutually_exclusive": [("instances", "release_dir")]}


def smoke_argument_spec(timeout_key: str = "timeout") -> dict:
    """The smoke requests' options; dflash_wait calls the per-request timeout smoke_timeout (its own
    timeout is the wait's)."""
    return {
        "prompt": {"type": "str", "default": FIBONACCI_PROMPT},
        "max_tokens": {"type": "int", "default": 128},
        "temperature": {"type": "float", "default": 0.0},
        timeout_key: {"type": "float", "default": 120.0},
        "spec_max_new_tokens": {"type": "int", "default": 64},
    }


def gate_argument_spec() -> dict:
    """The gates' options (both modules): per-instance settings, the host's, the previous release."""
    return {
        "gates": {"type": "dict", "default": {}},
        "gate_defaults": {"type": "dict", "default": {}},
        "use_gates": {"type": "bool", "default": True},
        "baseline_release": {"type": "str"},
    }


def gate_options(params: dict, instances) -> tuple:
    """(gates by instance name or None, context) of a module call. Raises SmokeError naming the
    instance and field of a bad setting."""
    if not params.get("use_gates", True):
        return None, {}
    host_gates = params.get("gate_defaults") or {}
    per = params.get("gates") or {}
    problems = [f"dflash_smoke_gates: {f}: {m}" for f, m in gate_errors(host_gates, "dflash_smoke_gates")]
    out = {}
    for item in instances:
        name = item["name"]
        mine = per.get(name) or {}
        problems += [f"instance {name}: {f}: {m}" for f, m in gate_errors(mine)]
        out[name] = resolve(mine, host_gates, params.get("prompt") or FIBONACCI_PROMPT,
                            has_flag(item.get("args"), "--reasoning-parser"), params.get("max_tokens") or 128)
    if problems:
        raise SmokeError("; ".join(problems))
    return out, release_context(params.get("release_dir"), params.get("baseline_release"))


def smoke_options(params: dict, timeout_key: str = "timeout") -> dict:
    """The smoke_instance keyword arguments out of the module parameters."""
    return {"prompt": params["prompt"], "max_tokens": params["max_tokens"], "temperature": params["temperature"],
            "timeout": params[timeout_key], "spec_max_new_tokens": params["spec_max_new_tokens"]}


def target_instances(params: dict) -> list:
    """The instances of a call: the release manifest's (release_dir, names) or the given list.
    Raises SmokeError when the manifest cannot be read or lacks a name."""
    if params.get("release_dir"):
        return load_manifest_instances(params["release_dir"], params.get("names"))
    return params.get("instances") or []


def check_named(instances) -> None:
    """Raises SmokeError naming the first instance without a name."""
    for i, item in enumerate(instances):
        if not item.get("name"):
            raise SmokeError(f"instances[{i}]: name is required")


# ----------------------------------------------------------------------------- wait


def parse_show(text: str) -> dict:
    """``systemctl show -p A,B unit`` output -> {A: value}; NRestarts as int."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    for key in ("NRestarts", "ExecMainPID", "ExecMainStatus"):
        if key in out:
            try:
                out[key] = int(out[key])
            except ValueError:
                out[key] = None
    return out


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


def journal_argv(unit: str, since_epoch: float, lines: int = 5000) -> list:
    return ["journalctl", "-u", unit, "--since", f"@{int(since_epoch)}", "--no-pager", "-o", "cat",
            "-n", str(int(lines))]


def journal_tail(module, journalctl, unit, since, lines=400):
    """The unit's journal since `since` (its tail), through an AnsibleModule; "" without journalctl."""
    if not journalctl:
        return ""
    _rc, out, _err = module.run_command(journal_argv(unit, since, lines))
    return out


# ----------------------------------------------------------------------------- HTTP


def http_json(method, url, body=None, timeout=30.0, headers=None):
    """(status, parsed JSON or text).  Network errors raise SmokeError."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (OSError, urllib.error.URLError) as exc:
        raise SmokeError(f"{method} {url}: {exc.__class__.__name__}: {exc}") from exc
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def health_status(url, timeout=HEALTH_TIMEOUT):
    """HTTP status of GET url, None when nothing answers in time."""
    return _health(url, timeout)


# ----------------------------------------------------------------------------- smoke


def check_chat(status, body, elapsed, strict=True) -> dict:
    """The generation record of a chat completion. ``strict``: an empty reply fails here (without
    the degenerate-output gate, which otherwise names it)."""
    if status != 200 or not isinstance(body, dict):
        raise SmokeError(f"chat completion: HTTP {status}: {str(body)[:300]}")
    choices = body.get("choices") or []
    msg = (choices[0] or {}).get("message") or {} if choices else {}
    content, reasoning = msg.get("content"), msg.get("reasoning_content")
    if strict and not (content and str(content).strip()) and not (reasoning and str(reasoning).strip()):
        raise SmokeError(f"chat completion returned neither content nor reasoning_content: {str(body)[:300]}")
    usage = body.get("usage") or {}
    tokens = usage.get("completion_tokens")
    return {
        "returned": "content" if content else "reasoning_content",
        "text_head": str(content or reasoning)[:160],
        "completion_tokens": tokens,
        "finish_reason": (choices[0] or {}).get("finish_reason"),
        "seconds": round(elapsed, 3),
        "tokens_per_s": round(tokens / elapsed, 1) if tokens and elapsed > 0 else None,
    }


def server_info_algorithm(info):
    if not isinstance(info, dict):
        return None
    for src in (info, info.get("server_args") or {}):
        algo = src.get("speculative_algorithm")
        if algo:
            return str(algo).upper()
    return None


def check_spec_meta(status, body, elapsed) -> dict:
    if isinstance(body, list) and body:  # batch form
        body = body[0]
    if status != 200 or not isinstance(body, dict):
        raise SmokeError(f"/generate: HTTP {status}: {str(body)[:300]}")
    mi = body.get("meta_info") or {}
    verify = mi.get("spec_verify_ct")
    tokens = mi.get("completion_tokens")
    accept = mi.get("spec_accept_length")
    if accept is None and verify and tokens:
        accept = tokens / verify
    out = {
        "spec_verify_ct": verify,
        "spec_accept_length": round(float(accept), 3) if accept is not None else None,
        "completion_tokens": tokens,
        "seconds": round(elapsed, 3),
    }
    if not isinstance(verify, int | float) or verify <= 0:
        raise SmokeError(f"/generate meta_info shows no verify steps (spec_verify_ct={verify!r}): "
                         "speculative decoding is not running", out)
    if accept is None:
        raise SmokeError("/generate meta_info has no accept length (spec_accept_length)", out)
    return out


def smoke_instance(base_url, args, algorithm=None, prompt=FIBONACCI_PROMPT, max_tokens=128, temperature=0.0,
                   timeout=120.0, spec_max_new_tokens=64, http=http_json, clock=time.monotonic, gates=None,
                   context=None, api_key=None):
    """Generation + (for DFLASH/DDTREE) speculative proof, then the gates (``gates``: resolved
    settings of dflash_gates_config.resolve; None = no gates).  Returns the record; raises
    SmokeError (with the partial record) on the first failed step or on failed gates.
    ``context``: {name, release, previous, releases_root} for the performance baseline and the
    failure message. With ``api_key`` every request (the gates' too) carries
    ``Authorization: Bearer <key>`` (sglang answers 401 without it; /health needs none)."""
    rec = {"base_url": base_url, "authenticated": bool(api_key)}
    if api_key:
        http = functools.partial(http, headers={"Authorization": f"Bearer {api_key}"})
    ctx = dict(context or {})
    results = []
    strict = not (gates and gates.get("output", True) and gates.get("degenerate", True))
    try:
        status, info = http("GET", base_url + "/get_server_info", None, timeout)
        info = info if status == 200 and isinstance(info, dict) else {}
        rec["lab_standin"] = bool(info.get("lab_standin"))
        # what the play shows beside the verdict when the server is not sglang (the lab stand-in says so)
        rec["server_note"] = "LAB STAND-IN, not sglang" if rec["lab_standin"] else ""
        rec["version"] = info.get("version")

        skip_tok = has_flag(args, "--skip-tokenizer-init")
        if skip_tok:
            # no tokenizer: chat is impossible, generate from token ids instead
            body = {"input_ids": FALLBACK_INPUT_IDS,
                    "sampling_params": {"temperature": temperature, "max_new_tokens": max_tokens}}
            t = clock()
            status, out = http("POST", base_url + "/generate", body, timeout)
            dt = clock() - t
            if status != 200 or not isinstance(out, dict) or not out.get("output_ids"):
                raise SmokeError(f"/generate (input_ids): HTTP {status}: {str(out)[:300]}")
            n = len(out["output_ids"])
            rec["generation"] = {"via": "/generate input_ids (--skip-tokenizer-init)", "completion_tokens": n,
                                 "seconds": round(dt, 3), "tokens_per_s": round(n / dt, 1) if dt > 0 else None}
        else:
            status, models = http("GET", base_url + "/v1/models", None, timeout)
            model = None
            if status == 200 and isinstance(models, dict) and models.get("data"):
                model = models["data"][0].get("id")
            model = model or arg_value(args, "--served-model-name") or arg_value(args, "--model-path") or "default"
            body = {"model": model, "messages": [{"role": "user", "content": prompt}],
                    "temperature": temperature, "max_tokens": (gates or {}).get("max_tokens") or max_tokens}
            if (gates or {}).get("chat_template_kwargs"):
                body["chat_template_kwargs"] = dict(gates["chat_template_kwargs"])
            t = clock()
            status, out = http("POST", base_url + "/v1/chat/completions", body, timeout)
            rec["generation"] = dict(check_chat(status, out, clock() - t, strict), via="/v1/chat/completions",
                                     model=model)
            if gates:
                choice = ((out.get("choices") or [{}])[0] or {}) if isinstance(out, dict) else {}
                results += output_gates(choice.get("message") or {}, choice.get("finish_reason"), gates)
                # the reply itself, for the judge that runs on the controller (gates_judge.py, the action plugin)
                rec["reply"] = reply_record(choice.get("message") or {})

        expected = expected_algorithm(args, algorithm)
        rec["algorithm"] = expected
        if expected in SPECULATIVE_PROOF:
            got = server_info_algorithm(info)
            rec["server_info_algorithm"] = got
            if got != expected:
                raise SmokeError(f"/get_server_info names speculative_algorithm={got!r}, expected {expected}")
            body = {"sampling_params": {"temperature": 0, "max_new_tokens": spec_max_new_tokens}}
            if skip_tok:
                body["input_ids"] = FALLBACK_INPUT_IDS
            else:
                body["text"] = prompt
            t = clock()
            status, out = http("POST", base_url + "/generate", body, timeout)
            rec["speculative"] = check_spec_meta(status, out, clock() - t)
        if gates:
            if skip_tok:
                results.append({"gate": "output", "ran": False,
                                "reason": "--skip-tokenizer-init: no chat, no text to check"})
            # several short generations of a fixed length; the speculative proof above warmed up
            sbody = sample_body(prompt, spec_max_new_tokens, FALLBACK_INPUT_IDS if skip_tok else None)
            pctx = dict(ctx, args=args, prompt=prompt, max_new_tokens=spec_max_new_tokens,
                        lab_standin=rec.get("lab_standin"), baseline_release=ctx.get("previous"))
            perf, presults = perf_gates(http, base_url, sbody, gates, expected in SPECULATIVE_PROOF, pctx,
                                        timeout, clock)
            if perf is not None:
                rec["perf"] = perf
            results += presults
            rec["gates"] = results
            rec["gates_summary"] = gates_summary(results)
            if gates_failed(results):
                raise SmokeError(gates_failure(results, ctx), rec)
    except SmokeError as exc:
        msg = str(exc)
        if exc.record and exc.record is not rec:
            rec["speculative"] = exc.record
        if results and "gates" not in rec:
            # a later step failed after gates that already failed: name both
            rec["gates"] = results
            rec["gates_summary"] = gates_summary(results)
            if gates_failed(results):
                msg = f"{gates_failure(results, ctx)}; then: {msg}"
        rec["error"] = msg
        raise SmokeError(msg, rec) from None
    return rec


REPLY_MAX_CHARS = 8000
# gates the controller runs on the reply the smoke test returned (action_plugins/dflash_wait.py)
CONTROLLER_GATES = ("output.judge",)


def reply_record(message: dict) -> dict:
    """{content, reasoning_content} of a chat message, each cut to REPLY_MAX_CHARS (None when absent)."""
    out = {}
    for key in ("content", "reasoning_content"):
        val = (message or {}).get(key)
        if val is None and key == "reasoning_content":
            val = (message or {}).get("reasoning")
        out[key] = None if val is None else str(val)[:REPLY_MAX_CHARS]
    return out


def judged_records(records: dict, context: dict, where: str = "") -> tuple:
    """The smoke records with the gates judged on the controller added (``records``: {name: record whose
    ``gates`` already hold them}): summary, passed and error brought up to date. Returns (records, failed
    names, messages) as smoke_all does; a record that failed before keeps its error, a judged gate that
    failed is added to it."""
    out, failed, msgs = {}, [], []
    for name in sorted(records):
        rec = dict(records[name] or {})
        results = list(rec.get("gates") or [])
        rec["gates_summary"] = gates_summary(results)
        judged_bad = [r for r in gates_failed(results) if r.get("gate") in CONTROLLER_GATES]
        if judged_bad:
            if rec.get("passed", True):
                rec["error"] = gates_failure(results, context)
            else:
                rec["error"] = f"{rec.get('error')}; " + "; ".join(
                    f"gate {r['gate']} failed: {r.get('detail')}" for r in judged_bad)
            rec["passed"] = False
        if not rec.get("passed", True):
            failed.append(name)
            msgs.append(f"{where}instance {name}: smoke failed: {rec.get('error')}")
        out[name] = rec
    return out, failed, msgs


def merge_record(record_dir, name, key, value):
    """Set ``key`` in ``<record_dir>/<name>.json`` (the smoke record of one instance)."""
    os.makedirs(record_dir, mode=0o755, exist_ok=True)
    path = os.path.join(record_dir, name + ".json")
    try:
        with open(path, encoding="utf-8") as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        rec = {}
    rec[key] = value
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(rec, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")
    os.replace(tmp, path)
    return path


def smoke_all(instances, opts, record_dir=None, where="", gates=None, context=None):
    """smoke_instance for each {name, args, algorithm?, base_url?, port?}; records go to
    ``<record_dir>/<name>.json`` (key ``smoke``).  ``gates``: {name: resolved gates} (None: no
    gates); ``context``: {release, previous, releases_root}.  Returns (records by name, failed
    names, messages)."""
    results, failed, msgs = {}, [], []
    for item in instances:
        name = item["name"]
        args = [str(a) for a in item.get("args") or []]
        base = item.get("base_url") or endpoint(args, item.get("port"))
        secrets = instance_secret_values([item])
        try:
            rec = secondary_rank_record(args) or smoke_instance(
                base, args, algorithm=item.get("algorithm"), api_key=item.get("api_key"), **opts,
                gates=(gates or {}).get(name), context=dict(context or {}, name=name),
            )
            rec["passed"] = True
        except SmokeError as exc:
            rec = dict(exc.record, passed=False)
            failed.append(name)
            msgs.append(redact(f"{where}instance {name}: smoke failed: {exc}", secrets))
        rec = redact(rec, secrets)
        results[name] = rec
        if record_dir:
            merge_record(record_dir, name, "smoke", rec)
    return results, failed, msgs
