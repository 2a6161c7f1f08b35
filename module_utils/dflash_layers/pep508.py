"""PEP 508 requirements (``name[extras] specifiers ; markers``) and environment markers.

Pure logic, no Ansible import, no third-party import (hosts may lack ``packaging``). Written from
PEP 508 and the marker rules of the packaging specifications: a comparison whose right-hand side
forms a valid PEP 440 specifier with its operator is a version comparison, anything else is a
string comparison; ``extra`` values compare as normalised names.
"""

from __future__ import annotations

import re

from ansible.module_utils.dflash_layers.pep440 import InvalidSpecifier, Specifier, SpecifierSet

MARKER_VARIABLES = (
    "implementation_name", "implementation_version", "os_name", "platform_machine",
    "platform_python_implementation", "platform_release", "platform_system", "platform_version",
    "python_full_version", "python_version", "sys_platform", "extra",
)
_ALIASES = {"os.name": "os_name", "sys.platform": "sys_platform", "platform.version": "platform_version",
            "platform.machine": "platform_machine",
            "platform.python_implementation": "platform_python_implementation",
            "python_implementation": "platform_python_implementation"}
_NAME_RE = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")
_TOKEN_RE = re.compile(
    r"""\s*(?:
      (?P<str>'[^']*'|"[^"]*")
     |(?P<op>===|==|!=|<=|>=|~=|<|>)
     |(?P<paren>[()])
     |(?P<word>[A-Za-z_][A-Za-z0-9_.]*)
    )""", re.VERBOSE)


class InvalidRequirement(ValueError):
    """Not a PEP 508 requirement (or its marker is not valid)."""


def canonical_name(name):
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


class Requirement:
    """``name``, ``extras`` (set of normalised names), ``specifier`` (SpecifierSet), ``url``, ``marker``
    (a parsed tree or None); ``key`` is the normalised name."""

    def __init__(self, text):
        self.text = str(text).strip()
        body, marker_text = self.text, None
        m = _NAME_RE.match(body)
        if not m:
            raise InvalidRequirement(f"{text!r}: no project name")
        self.name = m.group(1)
        rest = body[m.end():].lstrip()
        self.extras = set()
        if rest.startswith("["):
            end = rest.find("]")
            if end < 0:
                raise InvalidRequirement(f"{text!r}: unclosed '['")
            self.extras = {canonical_name(e.strip()) for e in rest[1:end].split(",") if e.strip()}
            rest = rest[end + 1:].lstrip()
        self.url = None
        if rest.startswith("@"):
            url_and_rest = rest[1:].strip()
            # the URL ends at whitespace; a marker after it needs whitespace before ';'
            parts = re.split(r"\s+;\s*|\s*;\s+", url_and_rest, maxsplit=1)
            self.url = parts[0].strip()
            spec_text = ""
            marker_text = parts[1] if len(parts) > 1 else None
        else:
            spec_text, sep, marker_rest = rest.partition(";")
            marker_text = marker_rest if sep else None
            spec_text = spec_text.strip()
            if spec_text.startswith("(") and spec_text.endswith(")"):
                spec_text = spec_text[1:-1]
        try:
            self.specifier = SpecifierSet(spec_text)
        except InvalidSpecifier as exc:
            raise InvalidRequirement(f"{text!r}: {exc}") from None
        self.marker = parse_marker(marker_text) if marker_text is not None and marker_text.strip() else None
        self.key = canonical_name(self.name)

    def applies(self, env, extras=("",)):
        """Whether the marker holds in ``env`` for any of ``extras`` ('' = no extra requested)."""
        if self.marker is None:
            return True
        return any(evaluate_marker(self.marker, dict(env, extra=e)) for e in extras)

    def __str__(self):
        return self.text


# --------------------------------------------------------------------------- markers

def _tokens(text):
    pos, out = 0, []
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise InvalidRequirement(f"marker {text!r}: cannot parse at {text[pos:]!r}")
        pos = m.end()
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
    return out


