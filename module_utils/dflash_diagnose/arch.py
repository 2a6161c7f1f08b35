"""GPU generations and what runs on them: the facts a remedy needs when a backend, dtype or kernel refuses
the GPU (cause ``gpu_arch_refused``), and the generation a message names.

Data and pure functions; no Ansible import. The SM ranges are the ones the kernels' own checks state
(sglang 0.5.x server_args / attention backends, flash-attn-4's ``Arch`` check, vLLM's dtype check).
"""

from __future__ import annotations

import re

# words of a message that name a GPU generation or compute capability
ARCH_WORDS = (r"(?:\bsm_?\d{2,3}[a-z]?\b|\bSM ?\d{2,3}\b|\bSM ?[<>=]=? ?\d{2,3}\b|\bSM ?\d{1,2}\.(?:\d|x)\b|compute capabilit(?:y|ies)"
              r"|\bBlackwell\b|\bHopper\b|\bAmpere\b|\bAda\b|\bVolta\b|\bTuring\b|\bPascal\b|Arch\.sm_\d+"
              # Triton / vLLM: "fp8e4nv data type is not supported on CUDA arch < 89", "arch 90", "arch >= 80"
              r"|\b(?:CUDA |GPU )?arch(?:itecture)? ?(?:[<>]=?|==)? ?\d{2,3}\b)")

# SM (major.minor) -> generation, as NVIDIA names it
_FAMILIES = [
    ((6, 0), (6, 9), "Pascal"),
    ((7, 0), (7, 2), "Volta"),
    ((7, 5), (7, 5), "Turing"),
    ((8, 0), (8, 7), "Ampere"),
    ((8, 9), (8, 9), "Ada Lovelace"),
    ((9, 0), (9, 0), "Hopper"),
    ((10, 0), (11, 9), "Blackwell (datacenter)"),
    ((12, 0), (12, 9), "Blackwell (GeForce / RTX PRO)"),
]

# generation words of a message -> the SM range they stand for
GENERATION_SM = {
    "pascal": "6.x", "volta": "7.0", "turing": "7.5", "ampere": "8.0-8.7", "ada": "8.9", "hopper": "9.0",
    "blackwell": "10.x / 12.x",
}

# sglang's attention backends and the SMs their kernels run on (None: any NVIDIA GPU sglang supports)
BACKEND_SM = {
    "fa3": ((8, 0), (9, 0)),  # FlashAttention 3 (sgl-kernel): Ampere and Hopper; refused on Blackwell
    "fa4": ((10, 0), (11, 9)),  # FlashAttention 4 (flash-attn-4, CuTe DSL): SM 10.x / 11.x
    "trtllm_mha": ((10, 0), (10, 9)),  # TensorRT-LLM kernels (flashinfer): SM100 class only
    "trtllm_mla": ((10, 0), (10, 9)),
    "cutlass_mla": ((10, 0), (10, 9)),
    "flashmla": ((9, 0), (10, 9)),
    "flashinfer": ((7, 5), (12, 9)),
    "triton": ((7, 0), (12, 9)),
}

BACKEND_WORDS = (
    (re.compile(r"\bfa4\b|\bFA4\b|flash[-_ ]attn[-_ ]?4|CuTe|\bcute\b|Arch\.sm_\d+", re.IGNORECASE), "fa4",
     "FA4 (flash-attn-4, CuTe DSL kernels)"),
    (re.compile(r"\bfa3\b|FlashAttention ?(?:v|version ?)?3|flash[-_ ]attn[-_ ]?3", re.IGNORECASE), "fa3",
     "FA3 (FlashAttention 3)"),
    (re.compile(r"trt[-_ ]?llm[-_ ]?mla", re.IGNORECASE), "trtllm_mla", "the TRT-LLM MLA kernels"),
    (re.compile(r"trt[-_ ]?llm|TRTLLM", re.IGNORECASE), "trtllm_mha", "the TRT-LLM attention kernels"),
    (re.compile(r"cutlass[-_ ]?mla", re.IGNORECASE), "cutlass_mla", "the CUTLASS MLA kernels"),
    (re.compile(r"flash[-_ ]?mla", re.IGNORECASE), "flashmla", "FlashMLA"),
    (re.compile(r"FlashAttention|flash[-_ ]attn", re.IGNORECASE), "flash_attn", "FlashAttention 2"),
)


