"""The DDTree patches (0101-0106) after the series' registration patches, on the pinned wheel.

Checks what can be checked without a GPU build of sglang: the series applies (with
module_utils/dflash_tree/), every file the DDTree patches touch compiles, the worker hook
in spec_info.py now hands out the DDTREE worker instead of refusing, ServerArgs' DDTREE
handling (compiled out of the patched server_args.py and run on a stand-in) keeps 0002's rule
(budget + 1 must not exceed the draft's block size, with a message naming both numbers and
both fixes), sets the verify width to budget + 1 and keeps the draft's block size, and the
ddtree_utils.py the series installs is the one test_ddtree_utils.py tests.
"""

from __future__ import annotations

import ast
import importlib.util
import py_compile
import sys
import types
from pathlib import Path

import pytest
from ansible.module_utils.dflash_tree import common, diff, series
from ansible.module_utils.dflash_tree import wheel as tree_wheel

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests"))
SPEC = "sglang/srt/speculative"
DDTREE_FILES = [
    f"{SPEC}/ddtree_utils.py",
    f"{SPEC}/ddtree_device.py",
    f"{SPEC}/ddtree_hybrid.py",
    f"{SPEC}/ddtree_worker.py",
    f"{SPEC}/dflash_worker.py",
    f"{SPEC}/spec_info.py",
    "sglang/srt/server_args.py",
    "sglang/srt/model_executor/cuda_graph_runner.py",
    "sglang/srt/layers/attention/hybrid_linear_attn_backend.py",
]


DDTREE_PATCHES = ("0101-ddtree-utils.patch", "0102-ddtree-worker.patch", "0103-ddtree-hybrid.patch",
                  "0104-ddtree-step-launches.patch", "0105-ddtree-step-graphs.patch",
                  "0106-ddtree-head-graph.patch", "0107-ddtree-build-kernel.patch", "0108-gdn-verify-block.patch",
                  "0109-gdn-tree-paths.patch", "0110-ddtree-conv-parents.patch")  # fmt: skip


def ddtree_series(patch_dir):
    """The committed series, plus the DDTree patches appended if the series does not list them yet."""
    patches = series.read_series_dir(str(patch_dir))
    listed = {p["name"] for p in patches}
    for name in DDTREE_PATCHES:
        if name not in listed:
            content = (Path(patch_dir) / name).read_bytes()
            patches.append({"name": name, "content": content, "sha256": common.sha256_bytes(content)})
    return patches


def series_texts(rels, exclude=()):
    """relpath -> text of each file after the committed series (less the patches named in `exclude`) is
    applied to the pinned wheel (the wheel's own text for a file the series does not touch)."""
    sglang_wheel = pytest.importorskip("sglang_wheel")
    wheel = tree_wheel.Wheel(str(sglang_wheel.sglang_wheel()), sglang_wheel.pinned_sha256())
    try:
        patches = [p for p in ddtree_series(sglang_wheel.PATCH_DIR) if p["name"] not in set(exclude)]
        contents, _, _ = diff.apply_series(wheel.read, patches)
        return {rel: (contents.get(rel) if contents.get(rel) is not None else wheel.read(rel)).decode("utf-8")
                for rel in rels}  # fmt: skip
    finally:
        wheel.close()


def load_text(text, directory, name):
    """Import `text` (a file of the patched tree, from series_texts) as module `name`, written into `directory`."""
    path = Path(directory) / f"{name}.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    sglang_wheel = pytest.importorskip("sglang_wheel")
    wheel = tree_wheel.Wheel(str(sglang_wheel.sglang_wheel()), sglang_wheel.pinned_sha256())
    try:
        patches = ddtree_series(sglang_wheel.PATCH_DIR)
        contents, _, touched = diff.apply_series(wheel.read, patches)
    finally:
        wheel.close()
    root = tmp_path_factory.mktemp("ddtree-tree")
    for rel, data in contents.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return types.SimpleNamespace(root=root, touched=touched, names=[p["name"] for p in patches])