def parse_marker(text):
    """Parse a marker expression into a tree: ('or'|'and', [children]) or ('cmp', lhs, op, rhs)
    where lhs/rhs are ('var', name) or ('str', value)."""
    toks = _tokens(text)
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else (None, None)

    def take():
        nonlocal pos
        tok = peek()
        pos += 1
        return tok

    def value():
        kind, val = take()
        if kind == "str":
            return ("str", val[1:-1])
        if kind == "word":
            name = _ALIASES.get(val, val)
            if name not in MARKER_VARIABLES:
                raise InvalidRequirement(f"marker {text!r}: unknown variable {val!r}")
            return ("var", name)
        raise InvalidRequirement(f"marker {text!r}: expected a variable or a quoted string, got {val!r}")

    def atom():
        if peek() == ("paren", "("):
            take()
            node = disjunction()
            if take() != ("paren", ")"):
                raise InvalidRequirement(f"marker {text!r}: missing ')'")
            return node
        lhs = value()
        kind, val = take()
        if kind == "op":
            op = val
        elif (kind, val) == ("word", "in"):
            op = "in"
        elif (kind, val) == ("word", "not") and peek() == ("word", "in"):
            take()
            op = "not in"
        else:
            raise InvalidRequirement(f"marker {text!r}: expected an operator, got {val!r}")
        return ("cmp", lhs, op, value())

    def conjunction():
        items = [atom()]
        while peek() == ("word", "and"):
            take()
            items.append(atom())
        return items[0] if len(items) == 1 else ("and", items)

    def disjunction():
        items = [conjunction()]
        while peek() == ("word", "or"):
            take()
            items.append(conjunction())
        return items[0] if len(items) == 1 else ("or", items)

    tree = disjunction()
    if pos != len(toks):
        raise InvalidRequirement(f"marker {text!r}: unexpected {toks[pos][1]!r}")
    return tree


def _compare(lhs, op, rhs):
    if op in ("in", "not in"):
        return (lhs in rhs) == (op == "in")
    try:
        return Specifier(f"{op}{rhs}").contains(lhs)
    except InvalidSpecifier:
        pass
    if op == "==":
        return lhs == rhs
    if op == "!=":
        return lhs != rhs
    if op in ("<", "<=", ">", ">="):
        return {"<": lhs < rhs, "<=": lhs <= rhs, ">": lhs > rhs, ">=": lhs >= rhs}[op]
    return False  # ~= / === between non-versions: undefined, never true


def evaluate_marker(tree, env):
    """Evaluate a parsed marker in ``env`` (marker variable -> str; a missing variable is '')."""
    kind = tree[0]
    if kind == "and":
        return all(evaluate_marker(t, env) for t in tree[1])
    if kind == "or":
        return any(evaluate_marker(t, env) for t in tree[1])
    _, lhs, op, rhs = tree
    is_extra = ("var", "extra") in (lhs, rhs)

    def resolve(node):
        val = str(env.get(node[1], "")) if node[0] == "var" else node[1]
        return canonical_name(val) if is_extra and val else val

    return _compare(resolve(lhs), op, resolve(rhs))


# The marker environment of an interpreter, computed by that interpreter: MARKER_ENV_FUNC defines
# ``_marker_env()`` (needs json, os, platform, sys imported); MARKER_ENV_CODE prints it as JSON.
MARKER_ENV_FUNC = (
    "def _marker_env():\n"
    "    i = sys.implementation.version\n"
    "    iv = f'{i.major}.{i.minor}.{i.micro}'\n"
    "    if i.releaselevel != 'final':\n"
    "        iv += i.releaselevel[0] + str(i.serial)\n"
    "    return {'implementation_name': sys.implementation.name, 'implementation_version': iv,"
    " 'os_name': os.name, 'platform_machine': platform.machine(),"
    " 'platform_python_implementation': platform.python_implementation(),"
    " 'platform_release': platform.release(), 'platform_system': platform.system(),"
    " 'platform_version': platform.version(), 'python_full_version': platform.python_version(),"
    " 'python_version': '.'.join(platform.python_version_tuple()[:2]), 'sys_platform': sys.platform}\n"
)
MARKER_ENV_CODE = "import json, os, platform, sys\n" + MARKER_ENV_FUNC + "print(json.dumps(_marker_env()))\n"
