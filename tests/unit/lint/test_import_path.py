"""One import path (docs/design.md, "Import path"): the toolkit's code is imported as ansible.module_utils.<pkg>
everywhere, with no ImportError fallback and no sys.path insert of module_utils/; no import circle between its
files or its packages (scripts/module_graph.py)."""

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CODE = ["module_utils", "library", "filter_plugins", "callback_plugins", "action_plugins", "scripts", "tests", "lab",
        "gpu-harness", "benchmarks"]

spec = importlib.util.spec_from_file_location("module_graph", ROOT / "scripts" / "module_graph.py")
graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(graph)


def _files():
    for top in CODE:
        yield from sorted((ROOT / top).rglob("*.py"))


def _toolkit_import(node) -> bool:
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    return any(n.startswith(("ansible.module_utils.dflash", "dflash_")) for n in names) or (
        isinstance(node, ast.ImportFrom) and node.module == "ansible.module_utils"
        and any(a.name.startswith("dflash") for a in node.names))


def test_no_importerror_fallback_and_no_plain_or_relative_import_of_the_toolkit():
    found = []
    for path in _files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Try)
                    and any(isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers)
                    and any(isinstance(n, ast.Import | ast.ImportFrom) and _toolkit_import(n) for n in ast.walk(node))):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: ImportError fallback")
            if isinstance(node, ast.ImportFrom) and node.level and "module_utils" in path.parts:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: relative import")
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                # a plain dflash_* name is the toolkit's code by a name it no longer has (or never had)
                if not getattr(node, "level", 0) and any(n.split(".")[0].startswith("dflash_") for n in names):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: plain import of module_utils")
    assert found == []


def test_no_sys_path_insert_of_module_utils():
    found = []
    for path in _files():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and ast.unparse(node.func.value) == "sys.path" and "module_utils" in ast.unparse(node)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_the_tree_has_no_import_circle():
    st = graph.stats(graph.read_tree())
    assert st["file_cycles"] == [] and st["package_cycles"] == []


def test_the_graph_reads_every_import_form_and_finds_circles():
    modules = {
        "dflash_a": "from ansible.module_utils.dflash_b.x import f\n",
        "dflash_b": "",
        "dflash_b.x": "try:\n    from ansible.module_utils import dflash_a\nexcept ImportError:\n    import dflash_a\n",
        "dflash_b.y": "from .x import f\nfrom ansible.module_utils.dflash_b import x\n",
        "dflash_c": "import os\n",
    }
    g = graph.imports(modules)
    assert g == {"dflash_a": {"dflash_b.x"}, "dflash_b": set(), "dflash_b.x": {"dflash_a"},
                 "dflash_b.y": {"dflash_b.x"}, "dflash_c": set()}
    assert graph.cycles(g) == [["dflash_a", "dflash_b.x"]]
    assert graph.cycles(graph.package_graph(g)) == [["dflash_a", "dflash_b"]]
    st = graph.stats(modules)
    assert (st["packages"], st["loose"]) == (1, 2)
    assert '"dflash_b.y" -> "dflash_b.x";' in graph.dot(modules)