def test_ddtree_patches_come_after_registration_and_touch_their_files(patched):
    names = patched.names
    assert names.index("0101-ddtree-utils.patch") > names.index("0002-ddtree-server-args.patch")
    assert names.index("0102-ddtree-worker.patch") > names.index("0101-ddtree-utils.patch")
    assert names.index("0103-ddtree-hybrid.patch") > names.index("0102-ddtree-worker.patch")
    assert names.index("0104-ddtree-step-launches.patch") > names.index("0103-ddtree-hybrid.patch")
    assert names.index("0105-ddtree-step-graphs.patch") > names.index("0104-ddtree-step-launches.patch")
    assert names.index("0106-ddtree-head-graph.patch") > names.index("0105-ddtree-step-graphs.patch")
    assert names.index("0107-ddtree-build-kernel.patch") > names.index("0106-ddtree-head-graph.patch")
    for rel in DDTREE_FILES:
        assert any(p.startswith("01") for p in patched.touched[rel]), rel


@pytest.mark.parametrize("rel", DDTREE_FILES)
def test_patched_files_compile(patched, rel, tmp_path):
    py_compile.compile(str(patched.root / rel), cfile=str(tmp_path / "x.pyc"), doraise=True)


def test_installed_ddtree_utils_is_the_tested_one(patched):
    from test_ddtree_device import DEVICE_TARGET
    from test_ddtree_utils import PATCH, TARGET, new_file_from_patch

    for rel in (TARGET, DEVICE_TARGET):  # what test_ddtree_utils.py / test_ddtree_device.py test
        assert (patched.root / rel).read_text(encoding="utf-8") == new_file_from_patch(PATCH, rel)


