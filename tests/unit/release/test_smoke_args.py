"""The arguments dflash_smoke and dflash_wait share come from module_utils/dflash_release/smoke.py: they agree
with each module's DOCUMENTATION, and the release_dir/names/instances handling is one function."""

import ast
import json
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.dflash_release import smoke as s
from ansible.module_utils.dflash_release import target as rtarget

ROOT = Path(__file__).resolve().parents[3]


def documented_options(module):
    tree = ast.parse((ROOT / "library" / f"{module}.py").read_text())
    doc = next(n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "DOCUMENTATION")
    options = yaml.safe_load(doc)["options"]
    for name in yaml.safe_load(doc).get("extends_documentation_fragment") or []:  # doc_fragments/<name>.py
        frag = ast.parse((ROOT / "doc_fragments" / f"{name}.py").read_text())
        cls = next(n for n in frag.body if isinstance(n, ast.ClassDef))
        text = next(n.value.value for n in cls.body if isinstance(n, ast.Assign) and n.targets[0].id == "DOCUMENTATION")
        options.update(yaml.safe_load(text)["options"])
    return options


@pytest.mark.parametrize(("module", "timeout_key"), [("dflash_smoke", "timeout"), ("dflash_wait", "smoke_timeout")])
def test_shared_specs_match_each_modules_documentation(module, timeout_key):
    docs = documented_options(module)
    shared = {**rtarget.target_argument_spec(), **rtarget.smoke_argument_spec(timeout_key), **rtarget.gate_argument_spec()}
    if module == "dflash_smoke":
        assert set(docs) == set(shared)
    for name, spec in shared.items():
        assert docs[name]["type"] == spec["type"], (module, name)
        assert docs[name].get("elements") == spec.get("elements"), (module, name)
        assert docs[name].get("default") == spec.get("default"), (module, name)


def test_specs_are_fresh_dicts():
    a, b = rtarget.target_argument_spec(), rtarget.target_argument_spec()
    a["host"]["default"] = "changed"
    assert b["host"]["default"] == "" and rtarget.target_argument_spec()["host"]["default"] == ""
    assert rtarget.target_constraints() == {"required_one_of": [("instances", "release_dir")],
                                      "mutually_exclusive": [("instances", "release_dir")]}


def test_smoke_options_take_the_named_timeout():
    params = {"prompt": "p", "max_tokens": 8, "temperature": 0.0, "timeout": 900.0, "smoke_timeout": 5.0,
              "spec_max_new_tokens": 4}
    assert rtarget.smoke_options(params, "smoke_timeout") == {"prompt": "p", "max_tokens": 8, "temperature": 0.0,
                                                        "timeout": 5.0, "spec_max_new_tokens": 4}
    assert rtarget.smoke_options(params)["timeout"] == 900.0


def test_target_instances_from_list_or_release(tmp_path):
    listed = [{"name": "a", "port": 1}]
    assert rtarget.target_instances({"instances": listed, "release_dir": None, "names": None}) is listed
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"id": "r1", "instances": {"a": {"args": ["--port", "1"]}, "b": {"unit": "x.service"}}}))
    rel = {"instances": None, "release_dir": str(tmp_path), "names": None}
    assert [i["name"] for i in rtarget.target_instances(rel)] == ["a", "b"]
    assert rtarget.target_instances(dict(rel, names=["b"])) == [
        {"name": "b", "unit": "x.service", "args": [], "port": None, "base_url": "http://127.0.0.1:30000"}]
    with pytest.raises(s.SmokeError, match=r"release r1: no instance c \(it has: a, b\)"):
        rtarget.target_instances(dict(rel, names=["c"]))
    with pytest.raises(s.SmokeError, match="manifest.json"):
        rtarget.target_instances(dict(rel, release_dir=str(tmp_path / "none")))


def test_check_named():
    rtarget.check_named([{"name": "a"}])
    with pytest.raises(s.SmokeError, match=r"^instances\[1\]: name is required$"):
        rtarget.check_named([{"name": "a"}, {"args": []}])
