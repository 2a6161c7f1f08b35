"""PEP 440 versions and version specifiers, for checking installed distributions on a host.

Pure logic with no Ansible import and no third-party import: the hosts' interpreters cannot be
assumed to have ``packaging``. Written from the specification (PEP 440: normalisation, ordering,
local versions, the specifier operators). ``contains`` always accepts pre-releases, as a check of
what is *installed* must (``pip check`` does the same); choosing among candidates is the
resolver's job (uv), not this module's.
"""

from __future__ import annotations

import re

_VERSION_RE = re.compile(
    r"""^\s*v?
    (?:(?P<epoch>[0-9]+)!)?
    (?P<release>[0-9]+(?:\.[0-9]+)*)
    (?:[-_.]?(?P<pre_l>alpha|beta|preview|pre|a|b|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?:-(?P<post_n1>[0-9]+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)
_PRE_NAMES = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "c": "rc", "rc": "rc", "pre": "rc",
              "preview": "rc"}
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}
_OPS = ("===", "~=", "==", "!=", "<=", ">=", "<", ">")
_SPEC_RE = re.compile(r"^\s*(===|~=|==|!=|<=|>=|<|>)\s*([^\s,;()]+)\s*$")


class InvalidVersion(ValueError):
    """Not a PEP 440 version."""


class InvalidSpecifier(ValueError):
    """Not a PEP 440 version specifier."""


class Version:
    """A parsed PEP 440 version; ``str()`` is the normalised form; ordering follows PEP 440."""

    __slots__ = ("_key", "dev", "epoch", "local", "post", "pre", "release")

    def __init__(self, text):
        m = _VERSION_RE.match(str(text))
        if not m:
            raise InvalidVersion(f"{text!r} is not a PEP 440 version")
        self.epoch = int(m.group("epoch") or 0)
        self.release = tuple(int(x) for x in m.group("release").split("."))
        self.pre = None
        if m.group("pre_l"):
            self.pre = (_PRE_NAMES[m.group("pre_l").lower()], int(m.group("pre_n") or 0))
        self.post = None
        if m.group("post_n1") is not None:
            self.post = int(m.group("post_n1"))
        elif m.group("post_l"):
            self.post = int(m.group("post_n2") or 0)
        self.dev = int(m.group("dev_n") or 0) if m.group("dev_l") else None
        self.local = None
        if m.group("local"):
            self.local = tuple(int(p) if p.isdigit() else p.lower()
                               for p in re.split(r"[-_.]", m.group("local")))
        self._key = self._sort_key()

    def _sort_key(self):
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        if self.pre is None and self.post is None and self.dev is not None:
            pre = (0,)                       # 1.0.dev1 sorts before 1.0a1
        elif self.pre is None:
            pre = (2,)
        else:
            pre = (1, _PRE_RANK[self.pre[0]], self.pre[1])
        post = (0,) if self.post is None else (1, self.post)
        dev = (1,) if self.dev is None else (0, self.dev)
        if self.local is None:
            local = (0,)
        else:  # numeric segments sort above alphanumeric ones; more segments sort higher
            local = (1, tuple((1, p, "") if isinstance(p, int) else (0, 0, p) for p in self.local))
        return (self.epoch, tuple(release), pre, post, dev, local)

    @property
    def public(self):
        return str(self).split("+", 1)[0]

    @property
    def base_version(self):
        epoch = f"{self.epoch}!" if self.epoch else ""
        return epoch + ".".join(str(x) for x in self.release)

    @property
    def is_prerelease(self):
        return self.pre is not None or self.dev is not None

    @property
    def is_postrelease(self):
        return self.post is not None

    def __str__(self):
        out = self.base_version
        if self.pre is not None:
            out += f"{self.pre[0]}{self.pre[1]}"
        if self.post is not None:
            out += f".post{self.post}"
        if self.dev is not None:
            out += f".dev{self.dev}"
        if self.local is not None:
            out += "+" + ".".join(str(p) for p in self.local)
        return out

    def __repr__(self):
        return f"Version({str(self)!r})"

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, Version) and self._key == other._key

    def __lt__(self, other):
        return self._key < other._key

    def __le__(self, other):
        return self._key <= other._key

    def __gt__(self, other):
        return self._key > other._key

    def __ge__(self, other):
        return self._key >= other._key


def parse_version(text):
    """Version or None when ``text`` is not a PEP 440 version."""
    try:
        return Version(text)
    except InvalidVersion:
        return None


def normalize_version(text):
    """The normalised form of a PEP 440 version, or the text itself (stripped) when it is not one."""
    v = parse_version(text)
    return str(v) if v is not None else str(text).strip()


def same_version(a, b):
    """True when both are the same version *including* the local label (2.11.0 != 2.11.0+cu128):
    what 'already installed at that version' means for a layer."""
    va, vb = parse_version(a), parse_version(b)
    if va is None or vb is None:
        return str(a).strip() == str(b).strip()
    return va == vb


def _components(v, release_len=None):
    """[epoch, release..., pre/post/dev strings] of a version, release zero-padded to release_len."""
    release = list(v.release)
    if release_len is not None and len(release) < release_len:
        release += [0] * (release_len - len(release))
    out = [v.epoch, *release]
    if v.pre is not None:
        out.append(f"{v.pre[0]}{v.pre[1]}")
    if v.post is not None:
        out.append(f"post{v.post}")
    if v.dev is not None:
        out.append(f"dev{v.dev}")
    return out


def _prefix_match(candidate, prefix_text):
    prefix = Version(prefix_text)
    want = _components(prefix)
    got = _components(Version(candidate.public), len(prefix.release))
    if prefix.pre is None and prefix.post is None and prefix.dev is None:
        got = got[: 1 + len(prefix.release)]
    return got[: len(want)] == want


class Specifier:
    """One clause such as ``>=2.1`` or ``==1.*``."""

    def __init__(self, text):
        m = _SPEC_RE.match(text)
        if not m:
            raise InvalidSpecifier(f"{text!r} is not a version specifier")
        self.op, self.version = m.group(1), m.group(2)
        if self.op == "===":
            return
        wildcard = self.version.endswith(".*")
        if wildcard and self.op not in ("==", "!="):
            raise InvalidSpecifier(f"{text!r}: '.*' only goes with == and !=")
        target = self.version[:-2] if wildcard else self.version
        parsed = parse_version(target)
        if parsed is None:
            raise InvalidSpecifier(f"{text!r}: {target!r} is not a PEP 440 version")
        if parsed.local is not None and (wildcard or self.op not in ("==", "!=")):
            raise InvalidSpecifier(f"{text!r}: a local version only goes with == and !=")
        if self.op == "~=" and len(parsed.release) < 2:
            raise InvalidSpecifier(f"{text!r}: ~= needs at least two release segments")
        self.wildcard = wildcard
        self.parsed = parsed

    def __str__(self):
        return f"{self.op}{self.version}"

    def contains(self, version):
        """Whether ``version`` (str or Version) satisfies this clause (pre-releases allowed)."""
        if self.op == "===":
            return str(version).strip().lower() == self.version.lower()
        v = version if isinstance(version, Version) else parse_version(version)
        if v is None:
            return False
        spec = self.parsed
        if self.op in ("==", "!="):
            if self.wildcard:
                hit = _prefix_match(v, self.version[:-2])
            elif spec.local is None:
                hit = Version(v.public) == spec
            else:
                hit = v == spec
            return hit if self.op == "==" else not hit
        if self.op == "~=":
            prefix = ".".join(str(x) for x in spec.release[:-1])
            if spec.epoch:
                prefix = f"{spec.epoch}!{prefix}"
            return Version(v.public) >= spec and _prefix_match(v, prefix)
        if self.op == "<=":
            return Version(v.public) <= spec
        if self.op == ">=":
            return Version(v.public) >= spec
        if self.op == "<":
            # <V never admits V's own pre-releases unless V is one: a final V acts as V.dev0
            if spec.is_prerelease:
                return v < spec
            return v < Version(f"{spec}.dev0")
        # ">": never V's local versions, nor the post-releases of V unless V is one itself
        public = Version(v.public)
        if not public > spec:
            return False
        if spec.dev is not None or spec.post is not None:
            return True
        same_release = (public.epoch, public._key[1]) == (spec.epoch, spec._key[1])
        return not (same_release and public.pre == spec.pre)


class SpecifierSet:
    """Comma-separated clauses, all of which must hold (an empty set holds for every version)."""

    def __init__(self, text=""):
        text = (text or "").strip()
        self.specs = [Specifier(part) for part in text.split(",")] if text else []

    def __str__(self):
        return ",".join(str(s) for s in self.specs)

    def __bool__(self):
        return bool(self.specs)

    def contains(self, version):
        return all(s.contains(version) for s in self.specs)
