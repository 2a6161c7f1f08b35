"""tune.yml's prompts (the user's JSONL in the shapes traffic is recorded in) and its load generator: Poisson
arrivals sent on schedule whatever the server does (open loop), closed-loop clients, per-request records with
the server's acceptance, against the lab stand-in with known speeds."""

import itertools
import json
import os

import pytest
from ansible.module_utils.dflash_bench import openloop as ol
from ansible.module_utils.dflash_bench import prompts as pr
from scipy import stats
from test_standin import start_standin

# ------------------------------------------------------------------ prompts


def test_every_recorded_shape_becomes_a_greedy_generate_request():
    lines = [
        json.dumps({"text": "<|im_start|>user\nhi<|im_end|>\n", "sampling_params": {"max_new_tokens": 64}}),
        json.dumps({"input_ids": [1, 2, 3], "max_tokens": 8}),
        "",
        "# a comment",
        json.dumps({"model": "q", "messages": [{"role": "system", "content": "be brief"},
                                               {"role": "user", "content": [{"type": "text", "text": "why?"}]}],
                    "max_completion_tokens": 12}),
        json.dumps({"prompt": "Once upon a time"}),
    ]
    got = pr.parse_jsonl("\n".join(lines), "traffic.jsonl", default_max_tokens=32)
    p = [x["payload"] for x in got["prompts"]]
    assert [x["label"] for x in got["prompts"]] == ["line1", "line2", "line5", "line6"]
    assert p[0]["text"].startswith("<|im_start|>user") and p[0]["sampling_params"]["max_new_tokens"] == 64
    assert p[1] == {"input_ids": [1, 2, 3], "sampling_params": {"temperature": 0, "max_new_tokens": 8,
                                                                "ignore_eos": True}}
    assert p[2]["text"] == ("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nwhy?<|im_end|>\n"
                            "<|im_start|>assistant\n") and p[2]["sampling_params"]["max_new_tokens"] == 12
    assert p[3]["text"] == "Once upon a time" and p[3]["sampling_params"]["max_new_tokens"] == 32
    assert pr.describe(got) == "traffic.jsonl: 4 prompts, 8-64 new tokens each; greedy, ignore_eos"


def test_bad_lines_are_named_by_file_and_line_all_at_once():
    text = "\n".join(["{bad", json.dumps({"foo": 1}), json.dumps({"text": "x", "max_tokens": 0}),
                      json.dumps({"input_ids": []}), json.dumps({"messages": [{"content": "no role"}]})])
    with pytest.raises(pr.PromptsError) as exc:
        pr.parse_jsonl(text, "t.jsonl")
    errs = exc.value.errors
    assert errs[0].startswith("t.jsonl:1: not JSON")
    assert errs[1] == "t.jsonl:2: no prompt (one of text, input_ids, prompt, messages)"
    assert errs[2] == "t.jsonl:3: the output length 0 must be a whole number of tokens, 1 to 65536"
    assert errs[3] == "t.jsonl:4: input_ids must be a non-empty list of token ids"
    assert errs[4] == "t.jsonl:5: every message needs a role"
    with pytest.raises(pr.PromptsError, match="no prompt in the file"):
        pr.parse_jsonl("\n# nothing\n", "e.jsonl")


def test_a_long_recording_is_sampled_the_same_way_every_time():
    text = "\n".join(json.dumps({"text": f"p{i}"}) for i in range(500))
    a = pr.parse_jsonl(text, limit=20, seed=3)
    b = pr.parse_jsonl(text, limit=20, seed=3)
    assert a["read"] == 500 and a["used"] == 20 and a["prompts"] == b["prompts"]
    order = [int(x["label"][4:]) for x in a["prompts"]]
    assert order == sorted(order)  # file order kept
    assert "a seeded sample of the 500 read" in pr.describe(a)


