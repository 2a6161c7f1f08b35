"""The reply judge (gate output.judge, run on the controller): real replies labelled good or broken by
their threads (tests/fixtures/replies/labelled/, sources inside each file), the stand-in's broken-reply
modes, the smoke records it is added to, and the release flow through the action plugin against the
stand-in (a mojibake release refused naming the gate, a good one passing with the gate recorded)."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from ansible.module_utils.dflash_release import gates_judge as j
from ansible.module_utils.dflash_release import smoke as s
from ansible_play import run_play

ROOT = Path(__file__).resolve().parents[3]
LABELLED = sorted((ROOT / "tests" / "fixtures" / "replies" / "labelled").glob("*.json"))
STANDIN = ROOT / "files" / "lab" / "sglang_standin.py"
sys.path.insert(0, str(STANDIN.parent))
import sglang_standin as standin

# broken replies a text-only judge cannot see, with the reason (a person could not either, from the text)
NOT_JUDGEABLE = {
    # fluent Korean; only the (unpublished) Chinese conversation around it makes it the wrong language
    "claude-code-50071-korean-in-chinese-session.json": "wrong_language",
    # two fluent sentences of Japanese, then Korean: a translation reply looks the same; only the (unpublished)
    # Korean conversation makes the Japanese wrong
    "claude-code-50864-japanese-then-korean.json": "wrong_language",
}


def _load(path):
    return json.loads(path.read_text())


def test_labelled_replies_have_sources_labels_and_both_kinds():
    labels = [_load(p)["label"] for p in LABELLED]
    assert labels.count("good") >= 10 and labels.count("broken") >= 10
    for p in LABELLED:
        d = _load(p)
        assert d["source"].startswith("https://") and d["label"] in ("good", "broken") and d["evidence"], p.name


@pytest.mark.parametrize("path", LABELLED, ids=[p.name for p in LABELLED])
def test_labelled_reply(path):
    d = _load(path)
    v = j.judge_reply(d.get("content"), d.get("reasoning_content"), prompt=d.get("prompt"), context=d.get("context"),
                      finish_reason=d.get("finish_reason"), thinking=d.get("thinking"))
    if path.name in NOT_JUDGEABLE:
        assert not v["broken"] and d["kind"] == NOT_JUDGEABLE[path.name]
    elif d["label"] == "good":
        assert not v["broken"], v["detail"]  # odd formatting, code, non-English text pass
    else:
        assert v["broken"], (d["kind"], v["detail"])


@pytest.mark.parametrize(("name", "kind", "needle"), [
    ("vllm-6060-qwen-awq-multiscript-soup.json", "token_soup", "unrelated scripts"),
    ("vllm-8071-opt-spec-nonsense-words.json", "token_soup", "function words"),
    ("revchatgpt-829-msg-history-mojibake.json", "mojibake", "'你的名字'"),
    ("candle-2068-llama2-sentence-loop.json", "sentence_loop", "foundations of mathematics"),
    ("llama-cpp-19585-prompt-echo-counter-loop.json", "regurgitation", "role markers"),
    ("llama-cpp-6762-llama3-let-me-loop.json", "ngram_loop", "Let me ( Let me )"),
    ("vllm-8020-newline-flood.json", "whitespace_flood", "300 whitespace"),
    ("ggml-64-cerebras-q4-blank-tokens.json", "whitespace_flood", "whitespace only: the reply is 25"),
    ("litert-109-tinyllama-subword-loop.json", "ngram_loop", "subword loop: one 268-character token"),
    ("gemini-cli-5813-nyny-loop.json", "ngram_loop", "'ny'"),
    ("ollama-15234-gemma4-french-dropped-accents.json", "dropped_chars", "a fr reply of 84 words without one accented"),
    ("qwen3-1171-seven-exclamations.json", "char_flood", "the whole reply is '!' 7 times"),
])
def test_the_reason_names_the_breakage(name, kind, needle):
    d = _load(ROOT / "tests" / "fixtures" / "replies" / "labelled" / name)
    v = j.judge_reply(d.get("content"), d.get("reasoning_content"), prompt=d.get("prompt"))
    assert v["kind"] == kind and needle in v["detail"], v


def test_blank_content_beside_reasoning_and_unaccented_short_replies_pass():
    # a reasoning model's content of two newlines next to its reasoning is how such servers answer: not blank
    assert not j.judge_reply("\n\n", "The user asks for the capital of France. It is Paris.")["broken"]
    # a short French reply without an accent happens (expected accented words < 8): no verdict from one line
    assert not j.judge_reply("Oui, le fichier est dans le dossier de travail, sous le nom que vous avez donne.")["broken"]
    # English never expects accents; 'cafe' / 'resume' are English words
    text = ("We met at the cafe near the station and went over the resume line by line before the interview, "
            "then walked back along the river and talked about the plan for the next week in some detail.")
    assert not j.judge_reply(text)["broken"]


def test_notes_for_odd_but_fine_replies():
    d = _load(ROOT / "tests" / "fixtures" / "replies" / "labelled" / "omlx-1087-gemma-choice-eos-leak.json")
    assert "'<eos>' leaked" in j.judge_reply(d["content"])["detail"]
    d = _load(ROOT / "tests" / "fixtures" / "replies" / "labelled" / "ddtree-dsv4-raw-completion-dangling-think.json")
    assert "<think> block" in j.judge_reply(d["content"])["detail"]


GOOD_CODE = [
    standin.ANSWER,
    standin.WRONG_ANSWER,  # wrong, but text: the code gate's business
    ("def fibonacci(n):\n    if n <= 0:\n        return 0\n    prev, curr = 0, 1\n    for _ in range(2, n + 1):\n"
    "        prev, curr = curr, prev + curr\n    return curr\n\nprint(fibonacci(10))  # 55\n"),
    ("#include <vector>\nlong fib(int n) {\n  std::vector<long> dp(n + 2);\n  dp[1] = 1;\n"
    "  for (int i = 2; i <= n; i++) dp[i] = dp[i - 1] + dp[i - 2];\n  return dp[n];\n}\n"),
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sglang\nspec:\n  containers:\n  - name: server\n",
]


@pytest.mark.parametrize("text", GOOD_CODE)
def test_code_replies_pass(text):
    assert not j.judge_reply(text)["broken"], j.judge_reply(text)["detail"]


@pytest.mark.parametrize(("fault", "kind"), [("token_soup", "token_soup"), ("mojibake", "mojibake"),
                                             ("sentence_loop", "sentence_loop"), ("regurgitation", "regurgitation")])
def test_every_broken_reply_mode_of_the_standin_is_judged_broken_and_the_host_gate_misses_it(fault, kind):
    r = standin.complete(s.FIBONACCI_PROMPT, 128, 0.0, None, False, fault)
    v = j.judge_reply(r["content"], r["reasoning"], s.FIBONACCI_PROMPT)
    assert v["kind"] == kind, v
    from ansible.module_utils.dflash_release.gates_output import degenerate_reply
    assert degenerate_reply({"content": r["content"], "reasoning": ""}) is None


def test_the_standins_good_replies_pass():
    for reasoning in (False, True):
        r = standin.complete(s.FIBONACCI_PROMPT, 4096, 0.0, None, reasoning)
        assert not j.judge_reply(r["content"], r["reasoning"], s.FIBONACCI_PROMPT)["broken"]
    r = standin.complete("Hello", 128, 0.0, None, False)
    assert not j.judge_reply(r["content"])["broken"]


def _record(content, ran=True):
    gates = [{"gate": "output.degenerate", "ran": ran, "passed": True} if ran else
             {"gate": "output", "ran": False, "reason": "output gates are off (smoke_gates.output: false)"}]
    return {"passed": True, "gates": gates, "reply": {"content": content, "reasoning_content": None}}


def test_judge_gate_records_figure_threshold_detail_and_skips_with_a_reason():
    g = j.judge_gate(_record(standin.MOJIBAKE_LINE + standin.ANSWER), s.FIBONACCI_PROMPT)
    assert g["gate"] == "output.judge" and g["ran"] and not g["passed"] and g["figure"] == "mojibake"
    assert g["threshold"] and "mojibake" in g["detail"]
    ok = j.judge_gate(_record(standin.ANSWER))
    assert ok["passed"] and ok["figure"] == "reads like text"
    off = j.judge_gate(_record("whatever", ran=False))
    assert not off["ran"] and "output gates are off" in off["reason"]
    assert not j.judge_gate({"gates": [{"gate": "output.degenerate", "ran": True}], "reply": {}})["ran"]


def test_without_its_libraries_the_judge_does_not_run_and_says_why(monkeypatch):
    monkeypatch.setattr(j, "MISSING", "No module named 'ftfy'")
    g = j.judge_gate(_record(standin.MOJIBAKE_LINE + standin.ANSWER), s.FIBONACCI_PROMPT)
    assert g == {"gate": "output.judge", "ran": False,
                 "reason": "the judge's libraries are missing on the controller (No module named 'ftfy'): make controller"}


def test_judged_records_fail_a_passed_record_and_add_to_a_failed_one():
    ctx = {"release": "r2", "previous": "r1"}
    bad = _record("x")
    bad["gates"].append({"gate": "output.judge", "ran": True, "passed": False, "detail": "token soup: 6 scripts"})
    already = {"passed": False, "error": "release r2 (previous r1): gate output.code failed: no code",
               "gates": [{"gate": "output.code", "ran": True, "passed": False, "detail": "no code"},
                         {"gate": "output.judge", "ran": True, "passed": False, "detail": "mojibake: 3"}]}
    good = _record("y")
    good["gates"].append({"gate": "output.judge", "ran": True, "passed": True, "detail": "reads like text"})
    recs, failed, msgs = s.judged_records({"a": bad, "b": already, "c": good}, ctx, "ct200: ")
    assert failed == ["a", "b"] and recs["c"]["passed"]
    assert msgs[0] == "ct200: instance a: smoke failed: release r2 (previous r1): gate output.judge failed: token soup: 6 scripts"
    assert msgs[1].endswith("gate output.code failed: no code; gate output.judge failed: mojibake: 3")
    assert "output.judge FAILED" in recs["a"]["gates_summary"] and "output.judge ok" in recs["c"]["gates_summary"]


def test_smoke_record_carries_the_reply():
    assert s.reply_record({"content": "a" * 9000, "reasoning": "think"}) == {
        "content": "a" * s.REPLY_MAX_CHARS, "reasoning_content": "think"}
    assert s.reply_record({}) == {"content": None, "reasoning_content": None}


# ----------------------------------------------------------------------------- through the action plugin


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_play(tmp_path, fault):
    port = _free_port()
    units = tmp_path / "units"
    units.mkdir()
    env = f"Environment=DFLASH_STANDIN_FAULT={fault}\n" if fault else ""
    (units / "dflash-main.service").write_text(
        f"[Service]\n{env}ExecStart={sys.executable} {STANDIN} --model-path /m --port {port}\n")
    common = {"service_manager": "runner", "unit_dir": str(units), "log_dir": str(tmp_path / "log"),
              "run_dir": str(tmp_path / "run"), "timeout": 60, "progress_interval": 1, "smoke": True,
              "record_dir": str(tmp_path / "smoke"), "host": "ct200", "gate_defaults": {"output": True}}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"dflash_wait": dict(common, instances=[{"name": "main", "port": port}]), "register": "w",
         "ignore_errors": True},
        {"dflash_service": {"name": ["dflash-main.service"], "state": "stopped", "service_manager": "runner",
                            "unit_dir": str(units), "log_dir": str(tmp_path / "log"), "run_dir": str(tmp_path / "run")}},
        {"ansible.builtin.copy": {"dest": str(tmp_path / "out.json"), "content": "{{ w | to_json }}", "mode": "0644"}},
    ]}]
    r = run_play(play, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    rec = json.loads((tmp_path / "smoke" / "main.json").read_text())["smoke"]
    return out, rec


def test_the_action_plugin_refuses_a_mojibake_reply_naming_the_gate(tmp_path):
    out, rec = _wait_play(tmp_path, "mojibake")
    assert out["failed"] and out["failed_instances"] == ["main"]
    assert "ct200: instance main: smoke failed:" in out["msg"]
    assert "gate output.judge failed: mojibake (UTF-8 read as another encoding)" in out["msg"]
    # the host's gates passed (the code is right); the record on the host has the judge's verdict
    assert "output.code ok" in rec["gates_summary"] and "output.judge FAILED" in rec["gates_summary"]
    judge = next(g for g in rec["gates"] if g["gate"] == "output.judge")
    assert judge["figure"] == "mojibake" and not rec["passed"]


def test_the_action_plugin_passes_a_good_reply_and_records_the_gate(tmp_path):
    out, rec = _wait_play(tmp_path, "")
    assert not out.get("failed"), out.get("msg")
    assert "output.judge ok" in out["smoke"]["main"]["gates_summary"] and rec["passed"]
    assert rec["reply"]["content"].startswith("```python")
