#!/usr/bin/env python3
"""LAB STAND-IN for `python -m sglang.launch_server` (sglang 0.5.11, or the version it plays). NOT SGLang.

Lab containers have no GPU, so lab units run this file with the same flags the real server
would get. It parses the launch flags like sglang's argparse parser does, says loudly that it
is a stand-in (first log line, ``/get_server_info`` has ``"stand_in": "<what it is>"``) and answers the
endpoints the smoke tests use with the shapes of sglang 0.5.11, deterministically:

  GET  /health /health_generate       200, empty body, after DFLASH_STANDIN_HEALTH_DELAY s (default 1,
                                      as sglang's one-token probe); 503 at once while "starting"
  GET  /v1/models, /v1/models/{name}  OpenAI model list / card
  GET  /get_server_info /server_info  server args + scheduler info + version + stand_in
  GET  /get_model_info /model_info    model path, is_generation, ...
  GET  /metrics                       Prometheus text with sglang 0.5.11's metric names and labels,
                                      only with --enable-metrics (404 without it, as sglang); values
                                      follow what the stand-in does: num_running_reqs counts the
                                      requests being answered right now, num_queue_reqs those waiting
                                      for a slot (DFLASH_STANDIN_SPEEDS), gen_throughput is their
                                      decode speed (0 when idle), token_usage their tokens over the
                                      KV capacity, spec_accept_length/_rate those of the last request
                                      (chat too), token and request counters, time-to-first-token /
                                      inter-token / end-to-end histograms (sglang's buckets) from the
                                      simulated timings, process_cpu_seconds_total (restarts reset it)
  POST /lab/fault {"fault": F}        stand-in only: switch the fault mode of a running server (F one
                                      of RUNTIME_FAULTS: "" for none, low_accept, degenerate,
                                      wrong_answer and the broken replies token_soup, mojibake,
                                      sentence_loop, regurgitation), e.g. to make its accept length drop for the
                                      alert rules; 400 for another; needs the API key like the API
  POST /v1/chat/completions           content / reasoning_content, usage; honours max_tokens,
                                      temperature, seed, stream
  POST /generate                      text or input_ids; meta_info with completion_tokens and,
                                      with --speculative-algorithm, spec_verify_ct,
                                      spec_accept_length, spec_accept_rate, the accepted and proposed
                                      drafts under the names of the version it plays (0.5.11:
                                      spec_accepted_drafts / spec_proposed_drafts; 0.5.17 adds
                                      spec_num_correct_drafts / spec_num_proposed_drafts and keeps the
                                      old ones as aliases; 0.5.23 only the new ones), spec_accept_histogram
                                      "stream": true -> SSE chunks as sglang sends them (cumulative
                                      text and completion_tokens; spec fields on the last chunk),
                                      one chunk per verify step (per token without speculation),
                                      DFLASH_STANDIN_STEP_DELAY seconds apart (default 0.002, for the
                                      benchmark: STAND-IN TIMINGS, NOT A MODEL'S), meta_info
                                      "lab_standin": true; cached_tokens from a small prefix cache

Fault injection (environment, e.g. from the instance's `env` in the inventory):
  DFLASH_STANDIN_FAULT=crash  print DFLASH_STANDIN_FAULT_LOG (a file, or a cause name whose log is
                              faults/<cause>.log next to this file) to stderr, exit 1; optional
                              DFLASH_STANDIN_FAULT_DELAY seconds before that
  DFLASH_STANDIN_FAULT=slow   /health is 503 for DFLASH_STANDIN_START_DELAY seconds (default 5)
  DFLASH_STANDIN_FAULT=hang   listens, but /health never answers 200; its log stops in a start-up stage
                              (DFLASH_STANDIN_HANG_LOG, a file or a name under faults/; default
                              faults/startup_hang.log: the NCCL set-up)
  DFLASH_STANDIN_FAULT=wrong  healthy, but chat content and reasoning are empty, /generate has no
                              spec fields and server info says speculative_algorithm null
  DFLASH_STANDIN_FAULT=wrong_answer  the fibonacci answer is code that runs but returns 1 (a def
                              and a loop, the wrong value)
  DFLASH_STANDIN_FAULT=degenerate    every reply is one character repeated ("!!!!", the seeds' CT129)
  DFLASH_STANDIN_FAULT=token_soup    every reply is token soup: subword pieces of six scripts (a quantised
                              model served with the wrong kernels)
  DFLASH_STANDIN_FAULT=mojibake      the right code after a sentence whose UTF-8 was read as cp1252
                              ("Hereâ€™s ...")
  DFLASH_STANDIN_FAULT=sentence_loop the right code, then one sentence again and again until max_tokens
  DFLASH_STANDIN_FAULT=regurgitation the reply replays the chat template: user turn, assistant turn, ...
  DFLASH_STANDIN_FAULT=slower decoding is DFLASH_STANDIN_SLOWER_FACTOR (default 0.6: 40% slower) times
                              the usual speed
  DFLASH_STANDIN_FAULT=low_accept    speculation accepts fewer drafts (accept length about 2 instead
                              of about 4)

Speed: the stand-in "decodes" at DFLASH_STANDIN_TOKENS_PER_S (default 500) tokens per second: a reply
of N tokens is sent after N / speed seconds, and /generate's meta_info.e2e_latency is that simulated
time (deterministic, so that lab performance gates compare like with like).

Known speeds (tune.yml's Molecule scenario): DFLASH_STANDIN_SPEEDS=<JSON> gives the streamed /generate a
speed and an acceptance per configuration, looked up from the server's own flags (the most specific key
wins): {"NONE": {"tok_s": 300}, "DFLASH": {"tok_s": 450, "accept": 3}, "DDTREE/15/8": {"tok_s": 900,
"accept": 5}, "DDTREE/7/4@flashinfer": {...}, "noise": 0.03, "slots": 4}. Keys: ALGO[/budget[/topk[/mode]]]
[@attention-backend]. tok_s: tokens per second of one request while it decodes; accept: mean tokens per
verify step (drafts accepted + the bonus token, binomially spread over the steps); noise: the standard
deviation of a log-normal factor on each request's speed (default 0.03); slots: requests decoded at once
(more wait in a queue, their TTFT grows: the server saturates; default unlimited).

Latency: DFLASH_STANDIN_LATENCY=<seconds> makes every chat / generate request take that long (so a
drain before a restart has requests in flight to wait for).

Multi-node (--nnodes N > 1, --node-rank R, --dist-init-addr HOST:PORT), emulating sglang 0.5.11:
  rank 0 listens on the dist-init port (the rendezvous) and answers /health 503 until every rank
  1..N-1 connected with the same launch arguments (all but the rank and the API's host/port: a rank of
  another release is refused and keeps knocking); ranks > 0 connect to it (retrying), then
  serve only what sglang's health server on those nodes serves (/health, /health_generate, /ping and,
  with --enable-metrics, /metrics; 404 otherwise). A rank that loses its peers exits 1 with an NCCL-like
  error, so one failed rank takes the others down (systemd restarts them). A rank that never meets
  the others gives up after DFLASH_STANDIN_RENDEZVOUS_TIMEOUT seconds (default 600).

The version it plays: the sglang of the tree on its PYTHONPATH (the release's tree of the instance's version:
sglang/_version.py there), else DFLASH_STANDIN_SGLANG_VERSION, else 0.5.11; /get_server_info's "version" says it,
and so do the banner, the flags it accepts and the meta_info names.

Flags: the accepted flags are read from flags/<version>/server-flags.txt next to this file (the lab overlay
installs every version's files/patches/sglang/<version>/server-flags.txt there), else server-flags.txt next to it,
else, in the repository, files/patches/sglang/<version>/server-flags.txt; or from DFLASH_STANDIN_FLAGS_FILE: `--flag dest kind` per line (kind: switch | value | values),
generated by scripts/extract_sglang_flags.py from the patched tree's server_args.py, DDTree flags
included. Without that file any --flag is accepted (a value is taken when one follows) and the log
says so.

API keys: with --api-key / --admin-api-key every endpoint but /health* and /metrics answers 401
{"error": "Unauthorized"} unless the request carries `Authorization: Bearer <key>`, as sglang 0.5.11's
middleware does (srt/utils/auth.py). Like sglang, the start-up ServerArgs line shows the key.
Stdlib only, Python >= 3.11.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

STAND_IN = "dflash-deploy lab stand-in (files/lab/sglang_standin.py): not SGLang, no GPU, canned output"
DEFAULT_SGLANG_VERSION = "0.5.11"
PROG = "sglang serve"  # argparse prog of sglang 0.5.11's prepare_server_args
HERE = os.path.dirname(os.path.abspath(__file__))
FLAGS_FILE_NAME = "server-flags.txt"
# the accepted / proposed draft counts of /generate's meta_info by version (files/patches/sglang/versions.yml
# meta_info_keys, from each version's tokenizer_manager.py; tests/unit/lab/test_standin.py holds them equal)
META_INFO_KEYS = {
    "0.5.11": {"accepted": "spec_accepted_drafts", "proposed": "spec_proposed_drafts", "aliases": {}},
    "0.5.17": {"accepted": "spec_num_correct_drafts", "proposed": "spec_num_proposed_drafts",
               "aliases": {"spec_accepted_drafts": "spec_num_correct_drafts",
                           "spec_proposed_drafts": "spec_num_proposed_drafts"}},
    "0.5.23": {"accepted": "spec_num_correct_drafts", "proposed": "spec_num_proposed_drafts", "aliases": {}},
}
# a wheel's sglang/_version.py (generated at build: "__version__ = version = '0.5.17'")
_VERSION_LINE = re.compile(r"""^__version__\s*=\s*(?:\w+\s*=\s*)*["']([^"']+)["']""", re.MULTILINE)


def played_version(environ=None) -> tuple[str, str]:
    """(the sglang version this stand-in plays, where it comes from): the sglang of the tree on PYTHONPATH (its
    sglang/_version.py), else DFLASH_STANDIN_SGLANG_VERSION, else 0.5.11."""
    environ = os.environ if environ is None else environ
    for entry in (environ.get("PYTHONPATH") or "").split(os.pathsep):
        path = os.path.join(entry, "sglang", "_version.py")
        if entry and os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                m = _VERSION_LINE.search(fh.read())
            if m:
                return m.group(1), path
    if environ.get("DFLASH_STANDIN_SGLANG_VERSION"):
        return environ["DFLASH_STANDIN_SGLANG_VERSION"], "DFLASH_STANDIN_SGLANG_VERSION"
    return DEFAULT_SGLANG_VERSION, "the stand-in's default"


SGLANG_VERSION, SGLANG_VERSION_SOURCE = played_version()

BANNER = (
    "DFLASH LAB STAND-IN: this is NOT SGLang. {path} emulates `python -m sglang.launch_server` "
    "(sglang {version}) without a GPU; outputs are canned and deterministic."
)

FAULTS = ("", "crash", "slow", "hang", "wrong", "wrong_answer", "degenerate", "slower", "low_accept", "token_soup",
          "mojibake", "sentence_loop", "regurgitation")
# faults a running server can switch to (POST /lab/fault): the ones each request reads as it is answered
RUNTIME_FAULTS = ("", "low_accept", "degenerate", "wrong_answer", "token_soup", "mojibake", "sentence_loop",
                  "regurgitation")
# sglang 0.5.11's default buckets (srt/observability/metrics_collector.py, TokenizerMetricsCollector)
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
               0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
KV_CAPACITY = 262144  # max_total_num_tokens the stand-in reports
SPEC_CHOICES = ("DFLASH", "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DDTREE")
EOS_TOKEN_ID = 151645  # Qwen's <|im_end|>; what matched_stop shows for a natural stop

# aliases of 0.5.11 (several option strings for one dest) -> the ServerArgs field name
ALIASES = {
    "model": "model_path",
    "tensor_parallel_size": "tp_size",
    "pipeline_parallel_size": "pp_size",
    "data_parallel_size": "dp_size",
    "expert_parallel_size": "ep_size",
    "ep": "ep_size",
    "attention_context_parallel_size": "attn_cp_size",
    "moe_data_parallel_size": "moe_dp_size",
    "nccl_init_addr": "dist_init_addr",
    "speculative_draft_model": "speculative_draft_model_path",
}
# defaults of the ServerArgs fields the stand-in uses (values of sglang 0.5.11)
DEFAULTS = {
    "model_path": None,
    "tokenizer_path": None,
    "served_model_name": None,
    "host": "127.0.0.1",
    "port": 30000,
    "tp_size": 1,
    "pp_size": 1,
    "dp_size": 1,
    "ep_size": 1,
    "context_length": None,
    "mem_fraction_static": None,
    "max_running_requests": None,
    "cuda_graph_max_bs": None,
    "attention_backend": None,
    "sampling_backend": None,
    "grammar_backend": None,
    "reasoning_parser": None,
    "skip_tokenizer_init": False,
    "enable_metrics": False,
    "nnodes": 1,
    "node_rank": 0,
    "dist_init_addr": None,
    "speculative_algorithm": None,
    "speculative_draft_model_path": None,
    "speculative_num_steps": None,
    "speculative_eagle_topk": None,
    "speculative_num_draft_tokens": None,
    "speculative_dflash_block_size": None,
    "weight_version": "default",
    "random_seed": None,
    "load_format": "auto",
    "dtype": "auto",
}


class UsageError(Exception):
    """An argparse-style error: printed with the usage line, exit status 2."""


def log(msg: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(f"[{stamp}] {msg}\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------- flags


def load_known_flags(path: str | None = None) -> tuple[dict[str, tuple] | None, str]:
    """The accepted flags -> (dest, kind) from the flags file, or None (permissive) without one.

    Lines are `--flag [dest kind]` (kind: switch | value | values); `#` lines are comments.
    DFLASH_STANDIN_FLAGS_FILE, when set, is the only file looked at; else the played version's
    (flags/<version>/server-flags.txt next to this file), server-flags.txt next to it, the repository's."""
    env = os.environ.get("DFLASH_STANDIN_FLAGS_FILE")
    repo = os.path.join(HERE, "..", "patches", "sglang", SGLANG_VERSION, FLAGS_FILE_NAME)
    mine = [os.path.join(HERE, "flags", SGLANG_VERSION, FLAGS_FILE_NAME), os.path.join(HERE, FLAGS_FILE_NAME), repo]
    candidates = [path] if path else ([env] if env else mine)
    for cand in candidates:
        if cand and os.path.isfile(cand):
            flags: dict[str, tuple] = {}
            with open(cand, encoding="utf-8") as fh:
                for ln in fh:
                    parts = ln.split()
                    if parts and parts[0].startswith("--"):
                        dest = parts[1] if len(parts) > 1 else None
                        kind = parts[2] if len(parts) > 2 else None
                        flags[parts[0]] = (dest, kind)
            return flags, cand
    return None, ""


