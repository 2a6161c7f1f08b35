#!/usr/bin/env python3
"""List every `launch_server` flag of the patched sglang tree: the deploy checks `extra_args` /
`pin_flags` against it before anything changes, and the lab stand-in server accepts exactly these.

Reads `sglang/srt/server_args.py` of the patched tree with `ast` (nothing is imported, so no torch
is needed) and writes one `--flag` per line, followed by its argparse dest and its kind:
`switch` (takes no value), `value` (one value) or `values` (nargs). BooleanOptionalAction flags
also get their `--no-` form. Up to 0.5.11 every flag is an `add_argument` call in
`ServerArgs.add_cli_args`; from 0.5.17 most are derived from the dataclass fields' annotations
(`field: A[T, "help" | Arg(...), NS(...)]`, registered by `add_cli_args_from_dataclass` in
`sglang/srt/arg_groups/arg_utils.py`), which this reads with the same rules (first `Arg` or help
string wins, `no_cli` skipped, `cli_name` / `aliases`, `action`, `Optional` / `Literal` / `List` / `bool`),
beside the manual `add_argument` calls that remain. The tree is, by default, the pinned wheel with the committed series
applied in memory (module_utils/dflash_tree/); `--tree DIR` reads a built tree instead.

    scripts/extract_sglang_flags.py                      # writes files/patches/sglang/0.5.11/server-flags.txt
    scripts/extract_sglang_flags.py --version 0.5.17     # the pinned 0.5.17 wheel + files/patches/sglang/0.5.17
    scripts/extract_sglang_flags.py --check              # exit 1 when the committed file is stale
    scripts/extract_sglang_flags.py --tree /opt/dflash/trees/sglang-0.5.11-<hash> --out -
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(str(REPO / "module_utils"))
sys.path.insert(0, str(REPO / "tests"))

from ansible.module_utils.dflash_tree import disk, series
from ansible.module_utils.dflash_tree import wheel as tree_wheel

SERVER_ARGS = "sglang/srt/server_args.py"
SWITCH_ACTIONS = {"store_true", "store_false", "store_const", "count", "help", "version"}
# custom actions of sglang whose nargs default to 0 (0.5.11; DeprecatedStoreConstAction from 0.5.17)
SWITCH_CLASSES = {"DeprecatedAction", "DeprecatedStoreTrueAction", "DeprecatedStoreConstAction"}
# the annotation alias sglang's dataclass fields use (typing.Annotated)
ANNOTATED = {"A", "Annotated"}


def _const(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _action_kind(action, nargs, longs):
    """(kind, option strings) of an explicit argparse action (None: the default store)."""
    name = ast.unparse(action).split(".")[-1].strip("'\"") if action is not None else "store"
    if nargs is not None and _const(nargs) not in (None, 0, 1):
        return "values", longs
    if name in SWITCH_ACTIONS:
        return "switch", longs
    if name in SWITCH_CLASSES:
        # their nargs defaults to 0, but an explicit nargs=None (0.5.23's --monokernel-backend) takes a value
        return ("value" if nargs is not None else "switch"), longs
    if name == "BooleanOptionalAction":
        return "switch", longs + ["--no-" + n[2:] for n in longs]
    return "value", longs


def _subscript(node, names):
    """``X[...]``'s slice elements when X is one of ``names`` (``typing.X`` too), else None."""
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).split(".")[-1] in names:
        sl = node.slice
        return list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
    return None


def _unwrap_optional(node):
    """``Optional[X]``, ``Union[X, None]`` and ``X | None`` -> X (the dataclass helper's rule)."""
    inner = _subscript(node, {"Optional"})
    if inner is not None:
        return inner[0]
    parts = _subscript(node, {"Union"})
    if parts is None and isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [node.left, node.right]
    if parts is not None:
        rest = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
        if len(rest) == 1:
            return rest[0]
    return node


