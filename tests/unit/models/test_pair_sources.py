"""The pair check and the source fields, on real configs: the lab's Qwen3.6-27B (a Qwen3.5-family multimodal
config, its text in text_config) and its DFlash draft, as made by gpu-harness/make_models.py from the published
shapes; the fields sglang's dflash_utils.parse_dflash_draft_config reads, top level or in dflash_config."""

from __future__ import annotations

import json
from pathlib import Path

from ansible.module_utils.dflash_models import sources
from ansible.module_utils.dflash_models.pair import pair_errors

ROOT = Path(__file__).resolve().parents[3]
TARGET = json.loads((ROOT / "lab/models/Qwen3.6-27B/config.json").read_text())
DRAFT = json.loads((ROOT / "lab/models/Qwen3.6-27B-DFlash/config.json").read_text())
LLAMA_DRAFT = json.loads((ROOT / "tests/fixtures/models/llama-3.1-8b-dflash-draft.config.json").read_text())
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_the_lab_pair_fits():
    assert pair_errors(TARGET, DRAFT) == []
    assert pair_errors(json.dumps(TARGET), json.dumps(DRAFT)) == []


def test_each_mismatch_in_words():
    errs = pair_errors(TARGET, LLAMA_DRAFT)
    assert [e.split(":")[0] for e in errs] == ["vocabulary", "hidden size", "target layers"]
    layers = dict(DRAFT, dflash_config=dict(DRAFT["dflash_config"], target_layer_ids=[1, 16, 31, 46, 64]))
    assert pair_errors(TARGET, layers) == [
        ("target layers: the draft reads layers [1, 16, 31, 46, 64] of the target, but the target has 64 layers "
        "(0..63): [64] do not exist")]
    mask = dict(DRAFT, dflash_config=dict(DRAFT["dflash_config"], mask_token_id=248320))
    assert pair_errors(TARGET, mask) == [
        "mask token: the draft's mask_token_id 248320 is outside the target's vocabulary of 248320 tokens"]
    # the layer ids and the mask token at the top level, as sglang also accepts them
    top = {k: v for k, v in DRAFT.items() if k != "dflash_config"}
    assert pair_errors(TARGET, dict(top, target_layer_ids=[70], mask_token_id=5)) == [
        ("target layers: the draft reads layers [70] of the target, but the target has 64 layers (0..63): "
        "[70] do not exist")]
    # a draft with a smaller draft vocabulary over the target's is fine; target_hidden_size wins over hidden_size
    assert pair_errors(TARGET, dict(DRAFT, draft_vocab_size=32000, hidden_size=2048, target_hidden_size=5120)) == []
    assert pair_errors(TARGET, "not json")[0].startswith("the draft: config.json is not JSON")


def test_source_fields_in_words():
    ok = {"hub": "Qwen/Qwen3.6-27B", "revision": COMMIT}
    assert sources.spec_errors(ok) == []
    assert sources.spec_errors({"hub": "Qwen/Qwen3.6-27B", "revision": "main"})[0].startswith(
        "revision: 'main' is not a pinned commit")
    assert sources.spec_errors({"url": "https://example.org/m.tar.gz", "sha256": "x"})[0].startswith("sha256: 'x'")
    assert "is not an archive" in sources.spec_errors({"url": "https://example.org/m.bin", "sha256": "a" * 64})[0]
    assert sources.spec_errors({"hub": "a/b", "controller": "/x"})[0].startswith("needs exactly one of")
    assert sources.spec_errors({"controller": "relative"})[0].startswith("controller: 'relative'")
    inst = {"name": "a", "algorithm": "DFLASH", "model_source": ok, "model_path": "/models/x",
            "draft_source": ok, "draft_model_path": "/models/d"}
    assert [f for f, _ in sources.instance_errors(inst)] == ["model_path", "draft_model_path"]
    assert sources.instance_errors(dict(inst, model_path="/dev/shm/x", draft_model_path=None)) == []


def test_the_instances_read_the_stored_copies():
    ok = {"hub": "Qwen/Qwen3.6-27B", "revision": COMMIT}
    insts = [{"name": "a", "model_source": ok, "draft_source": ok, "api_key": "k"},
             {"name": "b", "model_source": ok, "model_path": "/dev/shm/Q"},
             {"name": "c", "model_path": "/m", "model_source": "/data/m"}]
    stored = {"a": {"model_source": "/opt/dflash/models/M-1", "draft_source": "/opt/dflash/models/D-2"},
              "b": {"model_source": "/opt/dflash/models/M-1"}}
    a, b, c = sources.with_stored_paths(insts, stored)
    assert a == {"name": "a", "model_path": "/opt/dflash/models/M-1", "draft_model_path": "/opt/dflash/models/D-2",
                 "api_key": "k"}
    assert b == {"name": "b", "model_source": "/opt/dflash/models/M-1", "model_path": "/dev/shm/Q"}
    assert c == insts[2]
    assert sources.display_name({"url": "https://x.org/a/Qwen3.6-27B.tar.gz?sig=1", "sha256": "0" * 64}) == "Qwen3.6-27B"
