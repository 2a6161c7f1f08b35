"""The patch series against the real sglang 0.5.11 wheel from PyPI (downloaded once, cached, sha256-pinned).

Done-when of issue 5: the series applies cleanly, patched files compile, a second run changes nothing,
removing the series restores pristine checksums (the wheel's RECORD), a broken patch changes nothing
and names patch/file/hunk. Also: what the patches do, checked by running the patched code itself.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import stat
import sys
import types
from pathlib import Path

import pytest
from ansible.module_utils.dflash_tree import common, disk
from ansible.module_utils.dflash_tree import series as tree_series
from ansible.module_utils.dflash_tree import source as tree_source
from ansible.module_utils.dflash_tree import wheel as tree_wheel
from sglang_wheel import PATCH_DIR, pinned_sha256, sglang_wheel

SPEC_INFO = "sglang/srt/speculative/spec_info.py"
SERVER_ARGS = "sglang/srt/server_args.py"
# this patches: they register DDTREE and come first; the DDTree algorithm patches follow
# them in the series and replace the refusal hook with the worker (the budget rule stays: see
# tests/unit/tree/test_ddtree_patch.py), so the refusal is checked on the series prefix that ends with them.
REGISTRATION = ["0001-ddtree-register-algorithm.patch", "0002-ddtree-server-args.patch"]


@pytest.fixture(scope="session")
def wheel():
    return str(sglang_wheel())


@pytest.fixture(scope="session")
def series():
    return tree_series.read_series_dir(str(PATCH_DIR))


@pytest.fixture(scope="session")
def built(wheel, series, tmp_path_factory):
    """One tree built from the real wheel + the committed series, shared by the read-only tests."""
    trees = tmp_path_factory.mktemp("trees")
    plan = tree_wheel.plan_wheel(wheel, pinned_sha256(), series)
    try:
        result = disk.ensure_tree(plan, str(trees))
    finally:
        disk.close_plan(plan)
    assert result["changed"] is True
    return result


def tree_file(built, rel):
    return os.path.join(built["tree"]["path"], rel)


@pytest.fixture(scope="session")
def registration(wheel, series, tmp_path_factory):
    """The files as the registration patches leave them (dry run in memory, written out for import)."""
    assert [p["name"] for p in series[: len(REGISTRATION)]] == REGISTRATION
    plan = tree_wheel.plan_wheel(wheel, pinned_sha256(), series[: len(REGISTRATION)])
    disk.close_plan(plan)
    root = tmp_path_factory.mktemp("registration")
    for rel, data in plan["contents"].items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return {"tree": {"path": str(root)}, "manifest": plan["manifest"]}


def load_spec_info(tree, name):
    spec = importlib.util.spec_from_file_location(name, tree_file(tree, SPEC_INFO))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def snapshot(path):
    """Every entry under path with its inode, size and mtime: 'nothing changed' made checkable."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for fn in dirnames + filenames:
            full = os.path.join(dirpath, fn)
            st = os.lstat(full)
            out[os.path.relpath(full, path)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def build(wheel, patches, trees):
    plan = tree_wheel.plan_wheel(wheel, pinned_sha256(), patches)
    try:
        return disk.ensure_tree(plan, str(trees))
    finally:
        disk.close_plan(plan)


def test_the_series_applies_cleanly_to_the_pinned_wheel(built, series):
    m = built["manifest"]
    # the registration patches come first; the DDTree algorithm patches are appended after them
    assert [p["name"] for p in m["patches"]] == [p["name"] for p in series]
    assert [p["name"] for p in series] == [
        "0001-ddtree-register-algorithm.patch",
        "0002-ddtree-server-args.patch",
        "0101-ddtree-utils.patch",
        "0102-ddtree-worker.patch",
        "0103-ddtree-hybrid.patch",
        "0104-ddtree-step-launches.patch",
        "0105-ddtree-step-graphs.patch",
        "0106-ddtree-head-graph.patch",
        "0107-ddtree-build-kernel.patch",
        "0108-gdn-verify-block.patch",
        "0109-gdn-tree-paths.patch",
        "0110-ddtree-conv-parents.patch",
    ]
    assert m["sglang_version"] == "0.5.11"
    assert m["wheel"]["sha256"] == pinned_sha256()
    assert {SPEC_INFO, SERVER_ARGS} <= set(m["files"])
    wheel_record = tree_wheel.Wheel(sglang_wheel()).record
    for rel, entry in m["files"].items():
        assert entry["pristine_sha256"] == wheel_record.get(rel)  # None for a file the series adds
        assert entry["sha256"] != entry["pristine_sha256"]
        assert common.sha256_file(tree_file(built, rel)) == entry["sha256"]


def test_the_manifest_and_files_list_describe_the_tree(built):
    tree = built["tree"]["path"]
    on_disk = json.loads(Path(tree, "manifest.json").read_text())
    assert on_disk == built["manifest"]
    assert os.path.basename(tree) == on_disk["name"] == "sglang-0.5.11-" + on_disk["hash"][:12]
    listing = Path(tree, "FILES.sha256").read_text().splitlines()
    assert len(listing) == on_disk["file_count"] > 1800
    assert common.sha256_file(os.path.join(tree, "FILES.sha256")) == on_disk["tree_sha256"]
    fact = built["tree"]
    assert fact["path"] == tree and fact["source"] == "wheel"
    assert fact["patches"] == [{"name": p["name"], "sha256": p["sha256"]} for p in on_disk["patches"]]
    assert fact["files"] == {k: v["sha256"] for k, v in on_disk["files"].items()}
    # only the package: no dist-info, no top-level tools/ of the wheel, no bytecode
    assert sorted(os.listdir(tree)) == ["FILES.sha256", "manifest.json", "sglang"]
    assert not any("__pycache__" in row for row in listing)


def test_patched_files_compile_under_this_python(built):
    # the controller's Python is 3.11; the hosts' layer Python is 3.12 (gpu-harness/tree_check.sh)
    for rel in built["manifest"]["files"]:
        if rel.endswith(".py"):
            source = Path(tree_file(built, rel)).read_bytes()
            compile(source, rel, "exec", dont_inherit=True)


@pytest.fixture(scope="session")
def spec_info(registration):
    """spec_info.py as registered, executed for real (it imports only the standard library at runtime)."""
    return load_spec_info(registration, "registered_spec_info")


@pytest.mark.parametrize("which", ["registration", "built"])
def test_ddtree_counts_as_dflash(which, request):
    # with the registration patches alone and with the whole series (algorithm included)
    algo = load_spec_info(request.getfixturevalue(which), f"spec_info_{which}").SpeculativeAlgorithm
    assert algo.from_string("DDTREE") is algo.DDTREE
    assert algo.from_string("ddtree") is algo.DDTREE
    assert algo.DDTREE.is_dflash() and algo.DDTREE.is_ddtree() and algo.DDTREE.is_speculative()
    assert algo.DFLASH.is_dflash() and not algo.DFLASH.is_ddtree()
    assert not algo.DDTREE.is_eagle() and not algo.DDTREE.supports_spec_v2()
    # members appended: the others keep their values
    assert [a.name for a in algo][:6] == ["DFLASH", "EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "NONE"]


def test_ddtree_refuses_to_start_until_the_algorithm_lands(spec_info):
    args = types.SimpleNamespace(disable_overlap_schedule=True, enable_multi_layer_eagle=False)
    with pytest.raises(ValueError, match="DDTREE tree verification is not in this patch series yet"):
        spec_info.SpeculativeAlgorithm.DDTREE.create_worker(args)
    args.disable_overlap_schedule = False
    with pytest.raises(ValueError, match="DDTREE does not support overlap scheduling"):
        spec_info.SpeculativeAlgorithm.DDTREE.create_worker(args)


def _server_args_ast(built):
    return ast.parse(Path(tree_file(built, SERVER_ARGS)).read_bytes())


@pytest.mark.parametrize("which", ["registration", "built"])
def test_server_args_declares_the_ddtree_fields_and_flags(which, request):
    tree = _server_args_ast(request.getfixturevalue(which))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    fields = {
        n.target.id: ast.literal_eval(n.value)
        for n in cls.body
        if isinstance(n, ast.AnnAssign)
        and isinstance(n.target, ast.Name)
        and n.value is not None
        and n.target.id.startswith("speculative_ddtree")
    }
    assert fields == {
        "speculative_ddtree_budget": 15,
        "speculative_ddtree_topk": 8,
        "speculative_ddtree_mode": "tree",
    }
    flags = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant)]
            kw = {k.arg: k.value for k in node.keywords}
            for name in names:
                flags[name] = kw
    assert "DDTREE" in ast.literal_eval(flags["--speculative-algorithm"]["choices"])
    assert ast.unparse(flags["--speculative-ddtree-budget"]["type"]) == "int"
    assert ast.unparse(flags["--speculative-ddtree-topk"]["type"]) == "int"
    assert ast.unparse(flags["--speculative-ddtree-mode"]["choices"]) == "DDTREE_MODE_CHOICES"
    for flag, field in [("budget", "budget"), ("topk", "topk"), ("mode", "mode")]:
        assert (
            ast.unparse(flags[f"--speculative-ddtree-{flag}"]["default"])
            == f"ServerArgs.speculative_ddtree_{field}"
        )