def test_worker_hook_returns_the_ddtree_worker(patched, monkeypatch):
    spec = importlib.util.spec_from_file_location("ddtree_spec_info", patched.root / f"{SPEC}/spec_info.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    marker = type("DDTreeWorker", (), {})
    for name in ("sglang", "sglang.srt", "sglang.srt.speculative"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(
        sys.modules,
        "sglang.srt.speculative.ddtree_worker",
        types.SimpleNamespace(DDTreeWorker=marker),
    )
    args = types.SimpleNamespace(disable_overlap_schedule=True, enable_multi_layer_eagle=False)
    assert mod.SpeculativeAlgorithm.DDTREE.create_worker(args) is marker
    assert not hasattr(mod, "DDTREE_NOT_AVAILABLE")
    args.disable_overlap_schedule = False
    with pytest.raises(ValueError, match="overlap"):
        mod.SpeculativeAlgorithm.DDTREE.create_worker(args)


@pytest.fixture()
def handle(patched):
    """ServerArgs._handle_ddtree_args from the patched file, run on a stand-in `self`."""
    tree = ast.parse((patched.root / "sglang/srt/server_args.py").read_bytes())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    func = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_handle_ddtree_args")
    choices = next(
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "DDTREE_MODE_CHOICES"
    )
    ns: dict = {}
    exec(compile(ast.Module(body=[choices, func], type_ignores=[]), "server_args.py", "exec"), ns)  # noqa: S102

    def run(budget=15, topk=8, mode="tree", block=16, args=None):
        if args is None:
            args = types.SimpleNamespace(
                speculative_ddtree_budget=budget,
                speculative_ddtree_topk=topk,
                speculative_ddtree_mode=mode,
                speculative_num_draft_tokens=block,
            )
        ns["_handle_ddtree_args"](args)
        return args

    return run


@pytest.mark.parametrize(("budget", "block"), [(15, 16), (7, 16), (31, 32), (1, 2), (3, 16)])
def test_verify_width_is_budget_plus_one_and_the_draft_keeps_its_block(handle, budget, block):
    args = handle(budget=budget, block=block)
    assert args.speculative_num_draft_tokens == budget + 1 <= block
    assert args.speculative_ddtree_draft_block_size == block
    # running the handler again on the resolved arguments changes nothing
    before = dict(vars(args))
    assert vars(handle(args=args)) == before


@pytest.mark.parametrize(("budget", "block"), [(16, 16), (31, 16), (17, 16), (8, 8), (1, 1)])
def test_a_budget_wider_than_the_draft_block_is_refused(handle, budget, block):
    """The lead's rule (issues 5 and 6): the verify block, budget + 1, fits the draft's block."""
    with pytest.raises(ValueError) as err:
        handle(budget=budget, block=block)
    message = str(err.value)
    assert f"--speculative-ddtree-budget={budget} does not fit the DFlash block size {block}" in message
    assert "budget + 1 must not exceed the block size" in message
    assert f"Use --speculative-ddtree-budget {block - 1} or less" in message
    assert f"or a DFlash draft trained with a block_size of at least {budget + 1}" in message


def test_the_rule_holds_on_a_second_run_against_the_draft_block(handle):
    # resolved once (width 16 from a 16-block draft), then asked for a wider budget: the
    # recorded draft block, not the verify width, is what the budget must fit
    args = handle(budget=15, block=16)
    args.speculative_ddtree_budget = 16
    with pytest.raises(ValueError, match="budget=16 does not fit the DFlash block size 16"):
        handle(args=args)


def test_the_worker_checks_the_rule_again(patched):
    """DDTreeWorker.__init__ refuses budget + 1 above the draft block before any model loads."""
    source = (patched.root / f"{SPEC}/ddtree_worker.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DDTreeWorker")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    first_super = min(
        n.lineno
        for n in ast.walk(init)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "__init__"
    )
    checks = [
        n
        for n in ast.walk(init)
        if isinstance(n, ast.If) and ast.unparse(n.test) == "budget + 1 > int(block_size)"
    ]
    assert len(checks) == 1 and checks[0].lineno < first_super
    raised = ast.unparse(checks[0].body[0])
    assert "ValueError" in raised and "block_size of at least" in raised


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget": 0}, "--speculative-ddtree-budget >= 1, got 0"),
        ({"budget": 256}, "--speculative-ddtree-budget=256 does not fit the DFlash block size 16"),
        ({"topk": 0}, "--speculative-ddtree-topk >= 1, got 0"),
        ({"mode": "bushy"}, "got 'bushy'"),
    ],
)
def test_bad_values_are_refused_with_the_flag_named(handle, kwargs, message):
    with pytest.raises(ValueError) as err:
        handle(**kwargs)
    assert message in str(err.value)


def test_hybrid_links_are_built_in_the_tree_graph(patched):
    """0104: the worker hands tree_retrieve_links to TreeBuilder for hybrid targets (so the links are part
    of the captured build) and makes them itself only when the tree has none (the host reference's)."""
    tree = ast.parse((patched.root / f"{SPEC}/ddtree_worker.py").read_text(encoding="utf-8"))
    builders = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "TreeBuilder"]
    assert [k.arg for b in builders for k in b.keywords if k.arg == "links"] == ["links"]
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.If) and any(
        isinstance(c, ast.Call) and getattr(c.func, "id", "") == "tree_retrieve_links" for c in ast.walk(n))]  # fmt: skip
    innermost = max(calls, key=lambda n: n.lineno)  # the call's own `if` (inside `if self.hybrid_target:`)
    assert ast.unparse(innermost.test) == "nxt is None" and len(calls) == 2
    links_assign = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "links"]
    assert [ast.unparse(n.value) for n in links_assign] == ["tree_retrieve_links if self.hybrid_target else None"]


def test_the_walk_graph_is_on_by_default_and_the_mask_uses_the_build_index(patched):
    """0105: verify walks through the worker's TreeBuilder.walk; 0106: its graph is on unless
    SGLANG_DDTREE_WALK_GRAPH=0 (and graphs are on); the step's mask takes the build's index."""
    src = (patched.root / f"{SPEC}/ddtree_worker.py").read_text(encoding="utf-8")
    tree = ast.parse(src)
    assigns = {ast.unparse(n.targets[0]): ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)}
    assert assigns["walk_graphs"] == "use_graphs and os.environ.get(WALK_GRAPH_ENV, '1') != '0'"
    assert assigns["WALK_GRAPH_ENV"] == "'SGLANG_DDTREE_WALK_GRAPH'"
    assert "walker=self._tree_builder.walk" in src and "index=tree.mask_index" in src
    assert "(self.walker or accept_and_fetch)(tree, predict.view(bs, width))" in src