def _is_value(token: str) -> bool:
    return not token.startswith("-") or bool(re.match(r"^-\d", token))


def _typed(raw: str):
    if re.fullmatch(r"-?\d+", raw):
        return int(raw)
    if re.fullmatch(r"-?\d+\.\d*(?:e-?\d+)?|-?\d*\.\d+(?:e-?\d+)?", raw):
        return float(raw)
    if raw in ("True", "true"):
        return True
    if raw in ("False", "false"):
        return False
    return raw


def _dest(flag: str) -> str:
    name = flag.lstrip("-").replace("-", "_")
    return ALIASES.get(name, name)


def parse_args(argv: list[str], known: dict[str, tuple] | None) -> dict:
    """Parse launch_server flags like argparse would; raise UsageError on bad input."""
    args = dict(DEFAULTS)
    unrecognized: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok in ("-h", "--help"):
            raise SystemExit(_help(known))
        if not tok.startswith("--"):
            unrecognized.append(tok)
            continue
        flag, eq, inline = tok.partition("=")
        dest = kind = None
        if known is not None:
            if flag not in known:
                # argparse accepts an unambiguous prefix of a long option
                matches = [k for k in known if k.startswith(flag)]
                if len(matches) > 1:
                    raise UsageError(f"ambiguous option: {flag} could match {', '.join(sorted(matches)[:6])}")
                if not matches:
                    unrecognized.append(tok)
                    while i < len(argv) and _is_value(argv[i]):
                        unrecognized.append(argv[i])
                        i += 1
                    continue
                flag = matches[0]
            dest, kind = known[flag]
        if kind == "switch":
            if eq:
                raise UsageError(f"argument {flag}: ignored explicit argument '{inline}'")
            values = []
        elif kind == "value":
            if eq:
                values = [inline]
            elif i < len(argv) and not argv[i].startswith("--"):
                values = [argv[i]]
                i += 1
            else:
                raise UsageError(f"argument {flag}: expected one argument")
        else:  # "values" (nargs) or unknown kind (permissive): every following non-flag token
            values = [inline] if eq else []
            while not eq and i < len(argv) and _is_value(argv[i]):
                values.append(argv[i])
                i += 1
        dest = ALIASES.get(dest, dest) if dest else _dest(flag)
        if not values:
            if kind is None and dest in ("model_path", "port", "host", "speculative_algorithm",
                                         "served_model_name", "speculative_draft_model_path", "tp_size"):
                raise UsageError(f"argument {flag}: expected one argument")
            args[dest] = not flag.startswith("--no-")  # store_true / BooleanOptionalAction
        elif len(values) == 1 and kind != "values":
            args[dest] = _typed(values[0])
        else:
            args[dest] = [_typed(v) for v in values]
    if unrecognized:
        raise UsageError("unrecognized arguments: " + " ".join(unrecognized))
    algo = args.get("speculative_algorithm")
    if algo is not None and algo not in SPEC_CHOICES:
        choices = ", ".join(f"'{c}'" for c in SPEC_CHOICES)
        raise UsageError(f"argument --speculative-algorithm: invalid choice: '{algo}' (choose from {choices})")
    if not args.get("model_path"):
        raise UsageError("the following arguments are required: --model-path/--model")
    if not isinstance(args.get("port"), int):
        raise UsageError(f"argument --port: invalid int value: '{args.get('port')}'")
    if not args.get("served_model_name"):
        args["served_model_name"] = args["model_path"]
    if not args.get("tokenizer_path"):
        args["tokenizer_path"] = args["model_path"]
    return args


