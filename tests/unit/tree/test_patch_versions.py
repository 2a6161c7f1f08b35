"""The bar every supported sglang version's patch series must clear, on its real PyPI wheel.

For each folder files/patches/sglang/<version>/ with a series and PyPI's digests (wheels.json): the
wheel is downloaded once (cached in .cache/wheels, its sha256 checked against wheels.json), the series
applies to it, every file it touches compiles, DDTREE is visible in the patched tree's speculative
algorithms (0.5.11: a member of the SpeculativeAlgorithm enum; from 0.5.17: registered through
sglang's spec_registry, resolved by SpeculativeAlgorithm.from_string and answering as DFlash), the
version's committed server-flags.txt is the patched parser's flag table (with the DDTREE flags), a
second build changes nothing and an empty series gives back the wheel's own files. 0.5.11 has its
own, deeper checks in test_patch_sglang.py; this file holds every version to the same bar.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.dflash_tree import common as tree_common
from ansible.module_utils.dflash_tree import disk as tree_disk
from ansible.module_utils.dflash_tree import wheel as tree_wheel
from sglang_trees import built_tree, registry_stand_ins, series, sglang_modules
from sglang_wheel import REPO_ROOT, patch_dir, pinned_sha256, sglang_wheel, versions

VERSIONS = versions()
SPEC = "sglang/srt/speculative"
# the algorithm's pure parts: the same files in every version's tree (their CPU tests: test_ddtree_*.py)
SHARED = (f"{SPEC}/ddtree_utils.py", f"{SPEC}/ddtree_device.py", f"{SPEC}/ddtree_hybrid.py")
DDTREE_FLAGS = {
    "--speculative-ddtree-budget": ("speculative_ddtree_budget", "value"),
    "--speculative-ddtree-topk": ("speculative_ddtree_topk", "value"),
    "--speculative-ddtree-mode": ("speculative_ddtree_mode", "value"),
}


def test_every_version_folder_is_complete():
    assert "0.5.11" in VERSIONS and "0.5.17" in VERSIONS
    for version in VERSIONS:
        folder = patch_dir(version)
        for name in ("series", "wheels.json", "server-flags.txt"):
            assert (folder / name).is_file(), f"{folder / name} is missing"
        assert series(version), f"{folder}/series lists no patch"


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    root = tmp_path_factory.mktemp("trees")
    return {"root": root, "built": {v: built_tree(v, root) for v in VERSIONS}}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_series_applies_to_the_pinned_wheel_and_compiles(trees, version):
    result = trees["built"][version]
    m = result["manifest"]
    assert m["sglang_version"] == version
    assert m["wheel"]["name"] == f"sglang-{version}-cp312-cp312-manylinux_2_34_x86_64.whl"
    assert m["wheel"]["sha256"] == pinned_sha256(version=version)
    assert [p["name"] for p in m["patches"]] == [p["name"] for p in series(version)]
    assert all(p["files"] for p in m["patches"]), "a patch that touches nothing"
    record = tree_wheel.Wheel(str(sglang_wheel(version=version))).record
    tree = result["tree"]["path"]
    for rel, entry in m["files"].items():
        assert entry["pristine_sha256"] == record.get(rel)  # None for a file the series adds
        assert tree_common.sha256_file(os.path.join(tree, rel)) == entry["sha256"]
        if rel.endswith(".py"):
            compile(Path(tree, rel).read_bytes(), rel, "exec", dont_inherit=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_second_build_changes_nothing(trees, version):
    tree = trees["built"][version]["tree"]["path"]
    before = {p: os.lstat(os.path.join(tree, p)).st_mtime_ns for p in tree_disk.scan_tree(tree)}
    again = built_tree(version, trees["root"])
    assert again["changed"] is False and again["reason"].startswith("already in place")
    assert again["tree"] == trees["built"][version]["tree"]
    assert {
        p: os.lstat(os.path.join(tree, p)).st_mtime_ns for p in tree_disk.scan_tree(tree)
    } == before


@pytest.mark.parametrize("version", VERSIONS)
def test_an_empty_series_gives_back_the_wheels_own_files(tmp_path, version):
    pristine = built_tree(version, tmp_path, patches=[])
    record = tree_wheel.Wheel(str(sglang_wheel(version=version))).record
    found = tree_disk.scan_tree(pristine["tree"]["path"])
    assert found == {p: h for p, h in record.items() if p.startswith("sglang/")}


@pytest.mark.parametrize("version", VERSIONS)
def test_ddtree_is_a_speculative_algorithm_of_the_patched_tree(trees, version):
    pytest.importorskip("torch", reason="spec_info / spec_registry import torch")
    tree = trees["built"][version]["tree"]["path"]
    registry = Path(tree, SPEC, "spec_registry.py").is_file()
    with sglang_modules(tree, registry_stand_ins() if registry else None) as import_module:
        algo_cls = import_module("sglang.srt.speculative.spec_info").SpeculativeAlgorithm
        ddtree = algo_cls.from_string("ddtree")
        assert algo_cls.from_string("DDTREE") is ddtree
        assert ddtree.is_dflash() and not ddtree.is_eagle() and ddtree.is_speculative()
        assert algo_cls.from_string("DFLASH") is algo_cls.DFLASH
        if registry:
            # 0.5.17 on: not an enum member, a registered CustomSpecAlgo that runs on the overlap scheduler
            custom = import_module("sglang.srt.speculative.spec_registry")
            assert "DDTREE" not in algo_cls.__members__
            assert isinstance(ddtree, custom.CustomSpecAlgo) and custom.get_spec("ddtree") is ddtree
            assert ddtree.name == "DDTREE" and ddtree.supports_overlap and ddtree.is_dflash_family()
            assert ddtree.supports_target_verify_for_draft() and ddtree.has_draft_kv()
            # the draft runs DFlash's block, the target verifies budget + 1
            assert ddtree.get_num_tokens_per_req_for_target_verify(16, is_draft_worker=True) == 16
        else:
            assert ddtree is algo_cls.DDTREE and ddtree.is_ddtree()


def _flags(text):
    return {ln.split()[0]: tuple(ln.split()[1:]) for ln in text.splitlines() if ln.startswith("--")}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_committed_flag_table_is_the_patched_parsers(trees, version):
    script = REPO_ROOT / "scripts" / "extract_sglang_flags.py"
    tree = trees["built"][version]["tree"]["path"]
    res = subprocess.run(
        [sys.executable, str(script), "--version", version, "--tree", tree, "--out", "-"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    committed = (patch_dir(version) / "server-flags.txt").read_text()
    assert _flags(res.stdout) == _flags(committed)
    assert f"sglang {version}" in committed.splitlines()[0]
    flags = _flags(committed)
    for flag, row in DDTREE_FLAGS.items():
        assert flags[flag] == row
    assert flags["--speculative-algorithm"] == ("speculative_algorithm", "value")
    assert flags["--speculative-dflash-block-size"] == ("speculative_dflash_block_size", "value")
    assert flags["--model"] == flags["--model-path"] == ("model_path", "value")
    # the committed file is what the script writes for the pinned wheel + series (not only the tree)
    check = subprocess.run(
        [sys.executable, str(script), "--version", version, "--check"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("version", [v for v in VERSIONS if v != "0.5.11"])
def test_the_algorithms_pure_parts_are_the_same_files_in_every_version(trees, version):
    base = trees["built"]["0.5.11"]["tree"]["path"]
    tree = trees["built"][version]["tree"]["path"]
    for rel in SHARED:
        assert Path(tree, rel).read_bytes() == Path(base, rel).read_bytes(), rel


@pytest.mark.parametrize("version", [v for v in VERSIONS if v not in ("0.5.11", "0.5.17")])
def test_the_registration_and_the_commit_are_the_same_files_from_0_5_17_on(trees, version):
    base = trees["built"]["0.5.17"]["tree"]["path"]
    tree = trees["built"][version]["tree"]["path"]
    for rel in (f"{SPEC}/ddtree_spec.py", f"{SPEC}/ddtree_commit.py"):
        assert Path(tree, rel).read_bytes() == Path(base, rel).read_bytes(), rel