def _calls(node, name):
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and ast.unparse(n.func) == name]


def _function(tree, name):
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def test_the_draft_head_and_the_oracles_run_through_graphed_calls(patched):
    """0106: the DDTREE head's single-chunk, single-rank path and both test-only oracles go through a
    GraphedCalls (one graph replay each on CUDA), keyed by what they bake in; the chunked TP path stays."""
    worker = ast.parse((patched.root / f"{SPEC}/ddtree_worker.py").read_text(encoding="utf-8"))
    head = _function(worker, "_topk_from_vocab_parallel_head")
    graphed = _calls(head, "self._head_graphs")
    assert len(graphed) == 1 and "topk_logprobs(h, local_w, local_ids, k_local)" in ast.unparse(graphed[0].args[0])
    guard = next(n for n in ast.walk(head) if isinstance(n, ast.If) and graphed[0] in list(ast.walk(n)))
    assert ast.unparse(guard.test) == "tp_size == 1 and num_added == 0 and (int(hidden_states.shape[0]) <= HEAD_GRAPH_ROWS)"
    consts = {ast.unparse(n.targets[0]): ast.unparse(n.value) for n in worker.body if isinstance(n, ast.Assign)}
    assert consts["HEAD_GRAPH_ROWS"] == "64"  # 4 requests at budget 15; bigger steps run the eager chunks
    keys = [ast.unparse(n.value) for n in ast.walk(head) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "key"]
    assert ast.unparse(graphed[0].args[2]) == "key" and any(k.startswith("('head', local_w.data_ptr()") for k in keys)
    assert _calls(head, "tp_group.all_gather_into_tensor")  # the TP path is still there, eager
    oracle = _calls(_function(worker, "_prepare_for_speculative_decoding"), "self._head_graphs")
    assert len(oracle) == 1 and "apply_oracle_topk_device(a, b, t, ranks, profile)" in ast.unparse(oracle[0])
    dflash = ast.parse((patched.root / f"{SPEC}/dflash_worker.py").read_text(encoding="utf-8"))
    steer = _calls(_function(dflash, "_oracle_steer_linear"), "self._oracle_graphs")
    assert len(steer) == 1 and "apply_oracle_linear_device(d, t, ranks, vocab)" in ast.unparse(steer[0])
    # the draft phase is timed in two parts (block_ms, head_ms) on both sides
    for tree in (worker, dflash):
        assert len(_calls(_function(tree, "_prepare_for_speculative_decoding"), "self._timing_block")) == 1


def test_the_build_kernel_is_on_by_default_where_it_can_run(patched):
    """0107: the worker asks TreeBuilder for the build kernel unless SGLANG_DDTREE_BUILD_KERNEL=0, and
    only where build_kernel_usable says it runs (Triton, CUDA, budget + 1 <= 64); the log says so."""
    src = (patched.root / f"{SPEC}/ddtree_worker.py").read_text(encoding="utf-8")
    tree = ast.parse(src)
    assigns = {ast.unparse(n.targets[0]): ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)}
    assert assigns["BUILD_KERNEL_ENV"] == "'SGLANG_DDTREE_BUILD_KERNEL'"
    assert assigns["kernel"] == (
        "os.environ.get(BUILD_KERNEL_ENV, '1') != '0' and build_kernel_usable(self.device, width)"
    )
    builders = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "TreeBuilder"]
    assert len(builders) == 1
    assert {k.arg: ast.unparse(k.value) for k in builders[0].keywords}["kernel"] == "kernel"
    assert "+ build kernel" in src