@pytest.fixture()
def ddtree_validator(registration, spec_info, monkeypatch):
    """ServerArgs._handle_ddtree_args from the patched server_args.py, run on a stand-in `self`.

    server_args.py needs torch/transformers to import; the method itself only needs
    DDTREE_MODE_CHOICES and the spec_info hook, so it is compiled out of the real file and run.
    """
    tree = _server_args_ast(registration)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    func = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_handle_ddtree_args")
    choices = next(
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "DDTREE_MODE_CHOICES"
    )
    module = ast.Module(body=[choices, func], type_ignores=[])
    namespace: dict = {}
    exec(compile(module, SERVER_ARGS, "exec"), namespace)  # noqa: S102 - the patched method itself
    for name in ("sglang", "sglang.srt", "sglang.srt.speculative"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.speculative.spec_info", spec_info)

    def run(budget=15, topk=8, mode="tree", block=16):
        args = types.SimpleNamespace(
            speculative_ddtree_budget=budget,
            speculative_ddtree_topk=topk,
            speculative_ddtree_mode=mode,
            speculative_num_draft_tokens=block,
        )
        namespace["_handle_ddtree_args"](args)
        return args

    return run


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"budget": 16, "block": 16},
            (
                "budget + 1 must not exceed the block size. Use --speculative-ddtree-budget 15 or less, "
                "or a DFlash draft trained with a block_size of at least 17."
            ),
        ),
        ({"budget": 8, "block": 8}, "--speculative-ddtree-budget=8 does not fit the DFlash block size 8"),
        ({"budget": 31, "block": 16}, "--speculative-ddtree-budget=31 does not fit the DFlash block size 16"),
        ({"budget": 0}, "DDTREE requires --speculative-ddtree-budget >= 1, got 0."),
        ({"topk": 0}, "DDTREE requires --speculative-ddtree-topk >= 1, got 0."),
        ({"topk": "many"}, "DDTREE requires --speculative-ddtree-topk to be an integer, got 'many'."),
        ({"mode": "bushy"}, "--speculative-ddtree-mode to be one of tree, shadow-linear, got 'bushy'."),
    ],
)
def test_bad_ddtree_values_get_clear_messages(ddtree_validator, kwargs, message):
    with pytest.raises(ValueError) as err:
        ddtree_validator(**kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"budget": 15, "block": 16},
        {"budget": 31, "block": 32},
        {"budget": 1, "topk": 1},
        {"mode": "shadow-linear"},
    ],
)
def test_good_ddtree_values_pass_validation_then_meet_the_refusal(ddtree_validator, kwargs):
    with pytest.raises(ValueError, match="DDTREE tree verification is not in this patch series yet"):
        ddtree_validator(**kwargs)


