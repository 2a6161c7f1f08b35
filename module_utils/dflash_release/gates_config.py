"""Smoke gates: the settings (inventory fields), their defaults and their validation.

Where the settings come from, lowest first: ``DEFAULTS`` below, the host's ``dflash_smoke_gates``
(inventory, e.g. group_vars of a dummy-weight inventory switching the output gates off), the
instance's ``smoke_gates``. ``resolve`` merges them for one instance and fills what depends on
the smoke prompt (the fibonacci checks apply to the seeds' prompt only, unless set explicitly)
and on the instance (reasoning models think first: a larger max_tokens for the output request).

Fields:

  output               all output gates on/off (dummy weights answer garbage by design)
  degenerate           the degenerate-output detector
  expect               regular expressions the T=0 reply must contain (content or reasoning)
  code_check           run the returned code in a sandbox and compare code_function(*code_args)
  code_function, code_args, code_expect, code_timeout
  max_tokens           max_tokens of the output request (default: the smoke test's; with
                       --reasoning-parser at least reasoning_max_tokens)
  reasoning_max_tokens
  chat_template_kwargs passed to the chat request (e.g. {enable_thinking: false} for Qwen3)
  min_accept_length    speculative instances: the median accept length must reach it (0 = off)
  perf                 compare tok/s and accept length with the previous release's
  perf_ratio           ... not below this fraction of it
  perf_samples         short generations measured; their median is compared

Pure functions, no Ansible import.
"""

from __future__ import annotations

import re

FIBONACCI_PROMPT = "Write a Python function fibonacci(n) using iteration. Return only code."
# what the seeds' prompt must produce: a def fibonacci(...) and a loop (the prompt says "iteration")
FIBONACCI_EXPECT = [r"\bdef\s+fibonacci\s*\(", r"\b(?:for|while)\b"]

DEFAULTS = {
    "output": True,
    "degenerate": True,
    "expect": None,  # None: FIBONACCI_EXPECT for the seeds' prompt, else none
    "code_check": None,  # None: on for the seeds' prompt, else off
    "code_function": "fibonacci",
    "code_args": [10],
    "code_expect": [55],
    "code_timeout": 5.0,
    "max_tokens": None,
    "reasoning_max_tokens": 1024,
    "chat_template_kwargs": {},
    "min_accept_length": 1.5,
    "perf": True,
    "perf_ratio": 0.85,
    "perf_samples": 3,
}
KEYS = tuple(DEFAULTS)
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _is_num(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _scalar(v) -> bool:
    return v is None or isinstance(v, str | bool | int | float)


def gate_errors(gates, field: str = "smoke_gates") -> list:
    """Every problem of one smoke_gates mapping, as 'field.key': message pairs [(field, msg)]."""
    if gates is None:
        return []
    if not isinstance(gates, dict):
        return [(field, f"must be a mapping of gate settings, got {gates!r}")]
    errs = []

    def add(key, msg):
        errs.append((f"{field}.{key}", msg))

    for key in sorted(set(gates) - set(KEYS)):
        add(key, f"unknown gate setting (known: {', '.join(KEYS)})")
    for key in ("output", "degenerate", "perf"):
        if key in gates and not isinstance(gates[key], bool):
            add(key, f"must be true or false, got {gates[key]!r}")
    if "code_check" in gates and gates["code_check"] is not None and not isinstance(gates["code_check"], bool):
        add("code_check", f"must be true, false or null (null: on for the seeds' prompt only), got {gates['code_check']!r}")
    exp = gates.get("expect")
    if exp is not None:
        if not isinstance(exp, list) or not all(isinstance(p, str) and p for p in exp):
            add("expect", f"must be a list of regular expressions, got {exp!r}")
        else:
            for i, pat in enumerate(exp):
                try:
                    re.compile(pat)
                except re.error as exc:
                    add(f"expect[{i}]", f"{pat!r} is not a valid regular expression: {exc}")
    if "code_function" in gates and not (isinstance(gates["code_function"], str)
                                         and IDENT_RE.match(gates["code_function"])):
        add("code_function", f"must be a Python function name, got {gates['code_function']!r}")
    for key in ("code_args", "code_expect"):
        if key in gates and not (isinstance(gates[key], list) and all(_scalar(v) for v in gates[key])):
            add(key, f"must be a list of plain values (numbers, strings, true/false, null), got {gates[key]!r}")
    if "code_expect" in gates and isinstance(gates["code_expect"], list) and not gates["code_expect"]:
        add("code_expect", "must name at least one accepted value")
    if "code_timeout" in gates and not (_is_num(gates["code_timeout"]) and 0.5 <= gates["code_timeout"] <= 60):
        add("code_timeout", f"must be seconds between 0.5 and 60, got {gates['code_timeout']!r}")
    for key in ("max_tokens", "reasoning_max_tokens"):
        v = gates.get(key)
        if v is not None and not (_is_int(v) and 16 <= v <= 32768):
            add(key, f"must be an integer between 16 and 32768, got {v!r}")
    if "chat_template_kwargs" in gates and not isinstance(gates["chat_template_kwargs"], dict):
        add("chat_template_kwargs", f"must be a mapping, got {gates['chat_template_kwargs']!r}")
    mal = gates.get("min_accept_length")
    if mal is not None and not (_is_num(mal) and 0 <= mal <= 64):
        add("min_accept_length", f"must be a number between 0 (off) and 64, got {mal!r}")
    if "perf_ratio" in gates and not (_is_num(gates["perf_ratio"]) and 0 < gates["perf_ratio"] <= 1):
        add("perf_ratio", f"must be a fraction in (0, 1] (0.85: at least 85% of the previous release's), "
                          f"got {gates['perf_ratio']!r}")
    if "perf_samples" in gates and not (_is_int(gates["perf_samples"]) and 1 <= gates["perf_samples"] <= 20):
        add("perf_samples", f"must be an integer between 1 and 20, got {gates['perf_samples']!r}")
    return errs


def host_gate_errors(host: str, gates) -> list:
    """Errors of the host-level dflash_smoke_gates, each naming host and field."""
    return [f"{host}: field '{f}': {m}" for f, m in gate_errors(gates, "dflash_smoke_gates")]


def resolve(instance_gates=None, host_gates=None, prompt: str = FIBONACCI_PROMPT, reasoning: bool = False,
            smoke_max_tokens: int = 128) -> dict:
    """The effective gates of one instance (validated input assumed)."""
    out = dict(DEFAULTS)
    for layer in (host_gates or {}, instance_gates or {}):
        out.update({k: v for k, v in layer.items() if k in DEFAULTS})
    fib = (prompt or "").strip() == FIBONACCI_PROMPT
    if out["expect"] is None:
        out["expect"] = list(FIBONACCI_EXPECT) if fib else []
    if out["code_check"] is None:
        out["code_check"] = fib
    if out["max_tokens"] is None:
        out["max_tokens"] = int(smoke_max_tokens)
        if reasoning:
            out["max_tokens"] = max(out["max_tokens"], int(out["reasoning_max_tokens"]))
    out["chat_template_kwargs"] = dict(out.get("chat_template_kwargs") or {})
    out["min_accept_length"] = float(out["min_accept_length"] or 0)
    return out
