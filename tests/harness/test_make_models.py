"""gpu-harness/make_models.py: the one writer of config-only model folders for GPU runs with
--load-format dummy (the e2e deploy, the DDTree run, the argument-parser checks, the smoke check)."""

import json
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "gpu-harness"))
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
    make_models.main([str(tmp_path)])
    tok = json.loads((tmp_path / "target" / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(make_models.VOCAB))
    assert vocab["<|im_end|>"] == 151645 and vocab["fibonacci"] < 1000
    cfg = json.loads((tmp_path / "draft" / "tokenizer_config.json").read_text())
    assert "<|im_start|>assistant" in cfg["chat_template"]


def test_no_other_script_writes_model_configs():
    """Every GPU/bench script gets its model folders from make_models (no second copy of the shapes)."""
    offenders = []
    scripts = [p for d in ("gpu-harness", "benchmarks", "scripts") for ext in ("py", "sh") for p in REPO.glob(f"{d}/**/*.{ext}")]
    assert len(scripts) > 40  # the folders are where this test looks (not an empty glob after a move)
    for path in scripts:
        if path.name == "make_models.py" or "ddtree_dryrun" in path.parts:
            continue
        text = path.read_text(errors="replace")
        if '"DFlashDraftModel"' in text or '"num_target_layers"' in text or "num_target_layers=" in text:
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []


def test_the_lab_model_configs_are_make_models_output():
    for name, cfg in make_models.lab_configs().items():
        assert json.loads((REPO / "lab" / "models" / name / "config.json").read_text()) == cfg, name
    assert make_models.lab_configs()["Qwen3.6-27B"]["architectures"] == ["Qwen3_5ForConditionalGeneration"]


def test_hybrid_folders_carry_the_processor_and_tokenizer(tmp_path):
    paths = make_models.write_configs(str(tmp_path), (16,), ("hybrid",))
    assert set(paths) == {"hybrid", "hybrid-draft"}
    files = sorted(x.name for x in pathlib.Path(paths["hybrid"]).iterdir())
    assert {"preprocessor_config.json", "video_preprocessor_config.json", "tokenizer.json",
            "tokenizer_config.json", "chat_template.json"} <= set(files)  # fmt: skip
    cfg = json.loads((tmp_path / "hybrid" / "config.json").read_text())
    vocab = json.loads((tmp_path / "hybrid" / "tokenizer.json").read_text())["model"]["vocab"]
    for key, tok in (("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
                     ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")):
        assert vocab[tok] == cfg[key]
    # the draft reads target layers that exist and share the target's hidden size
    draft = json.loads((tmp_path / "hybrid-draft" / "config.json").read_text())
    assert draft["hidden_size"] == cfg["text_config"]["hidden_size"]
    assert max(draft["dflash_config"]["target_layer_ids"]) < cfg["text_config"]["num_hidden_layers"]


# ------------------------------------------------------------------ random weights (make_weights.py)

torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it from the index or find-links pip is configured with")
import make_weights


def test_weight_table_is_transformers_own_parameter_list():
    """tests/fixtures/models/hf_param_shapes.json: transformers 5.6.0's state_dict names and shapes."""
    hf = json.loads((REPO / "tests" / "fixtures" / "models" / "hf_param_shapes.json").read_text())
    cfgs = make_models.model_configs((16,), ("dense-rw", "hybrid-rw"))
    for name in ("dense-rw", "hybrid-rw"):
        assert make_weights.param_shapes(cfgs[name]) == hf[name], name
    assert "lm_head.weight" in hf["hybrid-rw"] and "model.visual.merger.linear_fc2.weight" in hf["hybrid-rw"]


def test_tied_or_unknown_models_are_refused():
    with pytest.raises(ValueError, match="untied"):
        make_weights.param_shapes(make_models.model_configs()["target"])
    with pytest.raises(ValueError, match="no weight table"):
        make_weights.param_shapes({"architectures": ["Foo"]})


def test_per_parameter_seeds_are_independent_of_order_and_scaled():
    a = make_weights.make_tensor("model.layers.0.mlp.up_proj.weight", [64, 256], base_seed=3)
    b = make_weights.make_tensor("model.layers.0.mlp.up_proj.weight", [64, 256], base_seed=3)
    c = make_weights.make_tensor("model.layers.1.mlp.up_proj.weight", [64, 256], base_seed=3)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert abs(float(a.std()) - 1 / 16) < 0.01  # N(0, 1/fan_in)
    head = make_weights.make_tensor("lm_head.weight", [1000, 64])
    emb = make_weights.make_tensor("model.embed_tokens.weight", [1000, 64])
    assert not torch.equal(head, emb) and abs(float(head.std()) - 0.5) < 0.05  # untied, logits of ~4 sd
    a_log = make_weights.make_tensor("x.linear_attn.A_log", [1000])
    assert float(a_log.exp().min()) >= 0.05 - 1e-6 and float(a_log.exp().max()) <= 1.0 + 1e-6


def test_safetensors_round_trip(tmp_path):
    t = {"b.weight": torch.arange(6, dtype=torch.float32).view(2, 3), "a": torch.tensor([1.5, -2.0])}
    path = str(tmp_path / "m.safetensors")
    size = make_weights.save_safetensors(path, t)
    header = make_weights.read_safetensors_header(path)
    assert size == 32 and header["a"] == {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    assert header["b.weight"]["data_offsets"] == [8, 32] and header["__metadata__"] == {"format": "pt"}
    raw = pathlib.Path(path).read_bytes()
    start = 8 + int.from_bytes(raw[:8], "little")
    assert start % 8 == 0
    data = torch.frombuffer(bytearray(raw[start:]), dtype=torch.float32)
    assert data.tolist() == [1.5, -2.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_write_weights_fills_a_small_folder(tmp_path):
    cfg = make_models.dense_config(layers=1, hidden=16, heads=2, kv_heads=1, intermediate=32, tied=False)
    cfg.update(vocab_size=40, head_dim=8)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    info = make_weights.write_weights(str(tmp_path), base_seed=1, device="cpu")
    header = make_weights.read_safetensors_header(str(tmp_path / "model.safetensors"))
    assert set(header) - {"__metadata__"} == set(make_weights.param_shapes(cfg))
    assert info["params"] == len(header) - 1
    assert json.loads((tmp_path / "config.json").read_text())["torch_dtype"] == "float32"