def test_a_second_run_changes_nothing(built, wheel, series):
    tree = built["tree"]["path"]
    parent = os.path.dirname(tree)
    before = snapshot(parent)
    again = build(wheel, series, parent)
    assert again["changed"] is False
    assert again["reason"].startswith("already in place")
    assert again["tree"] == built["tree"]
    assert snapshot(parent) == before


def test_removing_the_series_gives_back_pristine_files(wheel, series, tmp_path):
    patched = build(wheel, series, tmp_path)
    assert patched["changed"]
    pristine = build(wheel, [], tmp_path)
    assert pristine["changed"] and pristine["tree"]["path"] != patched["tree"]["path"]
    record = tree_wheel.Wheel(wheel).record
    found = disk.scan_tree(pristine["tree"]["path"])
    # every file, the formerly patched ones included, is byte-identical to the wheel's RECORD
    assert found == {p: h for p, h in record.items() if p.startswith("sglang/")}
    assert pristine["manifest"]["patches"] == [] and pristine["manifest"]["files"] == {}
    # keeping only the first patch: the files only later patches touched are pristine again
    partial = build(wheel, series[:1], tmp_path)
    found = disk.scan_tree(partial["tree"]["path"])
    assert found[SERVER_ARGS] == record[SERVER_ARGS]
    assert found[SPEC_INFO] == partial["manifest"]["files"][SPEC_INFO]["sha256"] != record[SPEC_INFO]
    assert set(partial["manifest"]["files"]) == {SPEC_INFO}
    # the patched tree is still there for the releases that use it (pruning is the release role's)
    assert disk.verify_tree(patched["tree"]["path"]) == (True, "matches its manifest")