def parse_sm(value) -> tuple[int, int] | None:
    """'12.0' / '120' / 'sm_120a' / '9.0' / (9, 0) -> (12, 0); None when not an SM."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return int(value[0]), int(value[1])
    s = re.sub(r"^sm_?", "", str(value).strip().lower()).rstrip("afx")
    m = re.fullmatch(r"(\d{1,2})\.(\d)", s)
    if m:
        return int(m.group(1)), int(m.group(2))
    if re.fullmatch(r"\d{2,3}", s):
        v = int(s)
        return v // 10, v % 10
    return None


def sm_text(sm: tuple[int, int] | None) -> str:
    return f"{sm[0]}.{sm[1]}" if sm else "?"


def family(sm: tuple[int, int] | None) -> str | None:
    if not sm:
        return None
    for lo, hi, name in _FAMILIES:
        if lo <= sm <= hi:
            return name
    return None


def runs_on(backend: str, sm: tuple[int, int] | None) -> bool | None:
    rng = BACKEND_SM.get(backend)
    if rng is None or sm is None:
        return None
    return rng[0] <= sm <= rng[1]


def attention_choice(sm: tuple[int, int] | None, refused: str | None = None) -> str:
    """The attention backends to try on a GPU of ``sm`` (the refused one left out), as flags."""
    if sm is None or sm >= (12, 0):
        order = ["flashinfer", "triton"]
    elif sm >= (10, 0):
        order = ["trtllm_mha", "flashinfer", "triton"]
    elif sm == (9, 0):
        order = ["fa3", "flashinfer", "triton"]
    elif sm >= (7, 5):
        order = ["flashinfer", "triton"]
    else:
        order = ["triton"]
    order = [b for b in order if b != refused and runs_on(b, sm) is not False]
    return " or ".join(f"`--attention-backend {b}`" for b in order[:2])


def refused_subject(text: str) -> tuple[str | None, str]:
    """(backend key or None, words for it) of the thing a message refuses."""
    for rx, key, words in BACKEND_WORDS:
        if rx.search(text or ""):
            return key, words
    if re.search(r"bfloat16|\bbf16\b", text or "", re.IGNORECASE):
        return "bf16", "bfloat16"
    if re.search(r"\bfp8\b|float8|\bfp8e[45]\w*|\be4m3\w*|\be5m2\w*", text or "", re.IGNORECASE):
        return "fp8", "FP8"
    # no kernel named, but an SM range only one backend's kernels have ("Only SM 10.x and 11.x are supported": FA4's)
    rng = re.search(r"\bSM ?(\d{1,2})\.x(?: and| or|,| to|-) ?(?:SM ?)?(\d{1,2})\.x", text or "", re.IGNORECASE)
    if rng:
        span = ((int(rng.group(1)), 0), (int(rng.group(2)), 9))
        keys = [k for k, v in BACKEND_SM.items() if v == span]
        if len(keys) == 1:
            key, words = next((k, w) for _rx, k, w in BACKEND_WORDS if k == keys[0])
            return key, f"{words} (the only attention kernels for exactly SM {rng.group(1)}.x-{rng.group(2)}.x)"
    return None, "this option or kernel"


_NEED_RES = (
    re.compile(r"compute capability (?:of )?(?:at least |>= ?)(?P<v>\d{1,2}\.\d)", re.IGNORECASE),
    re.compile(r"(?P<v>\bSM ?[<>]=? ?\d{2,3}(?: and SM ?[<>]=? ?\d{2,3})?)", re.IGNORECASE),
    re.compile(r"\bSM ?(?P<v>\d{2,3})\b(?!\.)(?: \(compute capability (?P<v2>\d{1,2}\.\w)\))?"),
    re.compile(r"\bSM (?P<v>\d{1,2}\.[\dx](?: and \d{1,2}\.[\dx])?)", re.IGNORECASE),
    re.compile(r"\bsm_?(?P<v>\d{2,3}[a-z]?)\b", re.IGNORECASE),
    re.compile(r"\b(?P<v>Blackwell|Hopper|Ampere|Ada|Volta|Turing|Pascal)\b(?: GPUs?)?(?: or newer)?", re.IGNORECASE),
)


_NOT_ON_RE = re.compile(r"(?:not supported|unsupported|not available|does not (?:run|work)|cannot (?:run|be used)) on "
                        r"(?:the |this )?(?P<v>Blackwell|Hopper|Ampere|Ada|Volta|Turing|Pascal|SM ?\d[\d.x]*|sm_\d+\w*)",
                        re.IGNORECASE)


def needed(text: str) -> str:
    """What the message says the feature needs ('compute capability >= 8.0', 'SM100', 'Blackwell')."""
    m = re.search(r"\barch(?:itecture)? ?(?P<op><=?|>=?) ?(?P<n>\d)(?P<m>\d)\b", text or "", re.IGNORECASE)
    if m:
        # Triton's "not supported on CUDA arch < 89": the feature needs that arch or newer
        sm = f"{m.group('n')}.{m.group('m')}"
        return f"SM {sm} or newer" + (f" ({family(parse_sm(sm))})" if family(parse_sm(sm)) else "")
    m = _NOT_ON_RE.search(text or "")
    if m:
        v = m.group("v")
        sm = GENERATION_SM.get(v.lower())
        return f"a GPU other than {v}" + (f" (SM {sm})" if sm else "")
    for rx in _NEED_RES:
        m = rx.search(text or "")
        if not m:
            continue
        v = m.group("v")
        if rx is _NEED_RES[0]:
            return f"compute capability >= {v}"
        if rx is _NEED_RES[1]:
            return v
        if rx is _NEED_RES[2]:
            return f"SM{v}" + (f" (compute capability {m.group('v2')})" if m.groupdict().get("v2") else "")
        if rx is _NEED_RES[3]:
            return f"SM {v}"
        if rx is _NEED_RES[4]:
            return f"sm_{v}"
        word = v.capitalize()
        return f"{word} GPUs (SM {GENERATION_SM.get(v.lower(), '?')})"
    return "another GPU generation"


_HAS_RE = re.compile(r"(?:Your (?P<gpu>[\w .-]+?) GPU )?has compute capability (?P<v>\d{1,2}\.\d)", re.IGNORECASE)


def host_from_message(text: str) -> tuple[str | None, tuple[int, int] | None]:
    """(GPU name, SM) a message states for the GPU it runs on ('Your Tesla P40 GPU has compute capability 6.1')."""
    m = _HAS_RE.search(text or "")
    if not m:
        return None, None
    return (m.group("gpu") or None), parse_sm(m.group("v"))
