"""The benchmark's workloads as request payloads for SGLang's native /generate (pure, seeded).

* ``seeds``  the seeds' three prompts (fibonacci, quicksort, arithmetic), 256 new tokens each,
             greedy, ignore_eos (every request generates exactly max_new_tokens).
* ``random`` random token ids at a fixed input length, a fixed output length (no tokenizer needed).
* ``agent``  agentic sessions: a shared system prompt with tool schemas, a task, then turns that
             each append the model's reply and a tool result as JSON, so every request resends a
             growing conversation whose prefix the server can reuse (``cached_tokens``).

Chat text is rendered in ChatML (Qwen's format, the seeds' model family; tool results as
``<tool_response>`` user turns as Qwen's template does). No Ansible import.
"""

from __future__ import annotations

import json
import random

from ansible.module_utils.dflash_release.smoke import FIBONACCI_PROMPT

SEED_PROMPTS = (
    ("fibonacci", FIBONACCI_PROMPT),
    ("quicksort", "Explain how quicksort works and write it in Python."),
    ("arithmetic", "What is 1234 * 5678 + 91011? Show the steps, then the result."),
)
TOOLS = [
    {"type": "function", "function": {"name": "search_files", "description": "Find files whose text matches a pattern.",
                                      "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}},
                                                     "required": ["pattern"]}}},
    {"type": "function", "function": {"name": "read_file", "description": "Read a file of the repository.",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                     "required": ["path"]}}},
    {"type": "function", "function": {"name": "run_tests", "description": "Run the test suite, return failures.",
                                      "parameters": {"type": "object", "properties": {"select": {"type": "string"}}}}},
]
AGENT_SYSTEM = ("You are a coding agent working in a Python repository. Call one tool per turn by answering "
                "with a JSON object {\"tool\": NAME, \"arguments\": {...}}. Tools:\n" + json.dumps(TOOLS, indent=1))
AGENT_TASKS = (
    "The test test_parse_config fails with KeyError: 'timeout'. Find the cause and fix it.",
    "Add a --dry-run option to the deploy command and a test for it.",
    "The cache module leaks file handles under load. Find where and fix it.",
    "Rename the function load_cfg to load_config everywhere and keep the tests green.",
)
TOKEN_LOW, TOKEN_HIGH = 1000, 100000  # random ids stay clear of special tokens of usual vocabularies


def chatml(messages) -> str:
    """ChatML text of the messages, ending with the assistant's turn opened."""
    parts = []
    for m in messages:
        role, content = m["role"], m["content"]
        if role == "tool":
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


def sampling(max_new_tokens) -> dict:
    return {"temperature": 0, "max_new_tokens": int(max_new_tokens), "ignore_eos": True}


def seeds_requests(concurrency, max_tokens=256) -> list:
    """Each of the ``concurrency`` slots sends the three prompts once: [{label, payload}]."""
    out = []
    for slot in range(int(concurrency)):
        for label, prompt in SEED_PROMPTS:
            out.append({"label": f"{label}#{slot}", "payload": {
                "text": chatml([{"role": "user", "content": prompt}]), "sampling_params": sampling(max_tokens)}})
    return out


def random_requests(concurrency, input_len=256, output_len=256, per_slot=2, seed=0) -> list:
    """``per_slot`` x concurrency requests of ``input_len`` random token ids, ``output_len`` new tokens
    (other ids at each concurrency level: a cell does not find the previous cell's prompts in the cache)."""
    rng = random.Random(f"dflash-bench-random|{seed}|{input_len}|{concurrency}")
    out = []
    for i in range(int(per_slot) * int(concurrency)):
        ids = [rng.randrange(TOKEN_LOW, TOKEN_HIGH) for _ in range(int(input_len))]
        out.append({"label": f"random#{i}", "payload": {"input_ids": ids, "sampling_params": sampling(output_len)}})
    return out


def tool_result(session, turn) -> str:
    """A deterministic tool result (JSON) for turn ``turn`` of ``session``: a file listing and lines."""
    rng = random.Random(f"dflash-bench-agent|{session}|{turn}")
    path = f"src/pkg/module_{rng.randrange(100)}.py"
    lines = [f"{n + 1}: " + " ".join(rng.choice(("def", "return", "self", "config", "timeout", "value", "if",
                                                 "None", "for", "item", "in", "items", "raise", "KeyError"))
                                    for _ in range(8)) for n in range(12)]
    return json.dumps({"tool": ("search_files", "read_file", "run_tests")[turn % 3], "ok": True,
                       "result": {"path": path, "lines": lines, "matches": rng.randrange(1, 9)}}, indent=1)


def agent_opening(session) -> list:
    """The messages a session starts with: the shared system prompt (tools) and its task."""
    return [{"role": "system", "content": AGENT_SYSTEM},
            {"role": "user", "content": AGENT_TASKS[session % len(AGENT_TASKS)]}]


def agent_next(messages, reply, session, turn) -> list:
    """The conversation after a turn: the model's reply, then the tool's JSON result."""
    return list(messages) + [{"role": "assistant", "content": reply},
                             {"role": "tool", "content": tool_result(session, turn)}]


def agent_payload(messages, max_tokens=64) -> dict:
    return {"text": chatml(messages), "sampling_params": sampling(max_tokens)}


def describe(workload, opts) -> str:
    """One line saying what a workload sends (for the report)."""
    if workload == "seeds":
        return (f"the seeds' 3 prompts (fibonacci, quicksort, arithmetic), {opts.get('seeds_max_tokens', 256)} new "
                "tokens each, per concurrency slot; greedy, ignore_eos")
    if workload == "random":
        r = opts.get("random") or {}
        return (f"random token ids, {r.get('input_len', 256)} in / {r.get('output_len', 256)} out, "
                f"{r.get('per_slot', 2)} requests per concurrency slot; greedy, ignore_eos")
    a = opts.get("agent") or {}
    return (f"one agentic session per concurrency slot, {a.get('turns', 4)} turns of {a.get('max_tokens', 64)} new "
            "tokens; each turn resends the growing conversation (shared system prompt with tool schemas, the "
            "model's replies, JSON tool results)")
