"""Smoke test of SGLang instances: real generation, speculative-decoding proof, the gates.

The seeds' lesson: a green /v1/models did not prove generation and nothing proved that speculative decoding was
on. So ``smoke_instance`` sends a real chat completion (temperature 0, max_tokens 128, the seeds' fibonacci
prompt) that must return ``content`` or ``reasoning_content`` and records tokens/s; for a speculative instance
``/get_server_info`` must name the algorithm and a ``/generate`` must show verify steps (``spec_verify_ct`` > 0)
and an accept length; then the gates (``gates.py``). The wait before it (fail fast) is ``wait.py``; the module
arguments both share, ``target.py``.

Pure logic plus injected I/O (``http``, ``clock``) so tests run it against real local HTTP servers. No Ansible
import.
"""

from __future__ import annotations

import functools
import json
import os
import time
import urllib.error
import urllib.request

from ansible.module_utils.dflash_common.argv import arg_value, has_flag
from ansible.module_utils.dflash_common.net import local_url
from ansible.module_utils.dflash_common.secrets import SECRET_FIELDS, redact
from ansible.module_utils.dflash_common.sglang import ACCEPTED_KEYS, DEFAULT_PORT, accepted_drafts
from ansible.module_utils.dflash_release.gates import failed as gates_failed
from ansible.module_utils.dflash_release.gates import failure as gates_failure
from ansible.module_utils.dflash_release.gates import output_gates, perf_gates
from ansible.module_utils.dflash_release.gates import summary as gates_summary
from ansible.module_utils.dflash_release.gates_perf import sample_body

API_KEY_VAR = SECRET_FIELDS["api_key"][0]

FIBONACCI_PROMPT = "Write a Python function fibonacci(n) using iteration. Return only code."
SPECULATIVE_PROOF = ("DFLASH", "DDTREE")
# token ids used when the server runs with --skip-tokenizer-init (no chat possible): any ids work
FALLBACK_INPUT_IDS = [(i * 7919 + 13) % 150000 for i in range(32)]


class SmokeError(Exception):
    """A smoke step failed; ``record`` holds what was measured up to the failure."""

    def __init__(self, msg, record=None):
        super().__init__(msg)
        self.record = record or {}


def base_url(item: dict, index: int = 0) -> str:
    """Where an instance of a call answers: its ``base_url``, else its ``port`` (sglang's default without one) on
    its ``host`` (127.0.0.1 when none or a wildcard). Raises SmokeError naming the instance of a bad port."""
    if item.get("base_url"):
        return str(item["base_url"]).rstrip("/")
    try:
        return local_url(item.get("host"), DEFAULT_PORT if item.get("port") is None else item["port"])
    except (TypeError, ValueError):
        raise SmokeError(f"instances[{index}] ({item.get('name')}): port {item.get('port')!r} is not a number") from None


def expected_algorithm(args, algorithm=None):
    algo = algorithm or arg_value(args, "--speculative-algorithm")
    if not algo or str(algo).upper() in ("NONE", "NULL", "OFF"):
        return None
    return str(algo).upper()


def instance_secret_values(instances) -> set:
    """Every secret the instances of a call carry (their API keys and env-file secrets)."""
    vals = set()
    for item in instances or []:
        vals |= set(item.get("secrets") or [])
        if item.get("api_key"):
            vals.add(str(item["api_key"]))
    return vals


def node_rank(args) -> int:
    """--node-rank of a launch argument list (0 when absent or not a number)."""
    try:
        return int(arg_value(args, "--node-rank") or 0)
    except ValueError:
        return 0


def secondary_rank_record(args):
    """The smoke record of a node rank > 0 of a multi-node instance (its server only answers /health,
    /health_generate, /metrics: generation goes through rank 0), or None for rank 0 and single-node instances."""
    rank = node_rank(args)
    if rank == 0:
        return None
    return {"passed": True, "node_rank": rank, "stand_in": None,
            "generation": {"via": f"health only: node rank {rank} serves no HTTP API (rank 0 is smoke-tested)",
                           "completion_tokens": 0, "tokens_per_s": None}}


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


