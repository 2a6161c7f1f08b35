"""The tree stage's pruning (module_utils/dflash_tree/prune.py, roles/dflash_tree/tasks/prune.yml): trees no
kept release uses go, the rest stays; called with the kept manifests that the release stage hands over."""

import json
import os

from ansible.module_utils.dflash_tree.prune import prune_candidates, prune_trees, tree_tops
from ansible_play import run_play


def _trees(root, *names):
    for n in names:
        (root / n / "sglang").mkdir(parents=True)
    return root


def test_tree_tops_of_site_packages_paths_and_outsiders(tmp_path):
    root = str(tmp_path / "trees")
    assert tree_tops(root, [f"{root}/sglang-a/site-packages", f"{root}/sglang-b", "/elsewhere/sglang-c", root]) == [
        f"{root}/sglang-a", f"{root}/sglang-b"]


def test_only_finished_unused_trees_are_candidates(tmp_path):
    root = _trees(tmp_path / "trees", "sglang-0.5.11-aaaaaaaaaaaa", "sglang-0.5.11-bbbbbbbbbbbb",
                  ".tmp-sglang-0.5.11-cccccccccccc", "my-notes")
    dirs = [str(root / n) for n in os.listdir(root)]
    kept = [{"id": "r2", "tree_path": str(root / "sglang-0.5.11-bbbbbbbbbbbb")}, {"id": "r1"}]
    assert prune_candidates(dirs, kept, trees_dir=str(root)) == [str(root / "sglang-0.5.11-aaaaaaaaaaaa")]
    # this run's tree is kept even when no kept release names it yet
    assert prune_candidates(dirs, kept, protect=[str(root / "sglang-0.5.11-aaaaaaaaaaaa")], trees_dir=str(root)) == []


def test_prune_trees_check_mode_then_for_real(tmp_path):
    root = _trees(tmp_path / "trees", "sglang-0.5.11-aaaaaaaaaaaa", "sglang-0.5.11-bbbbbbbbbbbb")
    kept = [{"tree_path": str(root / "sglang-0.5.11-bbbbbbbbbbbb/site-packages")}]
    gone = [str(root / "sglang-0.5.11-aaaaaaaaaaaa")]
    assert prune_trees(str(root), kept, check_mode=True) == gone
    assert sorted(os.listdir(root)) == ["sglang-0.5.11-aaaaaaaaaaaa", "sglang-0.5.11-bbbbbbbbbbbb"]
    assert prune_trees(str(root), kept) == gone
    assert os.listdir(root) == ["sglang-0.5.11-bbbbbbbbbbbb"]
    assert prune_trees(str(tmp_path / "absent"), kept) == []


def test_the_stages_prune_tasks_as_release_calls_them(tmp_path):
    """roles/dflash_tree and roles/dflash_layers tasks_from prune, with the kept manifests, through Ansible."""
    prefix = tmp_path / "opt"
    _trees(prefix / "trees", "sglang-0.5.11-aaaaaaaaaaaa", "sglang-0.5.11-bbbbbbbbbbbb")
    for n in ("sglang-aaaaaaaaaaaa", "sglang-bbbbbbbbbbbb"):
        (prefix / "layers" / n).mkdir(parents=True)
    kept = [{"id": "r2", "sequence": 2, "tree_path": str(prefix / "trees/sglang-0.5.11-bbbbbbbbbbbb"),
             "layers": [{"path": str(prefix / "layers/sglang-bbbbbbbbbbbb")}]}]
    out = tmp_path / "out.json"
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {"dflash_prefix": str(prefix)}, "tasks": [
        {"ansible.builtin.include_role": {"name": "dflash_tree", "tasks_from": "prune"},
         "vars": {"dflash_tree_prune_manifests": kept}},
        {"ansible.builtin.include_role": {"name": "dflash_layers", "tasks_from": "prune"},
         "vars": {"dflash_layers_prune_manifests": kept, "dflash_layers_keep_releases": 0}},
        {"ansible.builtin.copy": {"dest": str(out), "mode": "0644", "content": (
            "{{ {'trees': __dflash_tree_pruned.removed, 'layers': __dflash_layers_pruned.removed} | to_json }}")}},
    ]}]
    proc = run_play(play, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(out.read_text())
    assert got == {"trees": [str(prefix / "trees/sglang-0.5.11-aaaaaaaaaaaa")],
                   "layers": [str(prefix / "layers/sglang-aaaaaaaaaaaa")]}
    assert os.listdir(prefix / "trees") == ["sglang-0.5.11-bbbbbbbbbbbb"]
    assert os.listdir(prefix / "layers") == ["sglang-bbbbbbbbbbbb"]
