"""Diagnosis by the structure of a traceback, not by one version's wording: the exception class, its
message and the frames it was raised from.

The same failure is worded differently by each release (and by vLLM, mlx, ...), but it is raised from
the same places: the server's argument checks (``ServerArgs.__post_init__`` and its ``_handle_*`` hooks,
vLLM's ``EngineArgs``), the speculative verify path walking a hybrid model's state (mamba / GDN / radix
cache), CUDA graph capture (``cuda_graph_runner``, ``torch.cuda.graphs``). ``raised(lines)`` reads every
exception with its frames; ``structural_matches`` turns the ones raised from such a place into matches
of ``STRUCT_RULES`` (rows like the table's, decided by class + frames + message), which join the line
matches of the table: a more specific row on the same incident still wins by priority.
No Ansible import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ansible.module_utils.dflash_diagnose.arch import ARCH_WORDS
from ansible.module_utils.dflash_diagnose.rule import Rule, _rx
from ansible.module_utils.dflash_diagnose.scan import _Line, _Match

# "File "/x/y.py", line 12, in func" (CPython, also faulthandler's "line 12 in func") and IPython's
# "File ~/x/y.py:189, in func(*args)"
_FRAME_RE = re.compile(
    r'^File "(?P<path>[^"]+)", line \d+,? in (?P<func>[\w<>.]+)'
    r"|^File (?P<ipath>[~/\w.][^\s:]*):\d+, in (?P<ifunc>[\w<>.]+)"
)
_EXC_RE = re.compile(
    r"^-?\s*(?:[A-Za-z_][\w]*\.)*(?P<cls>[A-Z]\w*(?:Error|Exception)|AssertionError|KeyboardInterrupt)"
    r"(?::\s*(?P<msg>.*))?$"
)
_ASSERT_RE = re.compile(r"""^assert\b(?P<cond>.*?),\s*(?P<q>["'])(?P<msg>.+?)(?P=q)""")
_TRACEBACK_WORDS = ("Traceback (most recent call last)", "hit an exception")
_OOM_RE = re.compile(r"out of memory|OutOfMemory", re.IGNORECASE)


@dataclass
class Frame:
    path: str
    func: str
    source: str = ""

    @property
    def file(self) -> str:
        return self.path.replace("\\", "/").rsplit("/", 1)[-1]


@dataclass
class Raised:
    """One exception: its class, message, the line it was printed on and the frames it came through
    (outermost first); ``implied`` when only the ``assert`` statement was printed."""

    cls: str
    message: str
    line: _Line
    frames: list[Frame] = field(default_factory=list)
    implied: bool = False

    def where(self) -> str:
        """'set_x (schedule_batch.py) from prepare_y (eagle_info_v2.py)': the innermost frames."""
        fs = [f for f in self.frames if f.func not in ("<module>", "wrapper", "decorate_context", "_fn")]
        if not fs:
            return ""
        inner = fs[-1]
        out = f"{inner.func} ({inner.file})"
        outer = next((f for f in reversed(fs[:-1]) if f.file != inner.file), None)
        if outer is not None:
            out += f" from {outer.func} ({outer.file})"
        return out


def raised(lines: list[_Line]) -> list[Raised]:
    """Every exception of the log with the frames printed before it (since its traceback began)."""
    out: list[Raised] = []
    frames: list[Frame] = []
    expect_source = False
    for ln in lines:
        raw = ln.raw
        if not raw.strip():
            continue
        if any(w in raw for w in _TRACEBACK_WORDS):
            frames, expect_source = [], False
            continue
        if "File " in raw:
            m = _FRAME_RE.match(ln.text)
            if m:
                frames.append(Frame(m.group("path") or m.group("ipath"), m.group("func") or m.group("ifunc")))
                expect_source = True
                continue
        text = ln.text
        if "Error" in text or "Exception" in text or "Interrupt" in text:
            m = _EXC_RE.match(text)
            if m:
                out.append(Raised(m.group("cls"), (m.group("msg") or "").strip(), ln, frames))
                frames, expect_source = [], False
                continue
        stripped = text.lstrip("-> \t0123456789").strip() if text[:1].isdigit() or text.startswith("-") else text
        am = _ASSERT_RE.match(stripped) if stripped.startswith("assert") else None
        if expect_source and frames:
            frames[-1].source = frames[-1].source or stripped
            expect_source = False
        if am and not _assert_follows(lines, ln.index):
            out.append(Raised("AssertionError", am.group("msg").strip(), ln, list(frames), implied=True))
    for r in out:
        if not r.frames:
            r.frames = _context_frames(lines, r.line.index)
    if frames and not out and not any(w in ln.raw for ln in lines for w in _DUMP_WORDS):
        # an excerpt cut before its error line (a traceback's frames and nothing after them): the frames still say
        # where it failed; the statement of the innermost frame stands for the exception ("assert ..." is one)
        last = frames[-1]
        at = next((ln for ln in reversed(lines) if ln.text.strip()), lines[-1])
        cls = "AssertionError" if last.source.startswith("assert") else "an exception (the excerpt ends before it)"
        out.append(Raised(cls, last.source if cls == "AssertionError" else "", at, list(frames), implied=True))
    return out


# a stack dump of a live process (faulthandler, py-spy, a watchdog's dump) is no failure of its own: a hang's
_DUMP_WORDS = ("Thread 0x", "Current thread", "Stack (most recent call first)", "Dumping stack", "py-spy",
               "atchdog", "most recent call first")


# Short excerpts (an issue's two lines, a summary a reporter typed) drop the traceback but keep what it said: the
# statement that failed, printed just above the exception ("track_index = req.kv.mamba_..."), and a condensed stack
# below it ("set_x (schedule_batch.py)" / "<- prepare_y <- worker.verify"). Both are read as frames of that
# exception, so the class + frames rows decide the same way on the excerpt as on the full traceback.
_PSEUDO_FRAME_RE = re.compile(r"^(?:<-\s*)?(?P<func>[A-Za-z_][\w.]*)(?:\s*\((?P<file>[\w./-]+\.py)\))?"
                              r"(?:\s*<-\s*[A-Za-z_][\w.]*)*\s*$")
_STATEMENT_RE = re.compile(r"^[A-Za-z_][\w.\[\]]*\s*=\s*\S|^(?:return|raise|assert)\b|^[A-Za-z_][\w.]*\(.*\)\s*$")


def _context_frames(lines: list[_Line], index: int) -> list[Frame]:
    """Frames of an exception printed without its traceback: the statement above it, a condensed stack below."""
    frames: list[Frame] = []
    if index > 0:
        prev = lines[index - 1].text.strip()
        if _STATEMENT_RE.search(prev) and not _EXC_RE.match(prev):
            frames.append(Frame("", "<statement>", prev))
    below: list[Frame] = []
    for ln in lines[index + 1: index + 4]:
        text = ln.text.strip()
        m = _PSEUDO_FRAME_RE.match(text) if text and ("<-" in text or ".py)" in text) else None
        if not m:
            break
        for part in [p.strip() for p in text.split("<-") if p.strip()]:
            pm = _PSEUDO_FRAME_RE.match(part)
            if pm:
                below.append(Frame(pm.group("file") or "", pm.group("func")))
    # the condensed stack lists the innermost call first; frames run outermost first
    return list(reversed(below)) + frames


def _assert_follows(lines: list[_Line], index: int) -> bool:
    """Whether an AssertionError line follows the assert statement (then that line is the exception)."""
    for nxt in lines[index + 1: index + 4]:
        if "AssertionError" in nxt.raw:
            return True
    return False


# ------------------------------------------------------------------------------------------------ rows

# the server's argument checks and their hooks (sglang ServerArgs, vLLM EngineArgs / config validation)
_ARGS_FILE = re.compile(r"(?:^|/)(?:server_args|arg_utils|args|config)\.py$")
_ARGS_FUNC = re.compile(r"^(?:__post_init__|_handle_\w+|check_server_args|_check_\w+|check_\w+|_verify_\w+"
                        r"|verify_\w+|validate\w*|_validate\w*|from_cli_args|create_engine_config|"
                        r"adjust_\w+|_adjust\w*)$")
# the speculative verify / draft path, and a hybrid model's state (mamba, GDN, linear attention, ...)
_SPEC_RX = re.compile(r"speculative|eagle|spec_?v2|spec_decode|_verify\b|verify_|draft|dflash|ddtree|\bmtp\b|nextn"
                      r"|lookahead",
                      re.IGNORECASE)
_HYBRID_RX = re.compile(r"mamba|\bgdn\b|gated_?delta|linear_?attn|lightning_?attn|hybrid_linear|\bssm\b|ssm_state"
                        r"|conv_state|recurrent|\bkda\b|MambaPool|HybridReqToTokenPool|mamba_radix|ArraysCache",
                        re.IGNORECASE)
# CUDA graph capture (sglang's runners, torch's graph API, vLLM's capture)
_CAPTURE_RX = re.compile(r"cuda_graph_runner|piecewise_cuda_graph|cuda_graph|graph_runner|torch/cuda/graphs\.py"
                         r"|\bcapture\w*|cudagraph|CUDAGraph"
                         # the custom all-reduce registers the captured graphs' buffers when a capture ends
                         r"|register_graph_buffers", re.IGNORECASE)
# the message names a GPU generation (then the arch row, not the option rows, decides)
_ARCH_RX = re.compile(ARCH_WORDS, re.IGNORECASE)

_NEVER = _rx(r"(?!)")

_HYBRID_CRASH_REMEDY = (
    "a bug in the server's hybrid-state bookkeeping on the speculative path (not your options alone): switch the "
    "state handling the other way: with `--mamba-scheduler-strategy extra_buffer` (and SGLANG_ENABLE_SPEC_V2=1) "
    "drop both and start with `--disable-radix-cache`; without them, try `--mamba-scheduler-strategy extra_buffer`; "
    "or use a server release that fixes {func}, or deploy the instance with algorithm NONE (no draft) until then"
)

STRUCT_RULES = [
    Rule("spec_hybrid_state_crash", "speculative_hybrid", 67, _NEVER,
         "speculative decoding crashed in the hybrid (Mamba / linear-attention) state it verifies: {exc_s}, "
         "raised in {where}",
         _HYBRID_CRASH_REMEDY),
    Rule("server_args_hook", "incompatible_options", 57, _NEVER,
         "the server's argument checks refused the options: {exc_s} (raised in {where})",
         "{options_hint}change the instance's flags so the combination the message names is gone (extra_args / "
         "pin_flags, or the fallback rule that added one of them: dflash_flags shows which rule added which flag)"),
    Rule("hybrid_state_unallocated", "incompatible_options", 56, _NEVER,
         ("the server used hybrid (Mamba) state that was never allocated, outside speculative decoding: {exc_s}, in "
          "{where}; a Mamba scheduling / radix-cache option armed for a model without Mamba state does this"),
         ("drop the Mamba options from the instance's flags (`--mamba-radix-cache-strategy`, "
          "`--mamba-scheduler-strategy extra_buffer`) unless the model really is a hybrid (Mamba / linear-attention) "
          "one; on a hybrid model it is a server bug: use a release that fixes {func}")),
    Rule("arch_support_assert", "gpu_arch_refused", 63, _NEVER,
         ("{arch_subject} refused this GPU{arch_here_s}: the assertion {check_stmt!r} in {where} failed (a support "
          "check of the GPU generation)"),
         "{arch_fix}"),
    Rule("flashinfer_jit_frames", "flashinfer_arch", 59, _NEVER,
         "FlashInfer's JIT build of a kernel failed: {exc_s}, raised in {where}",
         ("start with `--attention-backend triton` (and `--sampling-backend pytorch`) to keep FlashInfer's JIT out, "
          "or give the unit a CUDA toolkit whose nvcc supports this GPU (CUDA_HOME / PATH; CUDA >= 12.8 for SM 10.x, "
          ">= 12.9 for SM 12.x), or install FlashInfer's prebuilt kernels (flashinfer-cubin / flashinfer-jit-cache) "
          "for this CUDA; clear ~/.cache/flashinfer after a change")),
    Rule("pool_alloc_none", "cuda_oom", 55, _NEVER,
         ("an allocation from the server's request / KV-cache pool came back empty (None): the pool has no room for "
          "the batch: {exc_s}, in {where}"),
         ("give the KV cache more memory: raise `--mem-fraction-static` (SGLang; a lower value shrinks the pool), "
          "lower `--max-running-requests` / `--chunked-prefill-size` / `--context-length`, or use a larger "
          "`--tp-size`")),
    Rule("capture_frames", "cuda_graph_capture", 43, _NEVER,
         "capturing CUDA graphs failed at start-up (not for memory): {exc_s}, raised in {where}",
         "start once with `--disable-cuda-graph` (vLLM: `--enforce-eager`) to confirm it is the capture (expect a "
         "large speed loss: the performance gate will measure it, keep it only as a stopgap); then remove what cannot "
         "be captured: drop `--enable-torch-compile` (torch.compile inside the capture), try another attention "
         "backend (`--attention-backend triton`), `--disable-piecewise-cuda-graph`, lower `--cuda-graph-max-bs`, or "
         "use a server release that fixes {func}"),
]


def _frames_match(frames: list[Frame], rx: re.Pattern) -> Frame | None:
    return next((f for f in reversed(frames) if rx.search(f.path) or rx.search(f.func)), None)


# an assert on a support check of the GPU / kernel generation ("assert is_fa_version_supported(self.fa_version)")
_SUPPORT_CHECK_RX = re.compile(r"\bassert\b.*\b(?:is_\w*_supported|\w*supports?_(?:fa|flash|arch|sm|fp8|bf16)\w*"
                               r"|\w*(?:arch|capability|sm)\w*\s*(?:>=|==|in\b))", re.IGNORECASE)
# identifiers of the speculative path as a statement or a message names them (no bare "verify": too common)
_SPEC_WORD_RX = re.compile(r"speculative|\beagle\w*|spec_?v2|\bdraft_\w+|\bmtp\b|\bnextn\b|\w+_for_verify|verify_\w+"
                           r"|\bnum_spec_\w+|\bspec_decode\w*|\bspec_state\w*",
                           re.IGNORECASE)
_NONE_RX = re.compile(r"'NoneType' object|\bNoneType\b|\bNone\b")


# a statement using what a pool allocation returned (sglang returns None when the pool has no room)
_POOL_RX = re.compile(r"\breq_pool_indices\b|\bout_cache_loc\b|token_to_kv_pool\w*\.alloc|req_to_token_pool\.alloc")
_ROW = {r.name: r for r in STRUCT_RULES}


def _source_text(r: Raised) -> str:
    return " ".join(f.source for f in r.frames if f.source)


# the spec-decode state of a hybrid's linear-attention metadata: vLLM's GDN / Mamba / short-conv builders count the
# speculative decodes apart ("num_spec_decodes", "spec_state_indices"); no full-attention path has these fields
_HYBRID_SPEC_STATE_RX = re.compile(r"\bnum_spec_decodes\b|\bspec_state_indices\w*|\bnum_accepted_tokens\b.*\bconv_state")


def classify(r: Raised) -> Rule | None:
    """The structural row an exception belongs to, or None."""
    if _OOM_RE.search(r.message) or r.cls == "KeyboardInterrupt":
        return None
    if _HYBRID_SPEC_STATE_RX.search(r.message) or _HYBRID_SPEC_STATE_RX.search(_source_text(r)):
        # a one-line assert of those counters ("num_decodes: 1, num_spec_decodes: 2") needs no frames to say where
        return _ROW["spec_hybrid_state_crash"]
    if not r.frames:
        return None
    source = _source_text(r)
    # the speculative path shows in the frames, or in the failing statement / message of a short excerpt
    spec = _frames_match(r.frames, _SPEC_RX) or _SPEC_WORD_RX.search(source) or _SPEC_WORD_RX.search(r.message)
    if spec and (_frames_match(r.frames, _HYBRID_RX) or _HYBRID_RX.search(r.message) or _HYBRID_RX.search(source)):
        return _ROW["spec_hybrid_state_crash"]
    if not spec and r.cls in ("TypeError", "AttributeError") and _NONE_RX.search(r.message) \
            and (_frames_match(r.frames, _HYBRID_RX) or _HYBRID_RX.search(source)) and not _SPEC_RX.search(source):
        return _ROW["hybrid_state_unallocated"]
    # a quantization method the GPU cannot run keeps its own answer, as the line row gpu_arch_refused's does
    if any("flashinfer/jit" in f.path.replace("\\", "/") for f in r.frames):
        return _ROW["flashinfer_jit_frames"]
    if r.cls in ("AttributeError", "TypeError") and _NONE_RX.search(r.message) and _POOL_RX.search(source):
        return _ROW["pool_alloc_none"]
    if r.cls == "AssertionError" and r.frames[-1].source and _SUPPORT_CHECK_RX.search(r.frames[-1].source) \
            and not any("quantization" in f.path for f in r.frames):
        return _ROW["arch_support_assert"]
    if r.cls in ("AssertionError", "ValueError", "NotImplementedError", "TypeError", "Exception", "RuntimeError") \
            and any(_ARGS_FILE.search(f.path) and _ARGS_FUNC.match(f.func) for f in r.frames) \
            and not _ARCH_RX.search(r.message):
        return _ROW["server_args_hook"]
    if _frames_match(r.frames, _CAPTURE_RX):
        return _ROW["capture_frames"]
    return None


def groups_of(r: Raised) -> dict:
    msg = r.message if len(r.message) <= 200 else r.message[:197] + "..."
    inner = next((f for f in reversed(r.frames) if f.func not in ("<module>", "wrapper")), None)
    return {
        "exc": r.cls,
        "exc_s": f"{r.cls}: {msg}" if msg else r.cls,
        "where": r.where() or "the server",
        "func": inner.func if inner else "the failing function",
        "check": r.message,
        "check_stmt": (r.frames[-1].source if r.frames else "") or r.message,
    }


def structural_matches(exceptions: list[Raised], lo: int, hi: int) -> list[_Match]:
    """Matches of STRUCT_RULES for the exceptions printed between lines ``lo`` and ``hi``."""
    out = []
    for r in exceptions:
        if lo <= r.line.index < hi:
            rule = classify(r)
            if rule is not None:
                out.append(_Match(rule, r.line, {k: v for k, v in groups_of(r).items() if v}))
    return out