def check_spec_meta(status, body, elapsed, meta_keys=None) -> dict:
    """The speculative proof of a /generate answer. ``meta_keys``: the sglang version's meta_info names
    (versions.yml meta_info_keys: 0.5.11 spec_accepted_drafts, from 0.5.17 spec_num_correct_drafts); the accepted
    drafts are read under that name, else any a supported version uses."""
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
    key = next((k for k in [(meta_keys or {}).get("accepted"), *ACCEPTED_KEYS] if k and k in mi), None)
    out = {
        "spec_verify_ct": verify,
        "spec_accept_length": round(float(accept), 3) if accept is not None else None,
        "completion_tokens": tokens,
        "seconds": round(elapsed, 3),
    }
    if key:
        out.update(accepted_drafts=accepted_drafts(mi, meta_keys), accepted_drafts_key=key)
    if not isinstance(verify, int | float) or verify <= 0:
        raise SmokeError(f"/generate meta_info shows no verify steps (spec_verify_ct={verify!r}): "
                         "speculative decoding is not running", out)
    if accept is None:
        raise SmokeError("/generate meta_info has no accept length (spec_accept_length)", out)
    return out


def smoke_instance(base_url, args, algorithm=None, prompt=FIBONACCI_PROMPT, max_tokens=128, temperature=0.0,
                   timeout=120.0, spec_max_new_tokens=64, http=http_json, clock=time.monotonic, gates=None,
                   context=None, api_key=None, sglang=None):
    """Generation + (for DFLASH/DDTREE) speculative proof, then the gates (``gates``: resolved
    settings of dflash_gates_config.resolve; None = no gates).  Returns the record; raises
    SmokeError (with the partial record) on the first failed step or on failed gates.
    ``context``: {name, release, previous, releases_root} for the performance baseline and the
    failure message. With ``api_key`` every request (the gates' too) carries
    ``Authorization: Bearer <key>`` (sglang answers 401 without it; /health needs none). ``sglang``: the facts of
    the sglang version the instance runs (its meta_info names; recorded as ``sglang_version``)."""
    rec = {"base_url": base_url, "authenticated": bool(api_key)}
    if sglang:
        rec["sglang_version"] = sglang.get("version")
    if api_key:
        http = functools.partial(http, headers={"Authorization": f"Bearer {api_key}"})
    ctx = dict(context or {})
    results = []
    strict = not (gates and gates.get("output", True) and gates.get("degenerate", True))
    try:
        status, info = http("GET", base_url + "/get_server_info", None, timeout)
        info = info if status == 200 and isinstance(info, dict) else {}
        # a server that is not sglang says so itself (/get_server_info "stand_in": what it is); None for sglang
        rec["stand_in"] = str(info.get("stand_in")) if info.get("stand_in") else None
        # what the play shows beside the verdict
        rec["server_note"] = f"STAND-IN, not sglang: {rec['stand_in']}" if rec["stand_in"] else ""
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
            rec["speculative"] = check_spec_meta(status, out, clock() - t, (sglang or {}).get("meta_info_keys"))
        if gates:
            if skip_tok:
                results.append({"gate": "output", "ran": False,
                                "reason": "--skip-tokenizer-init: no chat, no text to check"})
            # several short generations of a fixed length; the speculative proof above warmed up
            sbody = sample_body(prompt, spec_max_new_tokens, FALLBACK_INPUT_IDS if skip_tok else None)
            pctx = dict(ctx, args=args, prompt=prompt, max_new_tokens=spec_max_new_tokens,
                        stand_in=rec.get("stand_in"), baseline_release=ctx.get("previous"))
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
        base = base_url(item)
        secrets = instance_secret_values([item])
        try:
            rec = secondary_rank_record(args) or smoke_instance(
                base, args, algorithm=item.get("algorithm"), api_key=item.get("api_key"), sglang=item.get("sglang"),
                **opts,
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