def _break(series, index, old, new):
    broken = [dict(p) for p in series]
    content = broken[index]["content"]
    assert content.count(old) == 1
    broken[index]["content"] = content.replace(old, new)
    broken[index]["sha256"] = common.sha256_bytes(broken[index]["content"])
    return broken


def test_a_broken_patch_changes_nothing_and_names_patch_file_hunk(built, wheel, series):
    parent = os.path.dirname(built["tree"]["path"])
    before = snapshot(parent)
    # a removed line of 0002 that the real server_args.py does not have
    broken = _break(
        series, 1, b'\n-            choices=["DFLASH", "EAGLE"', b'\n-            choices=["DFLASH", "EAGLE2"'
    )
    with pytest.raises(common.PatchError) as err:
        build(wheel, broken, parent)
    e = err.value
    assert e.patch == "0002-ddtree-server-args.patch"
    assert e.file == SERVER_ARGS
    assert e.hunk is not None and e.header.startswith("@@ -")
    assert f"patch 0002-ddtree-server-args.patch, file {SERVER_ARGS}, hunk #{e.hunk} ({e.header})" in str(e)
    assert "the file has" in str(e)
    assert snapshot(parent) == before


def test_a_patch_for_a_missing_file_changes_nothing(built, wheel, series):
    parent = os.path.dirname(built["tree"]["path"])
    before = snapshot(parent)
    bad = {
        "name": "0099-ghost.patch",
        "content": b"--- a/sglang/ghost.py\n+++ b/sglang/ghost.py\n@@ -1 +1 @@\n-a\n+b\n",
    }
    bad["sha256"] = common.sha256_bytes(bad["content"])
    with pytest.raises(
        common.PatchError, match="patch 0099-ghost.patch, file sglang/ghost.py: file does not exist"
    ):
        build(wheel, [*series, bad], parent)
    assert snapshot(parent) == before


