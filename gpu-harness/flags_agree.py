"""Does the deploy's flag check (module_utils/dflash_instances/server_flags.py on the committed
files/patches/sglang/0.5.11/server-flags.txt) accept exactly what sglang 0.5.11's own parser accepts?

Each case is an instance's extra_args appended to a valid command line. Our verdict: check_args (unknown
flag, ambiguous abbreviation, switch given a value, missing value, stray word). The server's verdict:
argparse.ArgumentParser(prog="sglang serve") + ServerArgs.add_cli_args of the patched tree, parse_args
(argparse only: SystemExit = rejected). They must agree on every case.

    python gpu-harness/flags_agree.py --dry-run                 # our verdicts only (anywhere)
    PYTHONPATH=<patched tree>:<site> python gpu-harness/flags_agree.py --out DIR   # both (GPU machine)

The patched tree and site are the ones gpu-harness/argparse_check.sh prepares (/root/argparse-check/tree,
/root/site). Writes DIR/flags_agree.{json,md}; exit 1 when a case disagrees.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(str(ROOT / "module_utils"))

from ansible.module_utils.dflash_instances import server_flags as sf

BASE = ["--model-path", "/dev/shm/Qwen3.6-27B", "--host", "127.0.0.1", "--port", "30001", "--tp-size", "1"]
CASES = [
    [], ["--cuda-graph-max-bs", "8"], ["--disable-radix-cache"], ["--grammar-backend=none"],
    ["--chunked-prefill", "4096"], ["--random-seed", "-1"], ["--attention-backend", "triton"],
    ["--speculative-ddtree-budget", "15"], ["--speculative-num-step", "3"], ["--enable-metrics"],
    ["--attention-backed", "triton"], ["--reasoning_parser", "qwen3"], ["--enable-reasoning"],
    ["--disable-cuda-graph", "yes"], ["--disable-cuda-graph=true"], ["--speculative-draft", "x"],
    ["--cuda-graph-max-bs"], ["--cuda-graph-max-bs", "--disable-radix-cache"], ["triton"], ["-h2"],
    ["--max-loaded-loras", "1"], ["--omni"], ["--enable-torch-compile", "1"], ["--api-key", "k"],
    ["--served-model-name", "a", "--served-model-name", "b"], ["--json-model-override-args", "{}"],
]


def ours(known, extra):
    errors, _ = sf.check_args(extra, known, "0.5.11")
    return {"accepted": not errors, "why": "; ".join(m for _, m in errors)}


def theirs(extra):
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(BASE + extra)
    except SystemExit as exc:
        return {"accepted": exc.code == 0, "why": err.getvalue().strip().splitlines()[-1:] or [""]}
    return {"accepted": True, "why": ""}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true", help="our verdicts only (no sglang needed)")
    args = ap.parse_args(argv)
    known, head = sf.load_flags(str(ROOT / "files/patches/sglang/0.5.11/server-flags.txt"))
    rows, bad = [], 0
    for extra in CASES:
        row = {"extra_args": extra, "ours": ours(known, extra)}
        if not args.dry_run:
            row["sglang"] = theirs(extra)
            row["agree"] = row["ours"]["accepted"] == row["sglang"]["accepted"]
            bad += not row["agree"]
        rows.append(row)
    lines = [f"# flags_agree: {len(rows)} cases, {bad} disagreements ({head})", "",
             "| extra_args | ours | sglang 0.5.11 | agree |", "|---|---|---|---|"]
    for r in rows:
        s = r.get("sglang", {})
        lines.append(f"| `{' '.join(r['extra_args']) or '(none)'}` | {'ok' if r['ours']['accepted'] else 'refused'} | "
                     f"{'-' if not s else ('ok' if s['accepted'] else 'rejected')} | {r.get('agree', '-')} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "flags_agree.json").write_text(json.dumps(rows, indent=2) + "\n")
        (out / "flags_agree.md").write_text(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
