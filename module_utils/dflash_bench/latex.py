"""report.tex of a benchmark run, and its PDF where a TeX engine is installed.

Only packages of Debian's ``texlive-latex-base`` are used (geometry, graphicx, color, longtable,
array), so ``apt-get install --no-install-recommends texlive-latex-base`` is enough to get the PDF.
Without pdflatex the .tex is written and the report says how to get one. No Ansible import.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from ansible.module_utils.dflash_bench.charts import DUMMY_STAMP, STANDIN_STAMP
from ansible.module_utils.dflash_bench.layout import col_spec, tex_escape, wrap_command
from ansible.module_utils.dflash_bench.markdown import (
    COMPARE_COLUMNS,
    SPREAD_COLUMNS,
    cells_columns,
    cells_rows,
    compare_rows,
    dummy_weights,
    spread_rows,
)

TEX_WIDTH = 130  # command lines (\footnotesize typewriter: about 170 fit the landscape A4 line)

TEX_HINT = "apt-get install --no-install-recommends texlive-latex-base (Debian/Ubuntu), then re-render"
_ESC = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}"}


def esc(value) -> str:
    return "".join(_ESC.get(ch, ch) for ch in str(value))


def _v(value, fmt="{:.1f}"):
    if value is None or value == "":
        return "--"
    return fmt.format(value) if isinstance(value, float) else esc(value)


def render(run, rows, configs, charts, compare=None, compare_name=None, spread=None) -> str:
    standin = next((r["stand_in"] for r in rows if r.get("stand_in")), None) or run.get("stand_in")
    rel = run.get("release") or {}
    t = [r"\documentclass[10pt]{article}", r"\usepackage[a4paper,margin=18mm,landscape]{geometry}",
         r"\usepackage{graphicx}", r"\usepackage{color}", r"\usepackage{longtable}", r"\usepackage{array}",
         r"\setlength{\parindent}{0pt}", r"\begin{document}",
         r"\section*{Benchmark " + esc(run.get("run")) + ": " + esc(run.get("host")) + "}"]
    if standin:
        t.append(r"\fbox{\parbox{0.95\linewidth}{\textcolor{red}{\textbf{" + esc(STANDIN_STAMP) + r".}} "
                 r"A stand-in server answered (it says: " + esc(standin) + r"): no figure comes from a model "
                 r"on a GPU.}}\par\medskip")
    if dummy_weights(configs):
        t.append(r"\fbox{\parbox{0.95\linewidth}{\textcolor{red}{\textbf{" + esc(DUMMY_STAMP) + r".}} "
                 r"The servers load random weights: their drafts are almost never right, so these figures say what "
                 r"the machinery costs, not which configuration the real model wants.}}\par\medskip")
    t += [r"\begin{itemize}",
          r"\item release \texttt{" + esc(rel.get("id")) + "}, sglang " + esc(rel.get("sglang") or "?")
          + r", fingerprint digest \texttt{" + esc((rel.get("fingerprint_digest") or "")[:16]) + r"}",
          r"\item base instance \texttt{" + esc(run.get("base_instance")) + "}; started " + esc(run.get("started"))
          + ", finished " + esc(run.get("finished") or "(not finished)"),
          r"\item command:", r"\end{itemize}", r"{\footnotesize", r"\begin{verbatim}",
          *wrap_command((run.get("command") or "ansible-playbook playbooks/bench.yml").split(), TEX_WIDTH),
          r"\end{verbatim}", "}",
          (r"Accept length = completion tokens / verify steps of the cell's requests (the server's meta\_info); "
          r"it stands beside every throughput figure: near 1, the draft is almost never right.\par\medskip"),
          *_spread(spread),
          r"\scriptsize"]
    # the Markdown report's table, every column of it, widths from the content (layout.col_spec)
    t += _longtable(cells_columns(bool(spread)), cells_rows(rows, bool(spread))) + [r"\normalsize"]
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        t += [r"\subsection*{Failed cells}", r"\begin{itemize}"]
        t += [r"\item \texttt{" + esc(r["cell"]) + "}: " + esc(r.get("cause") or "unknown cause")
              + (" -- remedy: " + esc(r["remedy"]) if r.get("remedy") else "") for r in failed]
        t.append(r"\end{itemize}")
    for name, ch in (charts or {}).items():
        t += [r"\begin{figure}[h]\centering", r"\includegraphics[width=0.9\linewidth,height=0.75\textheight,"
              r"keepaspectratio]{charts/" + name + ".png}", r"\par " + esc(ch["title"]), r"\end{figure}",
              r"\clearpage"]
    if compare:
        t += [r"\subsection*{Compared with " + esc(compare_name) + "}", r"\scriptsize"]
        t += _longtable(COMPARE_COLUMNS, compare_rows(compare)) + [r"\normalsize"]
    t.append(r"\subsection*{Configurations (full flags)}")
    for c in configs:
        t += [r"\textbf{" + esc(c["name"]) + "} (" + esc(c.get("algorithm")) + ")", r"{\footnotesize",
              r"\begin{verbatim}", *wrap_command(["python", "-m", "sglang.launch_server", *(c.get("args") or [])],
                                                 TEX_WIDTH), r"\end{verbatim}", "}", r"\smallskip"]
    t.append(r"\end{document}")
    return "\n".join(t) + "\n"


def _longtable(columns, rows) -> list:
    """A longtable with every column of the Markdown report's table, its widths from the content."""
    table = {"columns": list(columns), "rows": [[str(c) for c in r] for r in rows]}
    return ([r"\begin{longtable}{" + col_spec(table) + "}",
             " & ".join(r"\textbf{" + tex_escape(c, True) + "}" for c in table["columns"]) + r" \\ \hline \endhead"]
            + [" & ".join(tex_escape(c, True) for c in row) + r" \\" for row in table["rows"]] + [r"\end{longtable}"])


def _spread(spread) -> list:
    if not spread:
        return []
    t = [r"\subsection*{Repeats: median and spread per cell}",
         (r"max/min is the run-to-run spread of the cell's tok/s; a smaller difference between configurations is "
          r"not a result.\par\smallskip"), r"\scriptsize"]
    return t + _longtable(SPREAD_COLUMNS, spread_rows(spread)) + [r"\normalsize", r"\subsection*{Every repeat}"]


def engine():
    """The TeX engine found on PATH (pdflatex), or None."""
    return shutil.which("pdflatex")


def compile_pdf(tex_path, timeout=120) -> dict:
    """pdflatex twice (longtable widths) in the .tex's folder -> {pdf, engine} or {error, hint}."""
    exe = engine()
    if not exe:
        return {"pdf": None, "engine": None, "error": "no TeX engine (pdflatex) on the controller", "hint": TEX_HINT}
    folder, name = os.path.split(os.path.abspath(tex_path))
    for _ in range(2):
        try:
            proc = subprocess.run([exe, "-interaction=nonstopmode", "-halt-on-error", name], cwd=folder,
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"pdf": None, "engine": exe, "error": f"pdflatex took more than {timeout} s"}
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.splitlines()[-15:])
            return {"pdf": None, "engine": exe, "error": f"pdflatex failed (rc {proc.returncode}): {tail}"}
    pdf = os.path.join(folder, name[:-4] + ".pdf")
    for ext in (".aux", ".log"):
        try:
            os.remove(os.path.join(folder, name[:-4] + ext))
        except OSError:
            pass
    return {"pdf": pdf if os.path.exists(pdf) else None, "engine": exe}