def _usage() -> str:
    return f"usage: {PROG} [-h] --model-path MODEL_PATH [--host HOST] [--port PORT] ..."


def _help(known: dict[str, tuple] | None) -> int:
    print(_usage())
    print("\nLAB STAND-IN for sglang.launch_server; accepted flags:")
    for flag in sorted(known or []):
        print(f"  {flag}")
    return 0


# --------------------------------------------------------------------------- canned model

THINKING = (
    "Here's a thinking process:\n\n1. **Understand User Request:**\n - Function name: fibonacci(n)\n"
    " - Method: Iteration (not recursion)\n - Output: Only code (no explanation)\n\n2. **Plan:** keep two "
    "running values a and b, start from 0 and 1, step n times, return a. Handle n <= 0 by returning 0.\n\n"
    "3. **Check:** fibonacci(0) = 0, fibonacci(1) = 1, fibonacci(10) = 55. Looks right."
)
ANSWER = (
    "```python\ndef fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a\n```"
)
# the wrong_answer fault: a def, a loop, runs, returns 1 for every n
WRONG_ANSWER = (
    "```python\ndef fibonacci(n):\n    a, b = 1, 1\n    for _ in range(n):\n        a, b = b, a * b\n"
    "    return a\n```"
)
DEFAULT_TOKENS_PER_S = 500.0
GENERIC_ANSWER = (
    "This reply comes from the dflash lab stand-in, not from a model. The stand-in answers every prompt "
    "with canned, deterministic text so that smoke tests can check the shape of the response."
)

# broken replies of the output faults (reply generation only; the judge on the controller names them)
SOUP_PIECES = ("ดาร", "价位", " presenter", "しぶ", "האמר", "流行", "пут", "崖", " conseils", ".quantity", "塅",
               "inscription", "odu", "éments", " בדיוק", " soaked", "コミュ", " семь", "סכום", " keine", "人们",
               "/npm", " zombies", "مصطف", ".Full", " поск", "字符串", "仓库", "恋", "┾", " =\",", "นะ", "颃",
               "ktor", " Bugs", "ـــ", "ίδ", "αλ", "(stdout", " Least")
MOJIBAKE_LINE = ("Here\u2019s the \u201citerative\u201d version \u2014 it runs in O(n) time and O(1) memory "
                 "(n \u2265 0) \u2026\n").encode("utf-8").decode("cp1252", errors="replace")
LOOP_SENTENCE = "The function returns the n-th Fibonacci number by iteration. "


def broken_reply(fault: str, prompt: str, answer: str, max_tokens: int | None) -> str | None:
    """The content of an output fault (token_soup, mojibake, sentence_loop, regurgitation), else None."""
    budget = max(8, int(max_tokens if max_tokens is not None else 128))
    if fault == "token_soup":
        rng = random.Random(hashlib.sha256(prompt.encode()).hexdigest())
        return "".join(rng.choice(SOUP_PIECES) for _ in range(budget))
    if fault == "mojibake":
        return MOJIBAKE_LINE + answer
    if fault == "sentence_loop":
        return answer + "\n\n" + LOOP_SENTENCE * budget
    if fault == "regurgitation":
        turn = f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
        return turn * budget
    return None


_TOKEN_RE = re.compile(r"\s+|\w+|[^\w\s]")


def tokens_of(text: str) -> list[str]:
    """A stable stand-in tokenisation: words, punctuation and whitespace runs."""
    return _TOKEN_RE.findall(text)


def token_ids(pieces: list[str]) -> list[int]:
    return [int.from_bytes(hashlib.blake2b(p.encode(), digest_size=4).digest(), "big") % 151000 for p in pieces]


