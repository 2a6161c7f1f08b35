"""Every conditional in the toolkit's YAML is a string: an assert's ``that`` item or a ``when`` written as a plain
YAML scalar with ": " in it (a regex, a message) parses as a mapping, which ansible-core 2.19 refuses only when the
task runs ("Conditional expressions must be strings"), neither ansible-lint nor yamllint says so, and a Molecule
verify step that is rarely reached can hide it for a long time."""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
TOPS = ["roles", "playbooks", "molecule", "gpu-harness", "inventory", "lab"]
KEYS = ("when", "changed_when", "failed_when", "until")
ASSERTS = ("assert", "ansible.builtin.assert", "ansible.legacy.assert")


class _Loader(yaml.SafeLoader):
    """Safe loading with Ansible's own tags (!unsafe, !vault) read as plain values."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node)
                              if isinstance(node, yaml.ScalarNode) else None)


def _files():
    for top in TOPS:
        for path in sorted((ROOT / top).rglob("*.yml")):
            # vars/ and defaults/ hold data (the flag rules' "when" is a mapping the rules engine reads)
            if not {".molecule", "vars", "defaults"} & set(path.parts) and "heldout" not in str(path):
                yield path
    yield from sorted(ROOT.glob("*.yml"))


def _bad(value) -> bool:
    items = value if isinstance(value, list) else [value]
    return any(not isinstance(i, str | bool) for i in items)


def _walk(node, where, found):
    if isinstance(node, dict):
        for key in KEYS:
            if key in node and _bad(node[key]):
                found.append(f"{where}: {key}: {node[key]!r}")
        for mod in ASSERTS:
            if isinstance(node.get(mod), dict) and "that" in node[mod] and _bad(node[mod]["that"]):
                bad = [i for i in (node[mod]["that"] if isinstance(node[mod]["that"], list) else [node[mod]["that"]])
                       if not isinstance(i, str | bool)]
                found.append(f"{where}: task {node.get('name')!r}: that: {bad!r}")
        for value in node.values():
            _walk(value, where, found)
    elif isinstance(node, list):
        for value in node:
            _walk(value, where, found)


def test_every_conditional_is_a_string():
    found = []
    for path in _files():
        try:
            docs = list(yaml.load_all(path.read_text(), Loader=_Loader))
        except yaml.YAMLError:
            continue  # yamllint reports those
        for doc in docs:
            _walk(doc, path.relative_to(ROOT), found)
    assert not found, "conditionals that YAML reads as something else than a string:\n" + "\n".join(found)


@pytest.mark.parametrize("text, bad", [
    ("- assert:\n    that:\n      - x | regex_search('a: b')\n", True),
    ("- assert:\n    that:\n      - >-\n        x | regex_search('a: b')\n", False),
    ("- debug: {}\n  when: a == 1\n", False),
    ("- debug: {}\n  when: [a, {b: c}]\n", True),
])
def test_the_check_sees_a_mapping_where_a_string_was_meant(text, bad):
    found = []
    _walk(yaml.load(text, Loader=_Loader), "t", found)
    assert bool(found) is bad