def test_a_wheel_that_is_not_the_pinned_one_is_refused(wheel, series, tmp_path):
    with pytest.raises(common.TreeError, match="refusing to use it"):
        tree_wheel.plan_wheel(wheel, "0" * 64, series)


def test_a_tampered_tree_is_rebuilt_and_leftovers_are_cleaned(wheel, series, tmp_path):
    first = build(wheel, series, tmp_path)
    tree = first["tree"]["path"]
    target = os.path.join(tree, SPEC_INFO)
    with open(target, "ab") as f:
        f.write(b"# hand edit\n")
    os.makedirs(os.path.join(tmp_path, ".tmp-sglang-0.5.11-interrupted"))
    ok, reason = disk.verify_tree(tree)
    assert not ok and SPEC_INFO in reason
    again = build(wheel, series, tmp_path)
    assert again["changed"] and again["reason"].startswith("rebuild: files differ")
    assert common.sha256_file(target) == first["manifest"]["files"][SPEC_INFO]["sha256"]
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(tree)]
    # bytecode written next to the sources by Python at run time is not a difference
    os.makedirs(os.path.join(tree, "sglang", "__pycache__"))
    open(os.path.join(tree, "sglang", "__pycache__", "x.cpython-312.pyc"), "wb").close()
    assert build(wheel, series, tmp_path)["changed"] is False


def test_check_mode_reports_without_writing(wheel, series, tmp_path):
    plan = tree_wheel.plan_wheel(wheel, pinned_sha256(), series)
    try:
        result = disk.ensure_tree(plan, str(tmp_path), check_mode=True)
    finally:
        disk.close_plan(plan)
    assert result["changed"] and result["reason"] == "build: absent"
    assert os.listdir(tmp_path) == []


def test_a_user_source_tree_is_shipped_as_is_without_bytecode(built, tmp_path):
    # a user's checkout (repository layout) with their own edit and stale bytecode lying around
    src = tmp_path / "checkout"
    shutil.copytree(os.path.join(built["tree"]["path"], "sglang"), src / "python" / "sglang")
    edited = src / "python" / SPEC_INFO
    edited.write_bytes(edited.read_bytes() + b"# user change\n")
    (src / "python" / "sglang" / "srt" / "__pycache__").mkdir()
    (src / "python" / "sglang" / "srt" / "__pycache__" / "server_args.cpython-312.pyc").write_bytes(b"stale")
    packed = tree_source.pack_src(str(src), str(tmp_path / "out"))
    assert packed["changed"] and packed["sglang_version"] == "0.5.11"
    assert tree_source.pack_src(str(src), str(tmp_path / "out"))["changed"] is False
    plan = tree_source.plan_src_archive(packed["archive"], packed["content_sha256"], str(src))
    result = disk.ensure_tree(plan, str(tmp_path / "trees"))
    tree = result["tree"]["path"]
    assert result["changed"] and result["tree"]["source"] == "src"
    assert result["tree"]["files"][SPEC_INFO] == common.sha256_file(os.path.join(tree, SPEC_INFO))
    assert not any("__pycache__" in p for p in disk.scan_tree(tree))
    assert not os.path.exists(os.path.join(tree, "sglang", "srt", "__pycache__"))
    assert disk.ensure_tree(plan, str(tmp_path / "trees"))["changed"] is False
    with pytest.raises(common.TreeError, match="content sha256"):
        tree_source.plan_src_archive(packed["archive"], "0" * 64)


def test_the_tree_is_readable_by_the_service_user_whatever_the_umask(wheel, series, tmp_path):
    old = os.umask(0o077)
    try:
        tree = build(wheel, series, tmp_path)["tree"]["path"]
    finally:
        os.umask(old)
    modes = {
        stat.S_IMODE(os.stat(os.path.join(d, n)).st_mode) for d, ds, fs in os.walk(tree) for n in ds + fs
    }
    assert stat.S_IMODE(os.stat(tree).st_mode) == 0o755
    assert modes <= {0o755, 0o644}