def _vary(pieces: list[str], temperature: float, seed_material: str) -> list[str]:
    """temperature > 0: a deterministic (seeded) variation; temperature 0: unchanged."""
    if temperature <= 0:
        return pieces
    rng = random.Random(hashlib.sha256(f"{seed_material}|{temperature}".encode()).hexdigest())
    out = list(pieces)
    words = [i for i, p in enumerate(out) if p.isalpha() and len(p) > 3]
    for _ in range(max(1, int(len(words) * min(temperature, 2.0) / 4))):
        if len(words) < 2:
            break
        a, b = rng.sample(words, 2)
        out[a], out[b] = out[b], out[a]
    return out


def complete(prompt: str, max_tokens: int | None, temperature: float, seed, reasoning: bool,
             fault: str = "") -> dict:
    """Canned completion: (reasoning, content, completion tokens, finish)."""
    fib = "fibonacci" in prompt.lower()
    think = tokens_of(THINKING) if reasoning else []
    answer = tokens_of((WRONG_ANSWER if fault == "wrong_answer" else ANSWER) if fib else GENERIC_ANSWER)
    if fault == "degenerate":
        think = []
        answer = ["!"] * max(1, int(max_tokens if max_tokens is not None else 128))
    broken = broken_reply(fault, prompt, "".join(answer), max_tokens)
    if broken is not None:
        think, answer = [], tokens_of(broken)
    material = f"{prompt}|{seed}"
    think, answer = _vary(think, temperature, material + "|t"), _vary(answer, temperature, material + "|a")
    limit = max_tokens if max_tokens is not None else len(think) + len(answer)
    limit = max(0, int(limit))
    t_part = think[:limit]
    a_part = answer[: max(0, limit - len(think))]
    finished = len(t_part) + len(a_part) == len(think) + len(answer)
    return {
        "reasoning": "".join(t_part) if reasoning else None,
        "content": "".join(a_part) if a_part else None,
        "reasoning_tokens": len(t_part),
        "completion_tokens": len(t_part) + len(a_part),
        "finish_reason": "stop" if finished else "length",
        "pieces": t_part + a_part,
    }


def spec_steps(draft: int, completion_tokens: int, seed_material: str, low_accept: bool = False,
               accept: float | None = None) -> list[int]:
    """Accepted drafts of each verify step (deterministic); each step also yields the bonus token.
    ``low_accept`` (fault mode low_accept): fewer drafts accepted per step. ``accept`` (DFLASH_STANDIN_SPEEDS):
    the mean tokens per step, drafts drawn binomially over the draft's positions."""
    rng = random.Random(hashlib.sha256(seed_material.encode()).hexdigest())
    choices = (0, 1, 1, 2) if low_accept else (1, 2, 2, 3, 3, 4, 5, 6)
    p = None if accept is None else min(1.0, max(0.0, (float(accept) - 1.0) / max(1, draft - 1)))
    remaining, steps = completion_tokens, []
    while remaining > 0:
        pick = rng.choice(choices) if p is None else sum(rng.random() < p for _ in range(draft - 1))
        drafts = max(0, min(pick, draft - 1, remaining - 1))
        steps.append(drafts)
        remaining -= drafts + 1
    return steps


def spec_draft(args: dict) -> int:
    """Tokens a verify step proposes: the draft block (DDTREE: the tree budget plus the root)."""
    algo = args.get("speculative_algorithm")
    draft = (args.get("speculative_num_draft_tokens") or args.get("speculative_dflash_block_size")
             or args.get("speculative_ddtree_budget") or 16)
    try:
        draft = max(2, int(draft))
    except (TypeError, ValueError):
        draft = 16
    if algo == "DDTREE":
        draft = min(draft + 1, 65)  # the tree budget plus the root
    return draft


def spec_meta(args: dict, completion_tokens: int, seed_material: str, low_accept: bool = False,
              accept: float | None = None, version: str | None = None) -> dict:
    """Speculative-decoding meta_info the way the played sglang version reports it (deterministic)."""
    keys = META_INFO_KEYS.get(version or SGLANG_VERSION) or META_INFO_KEYS[DEFAULT_SGLANG_VERSION]
    draft = spec_draft(args)
    steps = spec_steps(draft, completion_tokens, seed_material, low_accept, accept)
    verify_ct, accepted, hist = len(steps), sum(steps), [0] * draft
    for drafts in steps:
        hist[drafts] += 1
    proposed = verify_ct * (draft - 1)
    if verify_ct == 0:
        return {}
    out = {
        "spec_accept_rate": accepted / proposed if proposed else 0.0,
        "spec_accept_length": completion_tokens / verify_ct,
        keys["accepted"]: accepted,
        keys["proposed"]: proposed,
        "spec_verify_ct": verify_ct,
        "spec_accept_histogram": hist,
    }
    for old, new in keys["aliases"].items():
        out[old] = out[new]
    return out


def speed_profile(args: dict, text: str | None) -> dict | None:
    """DFLASH_STANDIN_SPEEDS (JSON) -> {tok_s, accept, noise, slots} for this server's flags, or None."""
    if not text:
        return None
    table = json.loads(text)
    algo = str(args.get("speculative_algorithm") or "NONE").upper()
    parts = [algo]
    if algo == "DDTREE":
        parts += [str(args.get("speculative_ddtree_budget") or 15), str(args.get("speculative_ddtree_topk") or 8),
                  str(args.get("speculative_ddtree_mode") or "tree")]
    backend = args.get("attention_backend")
    keys = []
    for n in range(len(parts), 0, -1):
        base = "/".join(parts[:n])
        keys += ([f"{base}@{backend}"] if backend else []) + [base]
    entry = next((table[k] for k in keys if isinstance(table.get(k), dict)), None)
    if entry is None:
        return None
    return {"tok_s": max(1e-3, float(entry.get("tok_s", DEFAULT_TOKENS_PER_S))),
            "accept": None if entry.get("accept") is None else float(entry["accept"]),
            "noise": float(entry.get("noise", table.get("noise", 0.03))),
            "slots": entry.get("slots", table.get("slots"))}


# --------------------------------------------------------------------------- server state


