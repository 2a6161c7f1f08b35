"""files/patches/sglang/0.5.11/server-flags.txt is what scripts/extract_sglang_flags.py makes of the real patched tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sglang_wheel import REPO_ROOT, sglang_wheel

SCRIPT = REPO_ROOT / "scripts" / "extract_sglang_flags.py"
FLAGS = REPO_ROOT / "files" / "patches" / "sglang" / "0.5.11" / "server-flags.txt"


def rows():
    out = {}
    for line in FLAGS.read_text().splitlines():
        if line.startswith("--"):
            flag, dest, kind = line.split()
            out[flag] = (dest, kind)
    return out


def test_committed_flags_file_is_current():
    sglang_wheel()  # download (once) outside the subprocess's timeout
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=300, check=False
    )
    assert res.returncode == 0, res.stderr


def test_flags_cover_0_5_11_and_the_ddtree_flags():
    flags = rows()
    assert len(flags) > 380
    assert flags["--speculative-ddtree-budget"] == ("speculative_ddtree_budget", "value")
    assert flags["--speculative-ddtree-topk"] == ("speculative_ddtree_topk", "value")
    assert flags["--speculative-ddtree-mode"] == ("speculative_ddtree_mode", "value")
    # 0.5.11's own, aliases and switch/nargs kinds included
    assert flags["--speculative-dflash-block-size"] == ("speculative_dflash_block_size", "value")
    assert flags["--model"] == flags["--model-path"] == ("model_path", "value")
    assert flags["--speculative-draft-model"][0] == "speculative_draft_model_path"
    assert flags["--skip-tokenizer-init"] == ("skip_tokenizer_init", "switch")
    assert flags["--lora-paths"][1] == "values"
    assert "--no-lora-strict-loading" in flags


def test_a_built_tree_gives_the_same_flags(tmp_path: Path):
    from ansible.module_utils.dflash_tree import disk, series, wheel
    from sglang_wheel import PATCH_DIR, pinned_sha256

    plan = wheel.plan_wheel(str(sglang_wheel()), pinned_sha256(), series.read_series_dir(str(PATCH_DIR)))
    try:
        target = tmp_path / "sglang" / "srt" / "server_args.py"
        target.parent.mkdir(parents=True)
        target.write_bytes(plan["contents"]["sglang/srt/server_args.py"])
    finally:
        disk.close_plan(plan)
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--tree", str(tmp_path), "--out", "-"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = [ln for ln in res.stdout.splitlines() if ln.startswith("--")]
    assert got == [ln for ln in FLAGS.read_text().splitlines() if ln.startswith("--")]