def _dataclass_rows(cls) -> list[tuple[str, str, str]]:
    """The flags ``add_cli_args_from_dataclass(parser, ServerArgs)`` derives from the annotated fields."""
    rows = []
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        parts = _subscript(node.annotation, ANNOTATED)
        if not parts:
            continue
        field = node.target.id
        meta = None
        for m in parts[1:]:
            if isinstance(m, ast.Constant) and isinstance(m.value, str):
                meta = {}
                break
            if isinstance(m, ast.Call) and ast.unparse(m.func).split(".")[-1] == "Arg":
                meta = {k.arg: k.value for k in m.keywords}
                break
        if meta is None or _const(meta.get("no_cli", ast.Constant(False))) is True:
            continue  # no Arg: not a CLI flag (NS only), or explicitly none
        cli_name = _const(meta["cli_name"]) if "cli_name" in meta else "--" + field.replace("_", "-")
        aliases = _const(meta["aliases"]) if "aliases" in meta else []
        names = [cli_name, *(aliases or [])]
        if not all(isinstance(n, str) for n in names):
            raise ValueError(f"line {node.lineno}: field {field}: option strings that are not literals")
        longs = [n for n in names if n.startswith("--")]
        if "action" in meta:
            # nargs may come in action_kwargs (0.5.17's --lora-paths: LoRAPathAction, nargs "*")
            extra = meta.get("action_kwargs")
            extra = (
                {_const(k): v for k, v in zip(extra.keys, extra.values)}
                if isinstance(extra, ast.Dict)
                else {}
            )
            kind, longs = _action_kind(meta["action"], meta.get("nargs", extra.get("nargs")), longs)
        else:
            inner = _unwrap_optional(parts[0])
            is_list = _subscript(inner, {"List", "list"}) is not None or ast.unparse(inner) in (
                "list",
                "List",
            )
            if _subscript(inner, {"Literal"}) is not None:
                kind = "value"
            elif is_list and "type_parser" not in meta:
                kind = "values"
            elif ast.unparse(inner) == "bool":
                kind = "switch"
            elif "nargs" in meta and _const(meta["nargs"]) not in (None, 0, 1):
                kind = "values"
            else:
                kind = "value"
        rows.extend((name, field, kind) for name in longs)
    return rows


