#!/usr/bin/env python3
"""The import graph of module_utils/, from the code itself (ast; nothing is imported).

  scripts/module_graph.py dot [REV]        Graphviz dot of the packages and their files, one edge per import
  scripts/module_graph.py svg OUT [REV]    the same drawn by `dot -Tsvg` (docs/module_utils.svg)
  scripts/module_graph.py table REV...     packages, loose files and lines of each revision (Markdown)
  scripts/module_graph.py check [REV]      exit 1 on an import circle (between files, or between packages)

REV is a git revision (default: the working tree). Imports are read in every form the tree has used
(``ansible.module_utils.X``, plain ``X`` with module_utils/ on sys.path, relative), so that an older revision is
measured the same way. Written here, not taken from a library: pydeps and friends import the code (ours needs
ansible on the path and a name it is not installed under) and draw sys.path, not this tree's one name.
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "ansible.module_utils."
# one colour per kind of package (a stage, the shared ones)
SHARED = ("dflash_common", "dflash_service")


def read_tree(rev=None) -> dict:
    """{dotted module: source} of module_utils/ at ``rev`` (None: the working tree)."""
    out = {}
    if rev is None:
        base = os.path.join(ROOT, "module_utils")
        for d, _dirs, files in os.walk(base):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(d, f)
                    with open(path, encoding="utf-8") as fh:
                        out[_dotted(os.path.relpath(path, base))] = fh.read()
        return out
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "module_utils/"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for path in names:
        if path.endswith(".py"):
            out[_dotted(path[len("module_utils/"):])] = subprocess.run(
                ["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return out


def _dotted(rel: str) -> str:
    parts = rel[:-3].split(os.sep if os.sep in rel else "/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(modules: dict) -> dict:
    """{module: set of modules of the tree it imports}."""
    known = set(modules)
    graph = {}
    for mod, src in modules.items():
        package = mod if _is_package(mod, known) else mod.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(src)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".") if package else []
                    base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                # `from P import m` imports the file P/m.py when there is one, else names of P itself
                names = [f"{stem}.{a.name}" if _resolve(f"{stem}.{a.name}", known) == _strip(f"{stem}.{a.name}")
                         else stem for a in node.names]
            for name in names:
                name = _resolve(name, known)
                if name and name != mod:
                    deps.add(name)
        graph[mod] = deps
    return graph


def _strip(name: str) -> str:
    return name.removeprefix(PREFIX)


def _resolve(name: str, known) -> str:
    """The module of the tree a dotted import name lands in ("" when none)."""
    name = _strip(name)
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def _is_package(mod, known) -> bool:
    return any(m.startswith(mod + ".") for m in known)


def package_of(mod: str, known=()) -> str:
    """The package a module belongs to; a loose file is its own."""
    return mod.split(".")[0]


def lines_of(modules: dict) -> dict:
    return {m: src.count("\n") for m, src in modules.items()}


def cycles(graph: dict) -> list:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def package_graph(graph: dict) -> dict:
    known = set(graph)
    pg = collections.defaultdict(set)
    for mod, deps in graph.items():
        p = package_of(mod, known)
        pg.setdefault(p, set())
        for d in deps:
            q = package_of(d, known)
            if q != p:
                pg[p].add(q)
    return dict(pg)


def stats(modules: dict) -> dict:
    known = set(modules)
    lines = lines_of(modules)
    packages = sorted({m.split(".")[0] for m in known if _is_package(m.split(".")[0], known)})
    loose = sorted(m for m in known if "." not in m and not _is_package(m, known))
    graph = imports(modules)
    return {
        "packages": len(packages),
        "package_lines": sum(n for m, n in lines.items() if m.split(".")[0] in packages),
        "loose": len(loose),
        "loose_lines": sum(lines[m] for m in loose),
        "lines": sum(lines.values()),
        "files": len(modules),
        "file_cycles": cycles(graph),
        "package_cycles": cycles(package_graph(graph)),
        "over_500": sorted(m for m, n in lines.items() if n > 500),
    }


def table(revs) -> str:
    rows = [("", *revs)]
    got = [stats(read_tree(None if r == "." else r)) for r in revs]
    rows += [
        ("packages (lines)", *(f"{s['packages']} ({s['package_lines']})" for s in got)),
        ("loose files at the root (lines)", *(f"{s['loose']} ({s['loose_lines']})" for s in got)),
        ("files, lines in all", *(f"{s['files']}, {s['lines']}" for s in got)),
        ("import circles between files", *(_circles(s["file_cycles"]) for s in got)),
        ("import circles between packages", *(_circles(s["package_cycles"]) for s in got)),
        ("files over 500 lines", *(", ".join(s["over_500"]) or "none" for s in got)),
    ]
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(out)


def _circles(found) -> str:
    return "; ".join(" <-> ".join(c) for c in found) or "none"


def dot(modules: dict) -> str:
    known = set(modules)
    graph = imports(modules)
    lines = lines_of(modules)
    by_pkg = collections.defaultdict(list)
    for m in sorted(known):
        by_pkg[package_of(m, known)].append(m)
    out = ["digraph module_utils {",
           ('  graph [rankdir=LR, fontname="Helvetica", fontsize=11, compound=true, nodesep=0.15, ranksep=1.1, '
            'label="module_utils/: packages and their files, an edge per import (scripts/module_graph.py)", '
            'labelloc=t];'),
           '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=9, height=0.2];',
           '  edge [color="#00000055", arrowsize=0.5];']
    for pkg, mods in sorted(by_pkg.items()):
        colour = "#e8f0fe" if pkg in SHARED else ("#fef7e0" if not _is_package(pkg, known) else "#e6f4ea")
        total = sum(lines[m] for m in mods)
        out.append(f'  subgraph "cluster_{pkg}" {{')
        out.append(f'    label="{pkg} ({total} lines)"; style="rounded,filled"; fillcolor="{colour}"; color="#999999";')
        for m in mods:
            short = m.split(".", 1)[1] if "." in m else m
            if short == m and _is_package(m, known):
                short = "__init__"
            out.append(f'    "{m}" [label="{short}\\n{lines[m]}", fillcolor="white"];')
        out.append("  }")
    for m in sorted(graph):
        for d in sorted(graph[m]):
            out.append(f'  "{m}" -> "{d}";')
    out.append("}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dot")
    d.add_argument("rev", nargs="?")
    s = sub.add_parser("svg")
    s.add_argument("out")
    s.add_argument("rev", nargs="?")
    t = sub.add_parser("table")
    t.add_argument("revs", nargs="+", help="git revisions; '.' is the working tree")
    c = sub.add_parser("check")
    c.add_argument("rev", nargs="?")
    a = ap.parse_args(argv)
    if a.cmd == "dot":
        sys.stdout.write(dot(read_tree(a.rev)))
    elif a.cmd == "svg":
        subprocess.run(["dot", "-Tsvg", "-o", a.out], input=dot(read_tree(a.rev)), text=True, check=True)
    elif a.cmd == "table":
        print(table(a.revs))
    else:
        st = stats(read_tree(a.rev))
        for kind in ("file_cycles", "package_cycles"):
            for cyc in st[kind]:
                print(f"import circle ({kind.split('_')[0]}s): {' <-> '.join(cyc)}")
        return 1 if st["file_cycles"] or st["package_cycles"] else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