class State:
    def __init__(self, args: dict, fault: str, start_delay: float, flags_source: str):
        self.args = args
        self.fault = fault
        self.started = time.monotonic()
        self.start_delay = start_delay
        self.flags_source = flags_source
        self.lock = threading.Lock()
        self.counter = 0
        self.inflight = 0
        self.queued = 0  # of the inflight: waiting for a decode slot (DFLASH_STANDIN_SPEEDS' slots)
        self.ready = threading.Event()  # multi-node: every rank joined (set at once for one node)
        if int(args.get("nnodes") or 1) <= 1:
            self.ready.set()
        self.latency = _env_float("DFLASH_STANDIN_LATENCY", 0.0)
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.num_requests_total = 0
        self.last_accept_length = 0.0
        self.last_accept_rate = 0.0
        self.used_tokens = 0  # tokens of the requests being decoded (the KV cache they hold)
        self.histograms = {name: Histogram(buckets) for name, buckets in (
            ("sglang:time_to_first_token_seconds", TTFT_BUCKETS),
            ("sglang:inter_token_latency_seconds", ITL_BUCKETS),
            ("sglang:e2e_request_latency_seconds", E2E_BUCKETS))}
        self.context_len = int(args.get("context_length") or 32768)
        try:
            speed = float(os.environ.get("DFLASH_STANDIN_TOKENS_PER_S") or DEFAULT_TOKENS_PER_S)
        except ValueError:
            speed = DEFAULT_TOKENS_PER_S
        factor = 1.0  # fault mode slower: every reply (plain and streamed) slows down by this factor
        if fault == "slower":
            try:
                factor = min(1.0, max(0.01, float(os.environ.get("DFLASH_STANDIN_SLOWER_FACTOR") or 0.6)))
            except ValueError:
                factor = 0.6
        self.tokens_per_s = max(1.0, speed * factor)
        try:
            self.speed = speed_profile(args, os.environ.get("DFLASH_STANDIN_SPEEDS"))
        except (ValueError, TypeError, AttributeError) as exc:
            raise SystemExit(f"lab stand-in: DFLASH_STANDIN_SPEEDS is not a JSON object of speeds: {exc}") from exc
        slots = (self.speed or {}).get("slots")
        self.slots = threading.BoundedSemaphore(int(slots)) if slots else None
        self.prefixes: list[list[str]] = []  # recent prompts: the stand-in's prefix cache (cached_tokens)
        try:
            self.step_delay = max(0.0, float(os.environ.get("DFLASH_STANDIN_STEP_DELAY") or 0.002)) / factor
        except ValueError:
            self.step_delay = 0.002 / factor
        # sglang's /health queues a one-token probe and sleeps 1 s before it looks for the answer: a
        # healthy real server never answers /health in under a second, and neither does this one
        try:
            self.health_delay = max(0.0, float(os.environ.get("DFLASH_STANDIN_HEALTH_DELAY") or 1.0))
        except ValueError:
            self.health_delay = 1.0

    def decode_seconds(self, tokens: int) -> float:
        """The simulated decode time of ``tokens`` tokens (slept before the reply is sent)."""
        return round(max(0, tokens) / self.tokens_per_s, 6)

    def cached(self, pieces: list[str]) -> int:
        """Tokens of this prompt's longest prefix shared with a recent prompt (what a radix cache reuses)."""
        with self.lock:
            best = 0
            for old in self.prefixes:
                n = 0
                for a, b in zip(old, pieces):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            self.prefixes = (self.prefixes + [list(pieces)])[-64:]
        return min(best, max(0, len(pieces) - 1))

    def healthy(self) -> bool:
        if self.fault == "hang" or not self.ready.is_set():
            return False
        return time.monotonic() - self.started >= self.start_delay

    def secondary(self) -> bool:
        """A node rank > 0 of a multi-node instance: health server only (sglang 0.5.11)."""
        return int(self.args.get("nnodes") or 1) > 1 and int(self.args.get("node_rank") or 0) > 0

    def spec_enabled(self) -> bool:
        return self.args.get("speculative_algorithm") is not None and self.fault != "wrong"

    def next_id(self, prompt: str) -> str:
        with self.lock:
            self.counter += 1
            n = self.counter
        return hashlib.sha256(f"{n}|{prompt}".encode()).hexdigest()[:32]

    def decode(self, prompt_tokens: int, completion_tokens: int) -> None:
        """Sleep the simulated decode time, holding the request's tokens in the 'KV cache' meanwhile."""
        with self.lock:
            self.used_tokens += prompt_tokens + completion_tokens
        try:
            time.sleep(self.decode_seconds(completion_tokens))
        finally:
            with self.lock:
                self.used_tokens -= prompt_tokens + completion_tokens

    def account(self, prompt_tokens: int, completion_tokens: int, spec: dict) -> None:
        """A finished request: counters, the last accept length, and its timings as sglang observes them
        (first token after the latency and one token's decode, then one token every 1 / tokens_per_s)."""
        token = 1.0 / self.tokens_per_s
        with self.lock:
            self.num_requests_total += 1
            self.prompt_tokens_total += prompt_tokens
            self.generation_tokens_total += completion_tokens
            if spec:
                self.last_accept_length = spec["spec_accept_length"]
                self.last_accept_rate = spec["spec_accept_rate"]
            if completion_tokens > 0:
                self.histograms["sglang:time_to_first_token_seconds"].observe(self.latency + token)
                self.histograms["sglang:e2e_request_latency_seconds"].observe(
                    self.latency + self.decode_seconds(completion_tokens))
                if completion_tokens > 1:
                    self.histograms["sglang:inter_token_latency_seconds"].observe(token, completion_tokens - 1)

    def set_fault(self, fault: str) -> None:
        with self.lock:
            self.fault = fault

    def server_info(self) -> dict:
        info = {k: v for k, v in self.args.items() if k not in ("api_key", "admin_api_key")}
        if self.fault == "wrong":
            info["speculative_algorithm"] = None
        info.update({
            # what a server that is not sglang says about itself (the toolkit records it and stamps the figures)
            "stand_in": STAND_IN,
            "lab_standin_fault": self.fault or None,
            "lab_standin_flags_file": self.flags_source or None,
            "lab_standin_tokens_per_s": self.tokens_per_s,
            # the venv it runs in, links resolved (an instance of another sglang version than its host's runs its version's)
            "lab_standin_prefix": os.path.realpath(sys.prefix),
            "lab_standin_version_source": SGLANG_VERSION_SOURCE,
            "max_total_num_tokens": 262144,
            "max_req_input_len": self.context_len - 1,
            "internal_states": [{
                "attention_backend": self.args.get("attention_backend") or "triton",
                "avg_spec_accept_length": self.last_accept_length if self.spec_enabled() else None,
                "last_gen_throughput": 0.0,
                "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": 262144, "graph": 0.0},
            }],
            "version": SGLANG_VERSION,
        })
        return info

    def metrics(self) -> str:
        """sglang 0.5.11's /metrics: scheduler gauges labelled with the ranks, tokenizer counters and
        histograms with model and engine only, the CPU counter with its component only."""
        a = self.args
        model = f'engine_type="unified",model_name="{a["served_model_name"]}"'
        labels = model + ',moe_ep_rank="0",pp_rank="0",tp_rank="0"'
        with self.lock:
            running, queued, used = self.inflight - self.queued, self.queued, self.used_tokens
        rows = [
            ("sglang:num_running_reqs", "gauge", "The number of running requests.", running),
            ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", queued),
            ("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", running * self.tokens_per_s),
            ("sglang:token_usage", "gauge", "The token usage.", round(min(1.0, used / KV_CAPACITY), 2)),
            ("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", 0.0),
            ("sglang:spec_accept_length", "gauge",
             "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
             self.last_accept_length if self.spec_enabled() else 0.0),
            ("sglang:spec_accept_rate", "gauge",
             "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
             self.last_accept_rate if self.spec_enabled() else 0.0),
        ]
        counters = [
            ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", self.prompt_tokens_total),
            ("sglang:generation_tokens_total", "Number of generation tokens processed.",
             self.generation_tokens_total),
            ("sglang:num_requests_total", "Number of requests processed.", self.num_requests_total),
        ]
        out = []
        for name, kind, doc, value in rows:
            out += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {float(value)}"]
        for name, doc, value in counters:
            out += [f"# HELP {name} {doc}", f"# TYPE {name} counter", f"{name}{{{model}}} {float(value)}"]
        with self.lock:
            for name, hist in self.histograms.items():
                out += [f"# HELP {name} Histogram of {name.split(':')[1]}.", f"# TYPE {name} histogram"]
                out += hist.lines(name, model)
        out += ["# HELP sglang:process_cpu_seconds_total Total CPU time consumed by this process (user + system)",
                "# TYPE sglang:process_cpu_seconds_total counter",
                f'sglang:process_cpu_seconds_total{{component="tokenizer"}} {time.process_time()}']
        return "\n".join(out) + "\n"


