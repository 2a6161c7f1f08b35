"""What each supported sglang (files/patches/sglang/<version>/, with this toolkit's patch series) accepts and does,
per version: the one place the fallback rules (``sglang.*`` facts of their context), the validation, the smoke test
and the diagnosis take these facts from.

The facts are data: ``files/patches/sglang/versions.yml`` (each with its source in that version's wheel;
tests/unit/tree/test_versions_data.py and tests/unit/common/test_sglang_facts.py check them against the wheels).
The controller reads that file (``load``, ``facts``); code that runs on a host (the wait, the smoke test, the
diagnosis) gets a version's facts as a plain dict in its module arguments (``Facts.host``) and never reads it.
The launch_server flags of each version are data too: files/patches/sglang/<version>/server-flags.txt
(dflash_instances/server_flags.py). No Ansible import.
"""

from __future__ import annotations

import os
import re

# ServerArgs.port, where a server listens without --port: 30000 in every supported version (versions.yml
# default_port, checked per version by tests/unit/common/test_sglang_facts.py)
DEFAULT_PORT = 30000

VERSIONS_FILE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "files",
                                              "patches", "sglang", "versions.yml"))
_VERSION_RE = re.compile(r"^\d+(?:\.\d+)*$")
_CLAUSE_RE = re.compile(r"^\s*(>=|<=|==|!=|<|>)\s*(\d+(?:\.\d+)*)\s*$")
_CACHE: dict = {}


class SglangError(ValueError):
    """A version this toolkit has no folder for, or a bad range."""


def load(path: str | None = None) -> dict:
    """versions.yml as a dict (read once per path). Controller only: hosts have no copy of it."""
    path = path or VERSIONS_FILE
    if path not in _CACHE:
        import yaml  # the controller's (ansible-core needs PyYAML); never imported on a host

        with open(path, encoding="utf-8") as fh:
            _CACHE[path] = yaml.safe_load(fh)
    return _CACHE[path]


def supported(doc: dict | None = None) -> list:
    return [str(v) for v in (doc or load()).get("supported") or []]


def default_version(doc: dict | None = None) -> str:
    return str((doc or load())["default"])


def version_error(version, doc: dict | None = None) -> str | None:
    """Why ``version`` cannot be chosen (in words, listing the supported ones), or None."""
    known = supported(doc)
    if isinstance(version, str) and version in known:
        return None
    return (f"sglang {version!r} is not a version this toolkit supports (supported: {', '.join(known)}; each has "
            "its folder files/patches/sglang/<version>/ with its wheels, patch series and flag table)")


