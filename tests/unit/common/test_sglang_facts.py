"""The sglang facts (module_utils/dflash_common/sglang.py) against the pinned wheel's own source, and their readers:
the fallback rules' context, the validation and the diagnosis name the same backends."""

import ast
import zipfile

import pytest
from ansible.module_utils.dflash_common import sglang
from ansible.module_utils.dflash_diagnose import rules_startup
from ansible.module_utils.dflash_instances import model, rules
from sglang_wheel import PATCH_DIR, SGLANG_VERSION, sglang_wheel


@pytest.fixture(scope="module")
def server_args():
    with zipfile.ZipFile(sglang_wheel()) as z:
        return z.read("sglang/srt/server_args.py").decode()


def _assigned(tree, name):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(getattr(t, "id", None) == name for t in targets):
                return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not assigned in server_args.py")


def test_the_facts_are_the_pinned_wheels(server_args):
    assert sglang.VERSION == SGLANG_VERSION
    tree = ast.parse(server_args)
    assert list(sglang.ATTENTION_BACKENDS) == _assigned(tree, "ATTENTION_BACKEND_CHOICES")
    port = next(n for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "port")
    assert ast.literal_eval(port.value) == sglang.DEFAULT_PORT
    # the Hopper default of _get_default_attn_backend
    default = server_args[server_args.index("def _get_default_attn_backend"):]
    assert f'return "{sglang.HOPPER_DEFAULT_ATTENTION}"' in default[:default.index("is_flashinfer_available")]
    for arch in sglang.NO_TRITON_ATTENTION_ARCHS:
        branch = server_args[server_args.index(f'"{arch}"'):]
        assert "does not support triton attention backend" in branch[:3000], arch
    assert set(sglang.TREE_MASK_ATTENTION_BACKENDS) <= set(sglang.ATTENTION_BACKENDS)


def test_the_tree_mask_backends_are_the_patch_series(server_args):
    """Patch 0102 names the backend classes whose verify takes a tree mask; sglang's attention registry says which
    --attention-backend value builds each."""
    patch = (PATCH_DIR / "0102-ddtree-worker.patch").read_text()
    line = next(ln for ln in patch.splitlines() if ln.startswith("+DDTREE_TREE_MASK_BACKENDS = "))
    classes = ast.literal_eval(line.split("=", 1)[1].strip())
    with zipfile.ZipFile(sglang_wheel()) as z:
        registry = z.read("sglang/srt/layers/attention/attention_registry.py").decode()
    built = {}
    for part in registry.split("@register_attention_backend(")[1:]:
        name = ast.literal_eval(part[:part.index(")")])
        built[name] = [c for c in classes if f"import {c}" in part]
    assert sorted(c for b in sglang.TREE_MASK_ATTENTION_BACKENDS for c in built[b]) == sorted(classes)


def test_rules_validation_and_diagnosis_read_the_same_backends():
    ctx = rules.sglang_facts()
    assert ctx["sglang.tree_mask_attention"] == "triton or flashinfer"
    assert ctx["sglang.tree_mask_attention_backends"] == list(sglang.TREE_MASK_ATTENTION_BACKENDS)
    facts = {"architecture": sglang.NO_TRITON_ATTENTION_ARCHS[0]}
    errs = model.attention_backend_errors({"algorithm": "DDTREE", "extra_args": [], "pin_flags": {}}, facts)
    assert errs and "(triton or flashinfer)" in errs[0][1] and "{'--attention-backend': flashinfer}" in errs[0][1]
    row = next(r for r in rules_startup.ROWS if r[0] == "ddtree_tree_mask_backend")
    assert "(triton or flashinfer)" in row[4]
    # a backend sglang does not know is refused at validation, naming what it accepts
    bad = model.attention_backend_errors({"algorithm": "DFLASH", "extra_args": ["--attention-backend", "fa9"]}, {})
    assert bad == [("extra_args", f"--attention-backend fa9: sglang {sglang.VERSION} accepts "
                                  + sglang.either(sglang.ATTENTION_BACKENDS))]
