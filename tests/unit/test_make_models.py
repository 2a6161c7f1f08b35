"""scripts/gpu/make_models.py: the one writer of config-only model folders for GPU runs with
--load-format dummy (the e2e deploy, the DDTree run, the argument-parser checks, the smoke check)."""

import json
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "gpu"))
import make_models


def test_target_and_draft_shapes():
    cfgs = make_models.model_configs()
    assert set(cfgs) == {"target", "draft"}
    target, draft = cfgs["target"], cfgs["draft"]
    assert target["architectures"] == ["Qwen3ForCausalLM"] and target["num_hidden_layers"] == 28
    assert draft["architectures"] == ["DFlashDraftModel"] and draft["num_hidden_layers"] == 5
    # the draft reads target layers inside the target, and its mask token is a special id of the tokenizer
    assert all(0 <= i < target["num_hidden_layers"] for i in draft["dflash_config"]["target_layer_ids"])
    assert draft["dflash_config"]["mask_token_id"] == make_models.SPECIAL["<|mask|>"] < make_models.VOCAB
    assert draft["block_size"] == draft["dflash_config"]["block_size"] == 16
    for key in ("hidden_size", "vocab_size", "head_dim", "num_key_value_heads"):
        assert target[key] == draft[key]


@pytest.mark.parametrize("block", [8, 32])
def test_other_block_sizes_change_only_the_block(block):
    cfgs = make_models.model_configs((16, block))
    other = cfgs[f"draft{block}"]
    diff = {k for k in other if other[k] != cfgs["draft"][k]}
    assert diff == {"block_size", "dflash_config"}
    assert other["block_size"] == other["dflash_config"]["block_size"] == block


def test_write_configs_is_config_only(tmp_path):
    paths = make_models.write_configs(str(tmp_path), (16, 32))
    assert set(paths) == {"target", "draft", "draft32"}
    for p in paths.values():
        assert sorted(x.name for x in pathlib.Path(p).iterdir()) == ["config.json", "generation_config.json"]
    assert json.loads((tmp_path / "draft32" / "config.json").read_text())["block_size"] == 32


def test_main_adds_an_offline_tokenizer_covering_every_id(tmp_path, capsys):
    make_models.main(str(tmp_path))
    tok = json.loads((tmp_path / "target" / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(make_models.VOCAB))
    assert vocab["<|im_end|>"] == 151645 and vocab["fibonacci"] < 1000
    cfg = json.loads((tmp_path / "draft" / "tokenizer_config.json").read_text())
    assert "<|im_start|>assistant" in cfg["chat_template"]


def test_no_other_script_writes_model_configs():
    """Every GPU/bench script gets its model folders from make_models (no second copy of the shapes)."""
    offenders = []
    for path in [*REPO.glob("bench/**/*.py"), *REPO.glob("bench/**/*.sh"), *REPO.glob("scripts/**/*.py")]:
        if path.name == "make_models.py" or "ddtree_dryrun" in path.parts:
            continue
        text = path.read_text(errors="replace")
        if '"DFlashDraftModel"' in text or '"num_target_layers"' in text or "num_target_layers=" in text:
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []
