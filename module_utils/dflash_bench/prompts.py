"""tune.yml's prompts: the user's own (a JSONL file, or a recorded sample of their traffic) or a built-in set.

One JSON object per line, in any of the shapes traffic is recorded in:

* sglang's native ``/generate`` body: ``{"text": ...}`` or ``{"input_ids": [...]}``, with
  ``sampling_params.max_new_tokens``;
* an OpenAI chat request: ``{"messages": [{"role": ..., "content": ...}], "max_tokens": N}`` (rendered in
  ChatML, the chat format of the Qwen family the toolkit's models belong to; a target with another chat
  template should get its prompts already templated, as ``text``);
* an OpenAI completion request, or a bare prompt: ``{"prompt": ...}``.

The output length of a request is its ``max_tokens`` / ``max_completion_tokens`` / ``max_new_tokens`` /
``sampling_params.max_new_tokens`` / ``output_len`` (else ``default_max_tokens``). Every request is sent
greedy with ``ignore_eos``, so it generates exactly that many tokens on every configuration: the same
work everywhere, whatever the configuration's acceptance does to the text. Blank lines and lines starting
with ``#`` are skipped. Pure functions, stdlib; no Ansible import.
"""

from __future__ import annotations

import json
import random

from ansible.module_utils.dflash_bench import workloads as wl

BUILTIN = ("seeds", "random")
LENGTH_KEYS = ("max_tokens", "max_completion_tokens", "max_new_tokens", "output_len")
MAX_ERRORS = 10


class PromptsError(ValueError):
    def __init__(self, errors):
        super().__init__("; ".join(errors))
        self.errors = list(errors)


def _length(obj, default):
    sp = obj.get("sampling_params") if isinstance(obj.get("sampling_params"), dict) else {}
    for value in [obj.get(k) for k in LENGTH_KEYS] + [sp.get("max_new_tokens")]:
        if value is not None:
            return value
    return default


def _content(msg):
    """A chat message's content as text (OpenAI's list of parts: the text parts joined)."""
    c = msg.get("content")
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return "" if c is None else str(c)


def payload_of(obj, default_max_tokens, where) -> tuple:
    """(payload for /generate, error or None) of one recorded request."""
    if not isinstance(obj, dict):
        return None, f"{where}: not a JSON object"
    n = _length(obj, default_max_tokens)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 65536:
        return None, f"{where}: the output length {n!r} must be a whole number of tokens, 1 to 65536"
    sampling = wl.sampling(n)
    if isinstance(obj.get("input_ids"), list):
        ids = obj["input_ids"]
        if not ids or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids):
            return None, f"{where}: input_ids must be a non-empty list of token ids"
        return {"input_ids": ids, "sampling_params": sampling}, None
    if isinstance(obj.get("text"), str) and obj["text"]:
        return {"text": obj["text"], "sampling_params": sampling}, None
    if isinstance(obj.get("prompt"), str) and obj["prompt"]:
        return {"text": obj["prompt"], "sampling_params": sampling}, None
    msgs = obj.get("messages")
    if isinstance(msgs, list) and msgs:
        if any(not isinstance(m, dict) or not m.get("role") for m in msgs):
            return None, f"{where}: every message needs a role"
        return {"text": wl.chatml([{"role": m["role"], "content": _content(m)} for m in msgs]),
                "sampling_params": sampling}, None
    return None, f"{where}: no prompt (one of text, input_ids, prompt, messages)"


def parse_jsonl(text, source="prompts.jsonl", default_max_tokens=256, limit=0, seed=0) -> dict:
    """The user's file -> {prompts: [{label, payload}], read, used, source}; raises PromptsError naming
    file and line for every bad line (the first ten). ``limit`` > 0: a seeded random sample of that many
    (in file order), so that a long recording stays a bounded run."""
    errors, out = [], []
    for no, line in enumerate(str(text or "").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{no}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            errors.append(f"{where}: not JSON ({exc})")
            continue
        payload, err = payload_of(obj, default_max_tokens, where)
        if err:
            errors.append(err)
            continue
        out.append({"label": f"line{no}", "payload": payload})
    if errors:
        more = len(errors) - MAX_ERRORS
        raise PromptsError(errors[:MAX_ERRORS] + ([f"{source}: {more} more bad lines"] if more > 0 else []))
    if not out:
        raise PromptsError([f"{source}: no prompt in the file"])
    read = len(out)
    if limit and int(limit) < len(out):
        keep = sorted(random.Random(f"dflash-tune|{seed}").sample(range(len(out)), int(limit)))
        out = [out[i] for i in keep]
    return {"prompts": out, "read": read, "used": len(out), "source": source}


def builtin(name, max_tokens=256, count=16, input_len=256, seed=0) -> dict:
    """A built-in set: ``seeds`` (the seeds' three prompts) or ``random`` (``count`` prompts of
    ``input_len`` random token ids)."""
    if name == "seeds":
        reqs = wl.seeds_requests(1, max_tokens)
        prompts = [{"label": r["label"].split("#")[0], "payload": r["payload"]} for r in reqs]
    elif name == "random":
        prompts = [{"label": r["label"], "payload": r["payload"]} for r in
                   wl.random_requests(1, input_len, max_tokens, int(count), seed)]
    else:
        raise PromptsError([(f"dflash_bench_tune_prompts: {name!r} is neither a file nor a built-in set "
                            f"({', '.join(BUILTIN)})")])
    return {"prompts": prompts, "read": len(prompts), "used": len(prompts), "source": f"built-in: {name}"}


def describe(info) -> str:
    n = info.get("used")
    lengths = sorted({p["payload"]["sampling_params"]["max_new_tokens"] for p in info.get("prompts") or []})
    span = (f"{lengths[0]}" if len(lengths) == 1 else f"{lengths[0]}-{lengths[-1]}") if lengths else "?"
    sample = "" if info.get("read") == n else f" (a seeded sample of the {info.get('read')} read)"
    return f"{info.get('source')}: {n} prompts{sample}, {span} new tokens each; greedy, ignore_eos"