def _release(version: str) -> tuple:
    if not isinstance(version, str) or not _VERSION_RE.match(version):
        raise SglangError(f"{version!r} is not a release number like 0.5.17")
    parts = [int(x) for x in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def in_range(version: str, spec: str | None) -> bool:
    """``version`` (a release number) within ``spec``, comma-separated comparisons of release numbers
    (``">=0.5.17,<0.5.23"``); an empty spec holds for every version. Written here rather than taken from
    dflash_layers/pep440.py: that package imports this one (an import circle), and these ranges compare
    release numbers only."""
    if not spec:
        return True
    have = _release(version)
    for clause in str(spec).split(","):
        m = _CLAUSE_RE.match(clause)
        if not m:
            raise SglangError(f"range {spec!r}: {clause.strip()!r} is not a comparison like >=0.5.17")
        op, want = m.group(1), _release(m.group(2))
        ok = {">=": have >= want, "<=": have <= want, "==": have == want, "!=": have != want, "<": have < want,
              ">": have > want}[op]
        if not ok:
            return False
    return True


def range_error(spec) -> str | None:
    """Why ``spec`` is not a range (None when it is)."""
    try:
        in_range("0.0.0", spec)
    except SglangError as exc:
        return str(exc)
    return None


def either(backends) -> str:
    """``('triton', 'flashinfer')`` -> ``'triton or flashinfer'`` (for messages)."""
    backends = list(backends)
    return " or ".join(backends) if len(backends) < 3 else ", ".join(backends[:-1]) + " or " + backends[-1]


def _value(entry: dict, key: str, default=None):
    fact = entry.get(key)
    return fact.get("value", default) if isinstance(fact, dict) else default


# versions.yml's Blackwell keys -> the SM majors each names (sglang's is_blackwell: capability 10, 11 or 12)
_BLACKWELL_KEYS = {"any_blackwell": (10, 11, 12), "sm120": (12,), "sm100_sm110": (10, 11)}


class Facts:
    """One version's facts (its entry of versions.yml)."""

    def __init__(self, version: str, entry: dict):
        self.version = str(version)
        self.entry = entry or {}
        e = self.entry
        self.attention_backends = tuple(_value(e, "attention_backends", ()))
        self.speculative_algorithms = tuple(_value(e, "speculative_algorithms", ()))
        self.registry = bool((e.get("speculative_algorithms") or {}).get("registry", False))
        self.hopper_default_attention = _value(e, "hopper_default_attention")
        self.tree_mask_attention_backends = tuple(_value(e, "tree_mask_attention_backends", ()))
        self.no_triton_attention_archs = tuple(_value(e, "no_triton_attention_archs", ()))
        self.default_port = _value(e, "default_port", DEFAULT_PORT)
        self.meta_info_keys = dict(_value(e, "meta_info_keys", {}) or {})
        self.mamba_radix_cache_auto = bool(_value(e, "mamba_radix_cache_auto", False))
        self.mamba_strategy_flag = (e.get("mamba_radix_cache_auto") or {}).get("flag")
        self.ddtree_refuses = frozenset(_value(e, "ddtree_refuses", ()) or ())
        self.ddtree_refused_draft_heads = dict(_value(e, "ddtree_refused_draft_heads", {}) or {})
        self.gdn_flashinfer_needs_bf16_state = bool(_value(e, "blackwell_gdn_flashinfer_needs_bf16_state", False))
        self.gdn_tree_verify_with_flashinfer = bool(_value(e, "gdn_tree_verify_with_flashinfer", False))
        self.dflash_overlap = bool(_value(e, "dflash_overlap_scheduler", False))
        self.dflash_refuses = tuple(_value(e, "dflash_refuses", ()) or ())
        pins = dict(e.get("pins") or {})
        pins.pop("source", None)
        self.pins = {str(k): str(v) for k, v in pins.items()}
        self.python = str(_value(e, "python", "") or "")
        self.python_wheels = tuple((e.get("python") or {}).get("wheels") or ())
        self.torch_cuda = _value(e, "torch_cuda")
        self._blackwell = {}
        for key, allowed in (_value(e, "blackwell_hybrid_gdn_attention", {}) or {}).items():
            for major in _BLACKWELL_KEYS.get(key, ()):
                self._blackwell[major] = tuple(allowed)

    def blackwell_hybrid_gdn_attention(self, sm_major: int):
        """The attention backends this version allows for hybrid Gated DeltaNet models on a Blackwell GPU of this
        SM major (10, 11, 12), or None (not Blackwell: no such rule)."""
        return self._blackwell.get(int(sm_major)) if sm_major is not None else None

    @property
    def meta_accepted(self) -> str:
        return self.meta_info_keys.get("accepted") or "spec_accepted_drafts"

    def host(self) -> dict:
        """What code on a host needs of this version (module arguments of the wait and the smoke test): plain data."""
        return {"version": self.version, "meta_info_keys": self.meta_info_keys, "pins": self.pins,
                "tree_mask_attention_backends": list(self.tree_mask_attention_backends),
                "hopper_default_attention": self.hopper_default_attention,
                "mamba_strategy_flag": self.mamba_strategy_flag, "dflash_overlap": self.dflash_overlap}


def facts(version: str | None = None, doc: dict | None = None) -> Facts:
    """The facts of ``version`` (the default version when None). Raises SglangError for an unsupported one."""
    doc = doc or load()
    version = default_version(doc) if version is None else str(version)
    err = version_error(version, doc)
    if err:
        raise SglangError(err)
    return Facts(version, (doc.get("versions") or {}).get(version) or {})


def host_facts(doc: dict | None = None) -> dict:
    """{version: Facts.host()} of every supported version (what the release stage hands its host modules)."""
    doc = doc or load()
    return {v: facts(v, doc).host() for v in supported(doc)}


# ----------------------------------------------------------------------------- meta_info (host side)

# every name a supported version gives the accepted / proposed draft counts of /generate's meta_info
ACCEPTED_KEYS = ("spec_num_correct_drafts", "spec_accepted_drafts")
PROPOSED_KEYS = ("spec_num_proposed_drafts", "spec_proposed_drafts")


def accepted_drafts(meta_info: dict, keys: dict | None = None):
    """The accepted-draft count of a /generate meta_info: under the version's own name (``keys``: its
    meta_info_keys), else under any name a supported version uses (0.5.11: spec_accepted_drafts; from 0.5.17:
    spec_num_correct_drafts); None when absent."""
    mi = meta_info or {}
    order = [(keys or {}).get("accepted")] + list(ACCEPTED_KEYS)
    for k in order:
        if k and isinstance(mi.get(k), int | float) and not isinstance(mi.get(k), bool):
            return mi[k]
    return None


def proposed_drafts(meta_info: dict, keys: dict | None = None):
    """The proposed-draft count, as ``accepted_drafts`` reads the accepted one."""
    mi = meta_info or {}
    order = [(keys or {}).get("proposed")] + list(PROPOSED_KEYS)
    for k in order:
        if k and isinstance(mi.get(k), int | float) and not isinstance(mi.get(k), bool):
            return mi[k]
    return None
