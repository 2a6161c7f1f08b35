#!/usr/bin/python
"""Ansible module (controller): render a benchmark run folder into tables, charts, report.md/.tex/.pdf."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_bench_report
short_description: Render a benchmark run's report on the controller
description:
  - Reads C(run.json) and C(cells/*.json) of O(run_dir) and writes C(results.csv), C(results.json),
    C(cells/<cell>.csv), C(charts/*.png) (matplotlib), C(report.md), C(report.tex) and, where pdflatex is
    installed, C(report.pdf). With O(compare_to) the report puts the other run beside this one (ratio per cell).
  - Run it delegated to localhost. Logic in C(module_utils/dflash_bench_report.py).
options:
  run_dir: {description: The run folder., type: path, required: true}
  compare_to: {description: A run folder (path or name under O(results_dir)) or a release id (its newest run).,
               type: str}
  results_dir: {description: Where runs are kept (default the run folder's parent)., type: path}
  pdf: {description: Compile report.tex when pdflatex is there., type: bool, default: true}
author: dflash-deploy
"""

RETURN = r"""
report: {description: "dir, rows, failed, standin, charts {name: {title, series}}, compare, pdf, files, warnings",
         type: dict, returned: always}
lines: {description: Human lines (one per cell)., type: list, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_bench_report import lines, render_run


def main():
    module = AnsibleModule(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "compare_to": {"type": "str"},
            "results_dir": {"type": "path"},
            "pdf": {"type": "bool", "default": True},
        },
        supports_check_mode=False,
    )
    p = module.params
    try:
        summary = render_run(p["run_dir"], p["compare_to"], p["results_dir"], p["pdf"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"{p['run_dir']}: cannot render the report: {exc}")
    for w in summary["warnings"]:
        module.warn(w)
    module.exit_json(changed=True, report=summary, lines=lines(summary))


if __name__ == "__main__":
    main()
