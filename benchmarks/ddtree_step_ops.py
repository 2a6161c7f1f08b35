"""Operators a DDTREE decode step dispatches outside CUDA graphs, before and after patches 0104-0105, on CPU.

On the H200 (gpu-harness/records/2026-12-02-ddtree-lossless-fp32/, call 4) a DDTREE b15 step launched about
115 more kernels outside CUDA graphs than a DFLASH step on a host-bound step. Patches 0104 and 0105 move
parts of that work off the device or into graphs; this counts, with the real patched sglang code of each
series (the wheel with files/patches/sglang/0.5.11 applied, less 0104-0105 for "before"), the operators
each part dispatches (views excluded; on a GPU each is a kernel launch or a copy):
- verify: DDTreeVerifyInput.verify, from the target's logits to the committed KV indexes (the toy-target
  harness of tests/unit/tree/test_ddtree_verify.py: two requests, budget 9, top-k 3);
- hybrid commit: DDTreeWorker._update_target_mamba_state_after_verify (state slots + radix tracking slots);
- links: ddtree_hybrid.tree_retrieve_links, eager in the worker before 0104, inside the tree build's
  captured graph after (TreeBuilder(links=...)): counted for "before" only;
- head ids: the draft head's vocab ids (an arange and an add over the vocab every step before 0104, made
  once after);
- mask: the tree mask as the series' worker calls tree_mask_flat (before 0105 the index arithmetic ran in
  the step; since 0105 the worker passes the index the build graph made, read from its source);
- walk: the part of verify that the walk graph (0105; on by default since 0106) replays as one graph on CUDA
  (the walk and the packing of its device->host copy; the capture cannot run on a CPU, so this column
  says what the graph would hold, not a measurement of it).
Operator counts do not depend on timing, so one run is the result (it is exact, not a sample). Uploads
from Python lists (torch.tensor(list, device=...)) dispatch no operator here and are one host->device copy
each on a GPU: before 0104 verify made two (commit lengths, new tokens), after it verify makes one (both
plus the keep/drop indexes, packed) and the hybrid commit one (state and tracking slots).

usage: .venv/bin/python benchmarks/ddtree_step_ops.py      (needs CPU torch and the pinned sglang wheel, which
       tests/sglang_wheel.py downloads once into its cache)
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
for sub in ("tests", "tests/unit", "tests/unit/tree", "benchmarks"):
    sys.path.insert(0, str(REPO / sub))
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(str(REPO / "module_utils"))
from ddtree_cpu_overhead import Kernels  # views excluded, host reads apart
from test_ddtree_verify import hybrid_commit, patched_modules, run_step, series_files

# "before" leaves out everything after 0103 that touches the worker (0106, which puts the draft head and the
# oracles into graphs and turns the walk graph on by default, 0107, whose build kernel needs Triton on a GPU,
# and 0110, off by default, change none of the counted parts)
NEW = ("0104-ddtree-step-launches.patch", "0105-ddtree-step-graphs.patch", "0106-ddtree-head-graph.patch",
       "0107-ddtree-build-kernel.patch", "0110-ddtree-conv-parents.patch")
PROMPTS = [[5, 6, 7], [9, 9, 2, 4, 1]]
PRIOR = [[11], [3, 8]]
VOCAB_ROWS = 151936  # Qwen3 / Qwen3.5 vocabulary: what the per-step arange covered


def count(label, exclude):
    files = series_files(exclude)
    worker_src = files["sglang/srt/speculative/ddtree_worker.py"]
    with patched_modules(files) as sg:
        verify = Kernels()
        s = run_step(sg, PROMPTS, PRIOR, [40, 40], ranks=[0, 1, 0, 0], counter=verify)
        commit = Kernels()
        hybrid_commit(sg, s, interval=1, counter=commit)
        before = set(NEW) <= set(exclude)
        links = Kernels()
        if before:  # before 0104 the worker ran the links eagerly every step
            with links:
                sg.ddtree_hybrid.tree_retrieve_links(s.tree.parents)
        head = Kernels()
        if before:  # what _topk_from_vocab_parallel_head made every step before 0104
            with head:
                torch.arange(VOCAB_ROWS) + 0
        mask = Kernels()
        index = s.tree.mask_index if "index=tree.mask_index" in worker_src else None
        with mask:
            sg.ddtree_device.tree_mask_flat(s.tree.ancestors, s.seq_before, s.seq_before.tolist(), index=index)
        walk = Kernels()
        with walk:
            sg.ddtree_device.accept_packed(s.tree, s.tree.tokens.roll(-1, dims=1))
        return label, verify.ops, commit.ops, links.ops, head.ops, mask.ops, walk.ops


def main():
    rows = [count("series 0001-0103 (before)", set(NEW)), count("series 0001-0106 (after)", ())]
    print(f"# {platform.machine()}, torch {torch.__version__}; batch of 2, budget 9, top-k 3; operators per step")
    print("| series | verify | hybrid commit | tree links (eager) | head vocab ids | mask | total | of verify, the walk |")
    print("|---|---|---|---|---|---|---|---|")
    for label, v, c, lk, h, m, w in rows:
        print(f"| {label} | {v} | {c} | {lk} | {h} | {m} | **{v + c + lk + h + m}** | {w} |")


if __name__ == "__main__":
    main()