class Histogram:
    """A Prometheus histogram (cumulative buckets, sum, count); the caller holds the state's lock."""

    def __init__(self, buckets):
        self.bounds = tuple(float(b) for b in buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: +Inf
        self.sum = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        i = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[i] += times
        self.sum += value * times

    def lines(self, name: str, labels: str) -> list[str]:
        out, total = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            total += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {float(total)}')
        return out + [f"{name}_sum{{{labels}}} {self.sum}", f"{name}_count{{{labels}}} {float(total)}"]


# --------------------------------------------------------------------------- HTTP


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    state: State  # set on the class by serve()

    def log_message(self, fmt, *args):  # uvicorn-like access log
        if self.state.fault == "hang":  # a hung sglang has no HTTP server yet: its log stays silent
            return
        log(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" '
            f"{args[1] if len(args) > 1 else ''}")

    # ---- helpers
    def _send(self, status: int, body: bytes = b"", ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, status: int, message: str, err_type: str = "BadRequestError") -> None:
        self._json(status, {"object": "error", "message": message, "type": err_type, "param": None,
                            "code": status})

    def _body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return None

    def _authorized(self, path: str) -> bool:
        """sglang's API-key middleware: /health* and /metrics are open, everything else needs the key."""
        keys = [k for k in (self.state.args.get("api_key"), self.state.args.get("admin_api_key")) if k]
        if not keys or path.startswith(("/health", "/metrics")):
            return True
        scheme, _, token = (self.headers.get("authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and token in keys:
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    def _ready(self) -> bool:
        if not self.state.healthy():
            self._send(HTTPStatus.SERVICE_UNAVAILABLE)
            return False
        return True

    # ---- routes
    def do_GET(self):
        path = urlparse(self.path).path
        st = self.state
        if not self._authorized(path):
            return
        if path in ("/health", "/health_generate", "/ping"):
            if path != "/ping" and st.healthy():
                time.sleep(st.health_delay)  # sglang's probe: >= 1 s before a healthy answer
            self._send(200 if st.healthy() else 503)
        elif path == "/metrics" and not st.args.get("enable_metrics"):
            self._json(404, {"detail": "Not Found"})  # sglang mounts /metrics only with --enable-metrics
        elif st.secondary() and path != "/metrics":
            self._json(404, {"detail": "Not Found"})  # node rank > 0: sglang's health server only
        elif not self._ready():
            return
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [self._card(st.args["served_model_name"])]})
        elif path.startswith("/v1/models/"):
            name = unquote(path[len("/v1/models/"):])
            if name != st.args["served_model_name"]:
                self._json(404, {"error": {"message": f"The model '{name}' does not exist",
                                           "type": "invalid_request_error", "param": "model",
                                           "code": "model_not_found"}})
            else:
                self._json(200, self._card(name))
        elif path in ("/get_server_info", "/server_info"):
            self._json(200, st.server_info())
        elif path in ("/get_model_info", "/model_info"):
            self._json(200, {"model_path": st.args["model_path"], "tokenizer_path": st.args["tokenizer_path"],
                             "is_generation": True, "preferred_sampling_params": None,
                             "weight_version": st.args.get("weight_version", "default"),
                             "has_image_understanding": False, "has_audio_understanding": False,
                             "model_type": None, "architectures": None, "stand_in": STAND_IN})
        elif path == "/metrics":
            self._send(200, st.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self):
        path = urlparse(self.path).path
        if not self._authorized(path):
            return
        if self.state.secondary():
            self._json(404, {"detail": "Not Found"})
            return
        if path == "/lab/fault":
            self._lab_fault(self._body())
            return
        if not self._ready():
            return
        body = self._body()
        if not isinstance(body, dict) and not (path == "/generate" and isinstance(body, list)):
            self._error(400, "request body must be a JSON object")
            return
        st = self.state
        with st.lock:
            st.inflight += 1
        try:
            if st.latency > 0 and path in ("/v1/chat/completions", "/generate"):
                time.sleep(st.latency)
            if path == "/v1/chat/completions":
                self._chat(body)
            elif path == "/generate":
                self._generate(body)
            else:
                self._json(404, {"detail": "Not Found"})
        finally:
            with st.lock:
                st.inflight -= 1

    def _lab_fault(self, body) -> None:
        """Stand-in only: switch the running server's fault mode (the alert rules' lab check)."""
        fault = body.get("fault") if isinstance(body, dict) else None
        if not isinstance(fault, str) or fault.strip().lower() not in RUNTIME_FAULTS:
            self._error(400, f"fault must be one of {', '.join(repr(f) for f in RUNTIME_FAULTS)}; the others "
                             "are set at start (DFLASH_STANDIN_FAULT)")
            return
        fault = fault.strip().lower()
        self.state.set_fault(fault)
        log(f"lab stand-in: fault switched to {fault!r} by POST /lab/fault")
        self._json(200, {"fault": fault, "lab_standin": True})

    def _card(self, name: str) -> dict:
        return {"id": name, "object": "model", "created": int(self.state.started), "owned_by": "sglang",
                "root": name, "parent": None, "max_model_len": self.state.context_len}

    def _chat(self, body: dict) -> None:
        st = self.state
        if st.args.get("skip_tokenizer_init"):
            self._error(400, "chat completions need a tokenizer (server started with --skip-tokenizer-init)")
            return
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self._error(400, "messages must be a non-empty list")
            return
        prompt = "\n".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        temperature = float(body.get("temperature") if body.get("temperature") is not None else 1.0)
        res = complete(prompt, max_tokens, temperature, body.get("seed"),
                       reasoning=bool(st.args.get("reasoning_parser")), fault=st.fault)
        if st.fault == "wrong":
            res.update(content="", reasoning=None)
        prompt_tokens = len(tokens_of(prompt)) + 8 * len(messages)
        st.decode(prompt_tokens, res["completion_tokens"])
        rid = st.next_id(prompt)
        # sglang's scheduler counts the chat's verify steps in its accept length too (not in the reply)
        spec = (spec_meta(st.args, res["completion_tokens"], f"{prompt}|{res['completion_tokens']}",
                          low_accept=st.fault == "low_accept")
                if st.spec_enabled() and res["completion_tokens"] > 0 else {})
        st.account(prompt_tokens, res["completion_tokens"], spec)
        model = body.get("model") or st.args["served_model_name"]
        if body.get("stream"):
            self._stream_chat(rid, model, res)
            return
        self._json(200, {
            "id": rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": res["content"],
                            "reasoning_content": res["reasoning"], "tool_calls": None},
                "logprobs": None,
                "finish_reason": res["finish_reason"],
                "matched_stop": EOS_TOKEN_ID if res["finish_reason"] == "stop" else None,
            }],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + res["completion_tokens"],
                      "completion_tokens": res["completion_tokens"], "prompt_tokens_details": None,
                      "reasoning_tokens": res["reasoning_tokens"]},
            "metadata": {"weight_version": st.args.get("weight_version", "default")},
        })

    def _stream_chat(self, rid: str, model: str, res: dict) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        n_think = res["reasoning_tokens"]
        for i, piece in enumerate(res["pieces"]):
            key = "reasoning_content" if i < n_think else "content"
            chunk = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                     "choices": [{"index": 0, "delta": {key: piece}, "logprobs": None, "finish_reason": None}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        last = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": res["finish_reason"]}]}
        self.wfile.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        self.close_connection = True

    def _generate(self, body) -> None:
        if isinstance(body, list):  # batch form
            outs = [self._generate_one(b) for b in body]
            if any(isinstance(o, str) for o in outs):
                self._error(400, next(o for o in outs if isinstance(o, str)))
            else:
                self._json(200, outs)
            return
        out = self._generate_one(body)
        if isinstance(out, str):
            self._error(400, out)
        elif body.get("stream"):
            self._stream_generate(out, body)
        else:
            self._json(200, out)

    def _stream_generate(self, out: dict, body: dict) -> None:
        """SSE like sglang's /generate stream: cumulative text and completion_tokens per chunk, the spec
        fields on the last one. One chunk per verify step (per token without speculation), paced by
        DFLASH_STANDIN_STEP_DELAY: stand-in timings for the benchmark's plumbing, not a model's."""
        st = self.state
        meta, pieces = out["meta_info"], tokens_of(out["text"]) or [""] * len(out["output_ids"])
        total = meta["completion_tokens"]
        draft = spec_draft(st.args) if "spec_verify_ct" in meta else 1
        low = st.fault == "low_accept"
        accept = (st.speed or {}).get("accept")
        steps = (spec_steps(draft, total, meta.pop("_material"), low, accept) if "spec_verify_ct" in meta
                 else [0] * total)
        meta.pop("_material", None)
        delay = st.step_delay * (1 + draft / 32.0)
        per_token = None
        if st.speed:  # DFLASH_STANDIN_SPEEDS: this request's speed, log-normal noise around the profile's
            per_token = random.lognormvariate(0.0, st.speed["noise"]) / st.speed["tok_s"]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        if st.slots:
            with st.lock:
                st.queued += 1
            st.slots.acquire()  # a full batch: the request waits, its first token comes later
            with st.lock:
                st.queued -= 1
        try:
            self._stream_steps(out, meta, pieces, total, steps, delay, per_token)
        finally:
            if st.slots:
                st.slots.release()
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def _stream_steps(self, out, meta, pieces, total, steps, delay, per_token) -> None:
        done = 0
        for i, drafts in enumerate(steps):
            time.sleep(delay if per_token is None else per_token * (drafts + 1))
            done = min(total, done + drafts + 1)
            last = i == len(steps) - 1
            chunk_meta = dict(meta) if last else {k: v for k, v in meta.items() if not k.startswith("spec_")}
            chunk_meta.update(completion_tokens=done, lab_standin=True)
            if not last:
                chunk_meta["finish_reason"] = None
            text = "".join(pieces[:done]) if len(pieces) >= total else out["text"]
            chunk = {"text": text, "output_ids": out["output_ids"][:done], "meta_info": chunk_meta}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

    def _generate_one(self, body: dict):
        st = self.state
        if not isinstance(body, dict):
            return "each request must be a JSON object"
        text, ids = body.get("text"), body.get("input_ids")
        if text is None and ids is None:
            return "Either text or input_ids should be provided."
        if text is not None and st.args.get("skip_tokenizer_init"):
            return "text input needs a tokenizer (server started with --skip-tokenizer-init); send input_ids"
        sp = body.get("sampling_params") or {}
        prompt = text if text is not None else " ".join(str(i) for i in ids)
        temperature = float(sp.get("temperature") if sp.get("temperature") is not None else 1.0)
        max_new = sp.get("max_new_tokens", 128)
        res = complete(prompt, max_new, temperature, sp.get("seed", body.get("rid")), reasoning=False,
                       fault=st.fault)
        if res["completion_tokens"] < (max_new or 0):
            # keep generating canned text until max_new_tokens, like a model without EOS would
            filler = tokens_of(" " + GENERIC_ANSWER) * (1 + int(max_new) // 20)
            extra = filler[: int(max_new) - res["completion_tokens"]]
            res["pieces"] += extra
            res["content"] = (res["content"] or "") + "".join(extra)
            res["completion_tokens"] = len(res["pieces"])
            res["finish_reason"] = "length"
        completion = res["completion_tokens"]
        prompt_tokens = len(ids) if ids is not None else len(tokens_of(text))
        rid = st.next_id(prompt)
        finish = ({"type": "length", "length": completion} if res["finish_reason"] == "length"
                  else {"type": "stop", "matched": EOS_TOKEN_ID})
        meta = {"id": rid, "finish_reason": finish, "prompt_tokens": prompt_tokens,
                "weight_version": st.args.get("weight_version", "default"), "total_retractions": 0,
                "reasoning_tokens": 0, "completion_tokens": completion,
                "cached_tokens": st.cached(tokens_of(text) if ids is None else [str(i) for i in ids]),
                "e2e_latency": st.decode_seconds(completion)}
        if not body.get("stream"):  # a stream is paced per verify step instead
            st.decode(prompt_tokens, completion)
        spec = {}
        if st.spec_enabled() and completion > 0:
            spec = spec_meta(st.args, completion, f"{prompt}|{completion}", low_accept=st.fault == "low_accept",
                             accept=(st.speed or {}).get("accept"))
            meta.update(spec)
            if body.get("stream"):
                meta["_material"] = f"{prompt}|{completion}"  # the stream's verify steps (taken out there)
        st.account(prompt_tokens, completion, spec)
        return {"text": "" if st.args.get("skip_tokenizer_init") else (res["content"] or ""),
                "output_ids": token_ids(res["pieces"]), "meta_info": meta}


# --------------------------------------------------------------------------- main


def fault_log_text(spec: str) -> str:
    """DFLASH_STANDIN_FAULT_LOG: a file path, or a cause name -> faults/<cause>.log next to this file."""
    if not spec:
        return "lab stand-in: injected crash (no DFLASH_STANDIN_FAULT_LOG given)\n"
    path = spec if os.path.sep in spec or spec.endswith(".log") else os.path.join(HERE, "faults", spec + ".log")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError as exc:
        return f"lab stand-in: injected crash; fault log {path} unreadable: {exc}\n"


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


def _die(msg: str) -> None:
    """A rank that cannot go on: the error line, then exit 1 from any thread (as a crashed scheduler)."""
    log(msg)
    sys.stderr.flush()
    os._exit(1)


def _split_addr(addr: str) -> tuple[str, int]:
    host, _, port = str(addr).rpartition(":")
    return host.strip("[]"), int(port)


def _watch(sock, what: str) -> None:
    """Exit 1 once the peer closes the connection (NCCL would abort the communicator)."""
    try:
        while sock.recv(64):
            pass
    except OSError:
        pass
    _die(f"[rank] NCCL error: remote process exited or there was a network error ({what}); "
         "ncclRemoteError: the other node of this multi-node instance is gone (lab stand-in)")


def rendezvous(args: dict, state: State) -> None:
    """Multi-node start-up (see the module doc): rank 0 gathers ranks 1..N-1 on the dist-init port."""
    import socket

    nnodes, rank = int(args.get("nnodes") or 1), int(args.get("node_rank") or 0)
    addr = args.get("dist_init_addr")
    if not addr:
        _die("ValueError: --dist-init-addr is required with --nnodes > 1 (lab stand-in)")
    host, port = _split_addr(addr)
    timeout = _env_float("DFLASH_STANDIN_RENDEZVOUS_TIMEOUT", 600.0)
    # what every rank must share: all launch arguments but the rank and where this node's API listens
    same = {k: v for k, v in sorted(args.items()) if k not in ("node_rank", "host", "port")}
    digest = hashlib.sha256(json.dumps(same, sort_keys=True, default=str).encode()).hexdigest()[:16]
    me = {"rank": rank, "nnodes": nnodes, "tp_size": args.get("tp_size"), "model_path": args.get("model_path"),
          "args": digest}
    log(f"lab stand-in: multi-node rank {rank} of {nnodes}, rendezvous {addr}")
    if rank == 0:
        try:
            srv = socket.create_server(("", port), reuse_port=False)
        except OSError as exc:
            _die(f"RuntimeError: The server socket has failed to listen on any local network address. "
                 f"port: {port}, useIpv6: 0, code: -98, name: EADDRINUSE, message: {exc} (lab stand-in)")
        srv.settimeout(1.0)
        peers: dict[int, socket.socket] = {}
        end = time.monotonic() + timeout
        while len(peers) < nnodes - 1:
            if time.monotonic() > end:
                _die(f"torch.distributed.DistStoreError: Timed out after {timeout:g} seconds waiting for clients. "
                     f"{len(peers) + 1}/{nnodes} clients joined (lab stand-in)")
            try:
                conn, peer = srv.accept()
            except TimeoutError:
                continue
            conn.settimeout(10.0)
            try:
                hello = json.loads(conn.makefile().readline() or "{}")
            except (OSError, ValueError):
                conn.close()
                continue
            r = hello.get("rank")
            why = None
            if hello.get("nnodes") != nnodes:
                why = f"nnodes {hello.get('nnodes')} on rank {r} but {nnodes} on rank 0"
            elif not isinstance(r, int) or not 0 < r < nnodes:
                why = f"node rank {r!r} is not in 1..{nnodes - 1}"
            elif r in peers:
                why = f"node rank {r} joined twice ({peer[0]})"
            elif hello.get("tp_size") != me["tp_size"] or hello.get("model_path") != me["model_path"]:
                why = f"rank {r} has tp_size {hello.get('tp_size')} / model {hello.get('model_path')}, rank 0 " \
                      f"{me['tp_size']} / {me['model_path']}"
            elif hello.get("args") != digest:
                why = f"rank {r} was started with other arguments (another release?)"
            if why:
                # refused, not fatal here: a rank of another release may knock while this one starts
                conn.sendall((json.dumps({"error": why}) + "\n").encode())
                conn.close()
                log(f"lab stand-in: refused a peer from {peer[0]}: {why}")
                continue
            peers[r] = conn
            log(f"lab stand-in: rank {r} joined from {peer[0]} ({len(peers) + 1}/{nnodes})")
        for r, conn in peers.items():
            conn.settimeout(None)
            conn.sendall(b'{"ok": true}\n')
            threading.Thread(target=_watch, args=(conn, f"rank {r}"), daemon=True).start()
        log(f"lab stand-in: all {nnodes} ranks joined; serving")
        state.ready.set()
        return
    end = time.monotonic() + timeout
    refused = None
    while True:
        # until a rank 0 of the same arguments takes this rank (one of another release is refused: try again)
        try:
            conn = socket.create_connection((host, port), timeout=2.0)
            conn.sendall((json.dumps(me) + "\n").encode())
            conn.settimeout(None)
            answer = json.loads(conn.makefile().readline() or "{}")
        except (OSError, ValueError):
            answer = None
        if answer and answer.get("ok"):
            break
        if answer:
            refused = answer.get("error") or "connection closed"
            log(f"lab stand-in: rank 0 at {addr} refused this rank: {refused}; trying again")
            conn.close()
        if time.monotonic() > end:
            if refused:
                _die(f"RuntimeError: multi-node rendezvous refused by rank 0: {refused} (lab stand-in)")
            _die(f"torch.distributed.DistNetworkError: failed to connect to {addr} within {timeout:g} s "
                 "(lab stand-in)")
        time.sleep(0.5)
    log(f"lab stand-in: rank {rank} joined rank 0 at {addr}; health server only")
    state.ready.set()
    threading.Thread(target=_watch, args=(conn, "rank 0"), daemon=True).start()


def serve(args: dict, state: State) -> int:
    Handler.state = state
    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.daemon_threads = True
    try:
        httpd = ThreadingHTTPServer((args["host"], int(args["port"])), Handler)
    except OSError as exc:
        log(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"('{args['host']}', {args['port']}): {exc.strerror.lower() if exc.strerror else exc}")
        return 1

    def _stop(signum, _frame):
        log(f"lab stand-in: received signal {signum}, shutting down")
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if int(args.get("nnodes") or 1) > 1:
        threading.Thread(target=rendezvous, args=(args, state), daemon=True).start()
    if state.fault == "hang":
        # a start-up that stops in a stage, as a hung sglang's log does (default: in the NCCL set-up)
        sys.stderr.write(fault_log_text(os.environ.get("DFLASH_STANDIN_HANG_LOG", "").strip() or "startup_hang"))
        sys.stderr.flush()
        log("lab stand-in: fault 'hang': listening, /health will never answer 200")
    else:
        log(f"INFO:     Uvicorn running on http://{args['host']}:{args['port']} (Press CTRL+C to quit)")
        if state.start_delay > 0:
            log(f"lab stand-in: fault 'slow': /health answers 503 for {state.start_delay:g} s")

        def _ready_later():  # like sglang: "fired up" once it serves (every rank joined, the delay over)
            state.ready.wait()
            time.sleep(max(0.0, state.start_delay - (time.monotonic() - state.started)))
            log("The server is fired up and ready to roll! (lab stand-in: serving)")

        threading.Thread(target=_ready_later, daemon=True).start()
    httpd.serve_forever(poll_interval=0.2)
    httpd.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    log(BANNER.format(path=os.path.abspath(__file__), version=SGLANG_VERSION))
    log(f"lab stand-in: plays sglang {SGLANG_VERSION} (from {SGLANG_VERSION_SOURCE})")
    known, source = load_known_flags()
    if known is None:
        log(f"lab stand-in: {FLAGS_FILE_NAME} not found next to the stand-in; permissive parse "
            "(every --flag is accepted)")
    else:
        log(f"lab stand-in: {len(known)} flags of sglang {SGLANG_VERSION} (+DDTree) from {source}")
    try:
        args = parse_args(argv, known)
    except UsageError as exc:
        sys.stderr.write(f"{_usage()}\n{PROG}: error: {exc}\n")
        return 2
    fault = os.environ.get("DFLASH_STANDIN_FAULT", "").strip().lower()
    if fault not in FAULTS:
        log(f"lab stand-in: unknown DFLASH_STANDIN_FAULT={fault!r} (expected {', '.join(FAULTS[1:])})")
        return 2
    if fault:
        log(f"lab stand-in: fault {fault!r}")
    shown = {k: args[k] for k in sorted(args) if args[k] is not None}
    log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ", lab_standin=True)")
    if fault == "crash":
        try:
            delay = float(os.environ.get("DFLASH_STANDIN_FAULT_DELAY") or 0)
        except ValueError:
            delay = 0.0
        if delay > 0:
            time.sleep(delay)
        sys.stderr.write(fault_log_text(os.environ.get("DFLASH_STANDIN_FAULT_LOG", "").strip()))
        sys.stderr.flush()
        return 1
    start_delay = 0.0
    if fault == "slow":
        try:
            start_delay = float(os.environ.get("DFLASH_STANDIN_START_DELAY") or 5)
        except ValueError:
            start_delay = 5.0
    return serve(args, State(args, fault, start_delay, source))


if __name__ == "__main__":
    sys.exit(main())
