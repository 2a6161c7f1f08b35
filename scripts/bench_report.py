#!/usr/bin/env python3
"""Re-render a benchmark run folder (e.g. one copied back from a GPU machine without matplotlib or TeX),
or show what a chart carries.

  python3 scripts/bench_report.py render RUN_DIR [--compare-to RUN_OR_RELEASE] [--no-pdf]
  python3 scripts/bench_report.py tune RUN_DIR [--no-pdf]   # a tune.yml run (its proposal as it was written)
  python3 scripts/bench_report.py inspect CHART.png      # validity + the series drawn (tEXt chunk)

Same code as playbooks/bench.yml's report step (module_utils/dflash_bench/report.py).
"""

import argparse
import json
import pathlib
import sys

import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(str(pathlib.Path(__file__).resolve().parents[1] / "module_utils"))

from ansible.module_utils.dflash_bench import charts, report, tune_report

TEMPLATES = pathlib.Path(__file__).resolve().parents[1] / "templates" / "tune"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render")
    r.add_argument("run_dir")
    r.add_argument("--compare-to")
    r.add_argument("--no-pdf", action="store_true")
    t = sub.add_parser("tune")
    t.add_argument("run_dir")
    t.add_argument("--no-pdf", action="store_true")
    i = sub.add_parser("inspect")
    i.add_argument("png")
    a = ap.parse_args(argv)
    if a.cmd == "inspect":
        text = charts.png_text(a.png)
        print(json.dumps(json.loads(text.get("Description", "{}")), indent=1))
        return 0
    if a.cmd == "tune":
        try:
            old = json.loads((pathlib.Path(a.run_dir) / "results.json").read_text()).get("proposal")
        except (OSError, ValueError):
            old = None
        try:
            out = tune_report.render(a.run_dir, TEMPLATES, proposal=old, pdf=not a.no_pdf)
        except (OSError, ValueError) as exc:
            print(f"{a.run_dir}: cannot render the tune report: {exc}", file=sys.stderr)
            return 2
        print("\n".join(out["lines"] + [f"warning: {w}" for w in out["warnings"]] + [f"written: {f}" for f in out["files"]]))
        return 0
    try:
        summary = report.render_run(a.run_dir, a.compare_to, None, not a.no_pdf)
    except (OSError, ValueError) as exc:
        print(f"{a.run_dir}: cannot render the report: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report.lines(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