def test_builtin_sets():
    seeds = pr.builtin("seeds", 16)
    assert [x["label"] for x in seeds["prompts"]] == ["fibonacci", "quicksort", "arithmetic"]
    rnd = pr.builtin("random", 8, count=5, input_len=12)
    assert len(rnd["prompts"]) == 5 and all(len(x["payload"]["input_ids"]) == 12 for x in rnd["prompts"])
    with pytest.raises(pr.PromptsError, match="neither a file nor a built-in set"):
        pr.builtin("sharegpt")


# ------------------------------------------------------------------ arrivals


def test_poisson_arrivals_are_exponential_at_the_rate_and_seeded():
    at = ol.arrivals(20.0, 2000, seed=1)
    gaps = [b - a for a, b in itertools.pairwise(at)]
    assert at[0] == 0 and at == ol.arrivals(20.0, 2000, seed=1) and at != ol.arrivals(20.0, 2000, seed=2)
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 20.0, rel=0.08)
    assert stats.kstest(gaps, "expon", args=(0, 1 / 20.0)).pvalue > 0.01


# ------------------------------------------------------------------ against the stand-in

SPEEDS = {"NONE": {"tok_s": 400}, "DDTREE": {"tok_s": 800, "accept": 5}, "noise": 0.02, "slots": 2}


def start(*flags):
    env = dict(os.environ, DFLASH_STANDIN_SPEEDS=json.dumps(SPEEDS), DFLASH_STANDIN_HEALTH_DELAY="0")
    env.pop("DFLASH_STANDIN_FAULT", None)
    return start_standin(*flags, env=env)


@pytest.fixture(scope="module")
def servers():
    procs = [start("--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "/d"), start()]
    yield [u for _, u in procs]
    for p, _ in procs:
        p.terminate()
        p.wait(10)


PROMPTS = pr.builtin("seeds", 40)["prompts"]


def test_open_loop_sends_on_schedule_even_when_the_server_queues(servers):
    _, none = servers
    # 40 tokens at 400 tok/s: 0.1 s a request, 2 at once: 20 req/s; 60 req/s offered: a queue grows
    got = ol.run_open(none, PROMPTS, 60.0, 24, seed=5, timeout=30)
    reqs = got["requests"]
    assert [r["index"] for r in reqs] == list(range(24)) and all(r["ok"] for r in reqs)
    assert [r["sent_at"] for r in reqs] == [round(t, 6) for t in ol.arrivals(60.0, 24, 5)]
    assert [r["label"] for r in reqs[:4]] == ["fibonacci", "quicksort", "arithmetic", "fibonacci"]
    ttft = [r["ttft"] for r in reqs]
    assert max(ttft[-6:]) > 3 * max(ttft[:2])  # the later arrivals waited for a slot
    assert got["wall_s"] >= got["offered_s"] and got["wall_s"] > 24 / 20.0 * 0.8


def test_closed_loop_and_the_records(servers):
    dd, _ = servers
    cell = ol.run_load(dd, PROMPTS, {"kind": "concurrency", "value": 2, "requests": 8}, timeout=30)
    assert cell["status"] == "ok" and len(cell["requests"]) == 8
    r = cell["requests"][0]
    assert r["ok"] and r["completion_tokens"] == 40 and r["spec_verify_ct"] == r["chunks"]
    assert sum(r["spec_accept_histogram"]) == r["spec_verify_ct"]
    assert sum(k * n for k, n in enumerate(r["chunk_tokens"])) == 40 and sum(r["chunk_tokens"]) == r["chunks"]
    assert "text" not in r and all(isinstance(x, float) for x in r["itl"])
    assert {q["worker"] for q in cell["requests"]} == {0, 1}
    assert "lab stand-in" in cell["server_after"]["server_info"]["stand_in"]


def test_the_cell_deadline_skips_what_it_cannot_send(servers):
    _, none = servers
    got = ol.run_open(none, PROMPTS, 2.0, 10, seed=1, timeout=1.0)
    skipped = [r for r in got["requests"] if r.get("skipped")]
    assert skipped and all(r["error"] == "cell time limit" for r in skipped)