def _namespace_classes(tree, read) -> list:
    """0.5.23: ServerArgs collects its fields from namespace classes (``_INPUT_NAMESPACES = [Model, Spec,
    ...]``, each imported from ``sglang.srt.arg_groups.fields.<module>``): those ClassDefs, read with ``read``."""
    names = next(
        (
            [ast.unparse(e) for e in n.value.elts]
            for n in tree.body
            if isinstance(n, ast.Assign)
            and getattr(n.targets[0], "id", "") == "_INPUT_NAMESPACES"
            and isinstance(n.value, ast.List)
        ),
        None,
    )
    if not names:
        return []
    if read is None:
        raise ValueError(
            "ServerArgs takes its fields from _INPUT_NAMESPACES: the tree's other files are needed"
        )
    where = {
        a.asname or a.name: n.module
        for n in tree.body
        if isinstance(n, ast.ImportFrom) and n.module
        for a in n.names
    }
    classes = []
    for name in names:
        module = where.get(name)
        if module is None:
            raise ValueError(f"_INPUT_NAMESPACES names {name}, which server_args.py does not import")
        mod = ast.parse(read(module.replace(".", "/") + ".py"))
        cls = next((n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if cls is None:
            raise ValueError(f"{module} has no class {name}")
        classes.append(cls)
    return classes


def extract_flags(source: str | bytes, read=None) -> list[tuple[str, str, str]]:
    """(flag, dest, kind) for every option string that ServerArgs.add_cli_args registers.

    ``read(relpath) -> bytes`` reads other files of the same tree (needed from 0.5.23 on)."""
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    func = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    rows = []
    if any(
        isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1] == "add_cli_args_from_dataclass"
        for n in ast.walk(func)
    ):
        for holder in [cls, *_namespace_classes(tree, read)]:
            rows.extend(_dataclass_rows(holder))
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        names = [_const(a) for a in node.args]
        if not all(isinstance(n, str) for n in names):
            raise ValueError(f"line {node.lineno}: option strings that are not literals: {ast.unparse(node)}")
        kw = {k.arg: k.value for k in node.keywords}
        longs = [n for n in names if n.startswith("--")]
        if not longs:
            continue
        dest = _const(kw["dest"]) if "dest" in kw else longs[0][2:].replace("-", "_")
        kind, longs = _action_kind(kw.get("action"), kw.get("nargs"), longs)
        rows.extend((name, dest, kind) for name in longs)
    seen = {}
    for flag, dest, kind in rows:
        if flag in seen and seen[flag] != (dest, kind):
            raise ValueError(f"{flag} is registered twice differently")
        seen[flag] = (dest, kind)
    return sorted((f, d, k) for f, (d, k) in seen.items())


def patched_flags(wheel: str, patches_dir: str) -> tuple[list, str]:
    """The flags of the wheel with the series applied in memory, and where they come from."""
    patches = series.read_series_dir(patches_dir)
    plan = tree_wheel.plan_wheel(wheel, None, patches)
    try:

        def read(rel):
            data = plan["contents"].get(rel)
            return plan["wheel"].read(rel) if data is None else data

        rel = Path(patches_dir).resolve()
        rel = rel.relative_to(REPO) if rel.is_relative_to(REPO) else rel
        origin = f"{plan['wheel'].name} + the series in {rel}" if patches else plan["wheel"].name
        return extract_flags(read(SERVER_ARGS), read), origin
    finally:
        disk.close_plan(plan)


def render(rows, origin: str, version: str) -> str:
    head = [
        f"# launch_server flags of sglang {version} with the dflash-deploy patch series: flag, dest, kind",
        f"# generated by scripts/extract_sglang_flags.py from {SERVER_ARGS} of {origin}",
        (
            "# (ast over ServerArgs.add_cli_args and the annotated fields it registers; nothing imported). "
            "Regenerate after changing the series."
        ),
    ]
    width = max(len(f) for f, _, _ in rows)
    dwidth = max(len(d) for _, d, _ in rows)
    return "\n".join(head + [f"{f:<{width}}  {d:<{dwidth}}  {k}" for f, d, k in rows]) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="0.5.11")
    ap.add_argument("--tree", help="a built tree (holds sglang/) instead of wheel + series")
    ap.add_argument("--wheel", help="the sglang wheel (default: the pinned one, downloaded once)")
    ap.add_argument("--patches-dir", help="default: files/patches/sglang/<version>")
    ap.add_argument("--out", help="default: files/patches/sglang/<version>/server-flags.txt; '-' for stdout")
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args(argv)
    patches_dir = args.patches_dir or str(REPO / "files" / "patches" / "sglang" / args.version)
    out = args.out or str(Path(patches_dir) / "server-flags.txt")
    if args.tree:
        tree = Path(args.tree)
        rows = extract_flags((tree / SERVER_ARGS).read_bytes(), lambda rel: (tree / rel).read_bytes())
        origin = f"the tree {tree.name}"
    else:
        wheel = args.wheel
        if not wheel:
            from sglang_wheel import sglang_wheel  # the pinned wheel, cached in .cache/wheels

            wheel = str(sglang_wheel(version=args.version))
        rows, origin = patched_flags(wheel, patches_dir)
    text = render(rows, origin, args.version)
    if args.check:
        current = Path(out).read_text() if Path(out).is_file() else ""
        if current != text:
            print(f"{out} is stale: run scripts/extract_sglang_flags.py", file=sys.stderr)
            return 1
        return 0
    if out == "-":
        sys.stdout.write(text)
    else:
        Path(out).write_text(text)
        print(f"{out}: {sum(1 for ln in text.splitlines() if ln.startswith('--'))} flags")
    return 0


if __name__ == "__main__":
    sys.exit(main())
