"""A verdict for a failure no rule knows: the first generic fatal error, a kill, the last traceback."""

from __future__ import annotations

import bisect
import re

from ansible.module_utils.dflash_diagnose.scan import GENERIC_FATAL_RE, NOISE_RE, _Line, _match_line

_GENERIC_HINTS = ("Error", "Exception", "Interrupt", "SystemExit", "Segmentation", "core dumped", "Fatal",
                  "terminate called", "Aborted", "ERROR", "FATAL", "CRITICAL", "exited, code=", "Failed with",
                  "ASSERT", "Assertion", "Errno", "Killed", "OOM killer", "code 137", "9/KILL", "panicked",
                  "`Err` value", "for the current GPU")


# What an error outside CAUSES usually means, for the remedy of an "unknown" verdict (first match wins).
_UNKNOWN_HINTS = (
    (re.compile(r"No space left on device|Errno 28\b|StorageFull|Disk quota exceeded|Errno 122\b"),
     ("the filesystem named is full: free space (`df -h`; `df -h /dev/shm` for shared memory) or move the "
      "model and cache directories (HF_HOME, TRITON_CACHE_DIR) to a larger disk")),
    (re.compile(r"Read-only file system|Errno 30\b"),
     ("that path is on a read-only filesystem (a read-only mount, or the unit's ProtectSystem= / ProtectHome= / "
      "ReadOnlyPaths=): point HOME, HF_HOME, XDG_CACHE_HOME, TRITON_CACHE_DIR and FLASHINFER_WORKSPACE_BASE of the "
      "instance at a writable directory, or list it in ReadWritePaths=")),
    (re.compile(r"Permission denied|Errno 13\b|PermissionError"),
     ("the service user may not use that path: make the unit's user own it, or point HOME / HF_HOME / the "
      "cache directories at a directory it owns (ProtectHome= and a HOME of / cause this too)")),
    (re.compile(r"Too many open files|Errno 24\b|code: 24\b"),
     "the open-files limit is too low: raise it (LimitNOFILE=65536 in the unit, `ulimit -n 65536` in a shell)"),
    (re.compile(r"Killed|OOM killer|code 137|9/KILL|oom-kill|SIGKILL", re.IGNORECASE),
     ("the process was killed with SIGKILL (exit 137); on a host that is usually the kernel OOM killer after "
      "host RAM ran out while loading weights: check `journalctl -k | grep -i 'out of memory'`, then add RAM or "
      "swap, or run fewer servers per host")),
    (re.compile(r"does not recognize this architecture|Unrecognized configuration class"),
     ("the installed transformers (or this server release) does not know the model's architecture: install "
      "a transformers / server release that supports it (the model card names the minimum)")),
    (re.compile(r"speculative_|--speculative|speculative decoding|draft[_ -]model|\bEAGLE\d?\b"),
     ("the speculative-decoding settings do not fit this server release / model pair: check "
      "--speculative-algorithm and --speculative-draft-model-path (a draft trained for this target), and set "
      "--speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens explicitly")),
    (re.compile(r"[Cc]hat template|chat_template|TemplateSyntaxError|TemplateError"),
     ("the chat template cannot be used: give --chat-template a built-in template name or a template file this "
      "server release accepts, or leave it out to use the tokenizer's own template (tokenizer_config.json / "
      "chat_template.jinja)")),
    (re.compile(r"No HIP GPUs|\bhipError|HIP error"),
     "this torch is a ROCm (HIP) build: on an NVIDIA host install a CUDA build of torch (+cuXXX)"),
    (re.compile(r"not supported for the current GPU|Min(?:imum)? capability|fp8e4nv not supported"
                r"|is_sm\d+_supported"),
     ("the model's quantization has no kernel path on this GPU: serve a checkpoint in a format this GPU "
      "supports (e.g. bf16 / fp16 instead of fp8 / awq), or use a GPU the message names as supported")),
)


# A process killed with SIGKILL (shell, kernel OOM killer, gunicorn, docker). systemd's "status=9/KILL" is left
# out: systemd also sends SIGKILL to a unit that did not stop in time, after its real failure.
KILL_RE = re.compile(
    r"^Killed\s*$|\]Killed\s*$|\d Killed\s|Out of memory: Kill(?:ed)? process|killed by the OOM killer"
    r"|was sent SIGKILL|exited with code 137|exit code 137"
)


_KILL_WORDS = ("Killed", "SIGKILL", "OOM killer", "code 137")


# how far after the matched line a kill is looked for (a few hundred lines of loading progress)
KILL_WINDOW = 500


_ERROR_WORD_RE = re.compile(r"error|exception|fatal|fail|traceback|abort|assert", re.IGNORECASE)


# the process logging progress: an INFO line, a progress bar, "Loading ..."
_PROGRESS_RE = re.compile(r"\bINFO\b|\d+%\s*\||\bLoading\b")


def _kill_after(lines: list[_Line], index: int, end: int, rule_lines: set[int]) -> _Line | None:
    """A SIGKILL line after the matched line ``index`` that, not the match, ended the run: the matched
    line is a bare diagnostic (no error / exception word, as a library prints and survives), nothing
    failed between the two, and the process visibly went on working in between (it logged progress).
    A kill after a real error (a launcher killing its children) never qualifies."""
    if any(_ERROR_WORD_RE.search(ln.text) for ln in lines[max(0, index - 3): index + 1]):
        return None
    kill = next((ln for ln in lines[index + 1: min(end, index + 1 + KILL_WINDOW)]
                 if any(w in ln.raw for w in _KILL_WORDS) and KILL_RE.search(ln.text)), None)
    if kill is None:
        return None
    went_on = False
    for ln in lines[index + 1: kill.index]:
        t = ln.text
        if not t or NOISE_RE.search(t):
            continue
        if GENERIC_FATAL_RE.search(t) or _ERROR_WORD_RE.search(t) or (ln.index in rule_lines and _match_line(ln)):
            return None
        went_on = went_on or _PROGRESS_RE.search(t) is not None
    return kill if went_on else None


def _unknown_hint(text: str) -> str:
    return next((hint for rx, hint in _UNKNOWN_HINTS if rx.search(text)), "")


def _first_generic_failure(lines: list[_Line]) -> _Line | None:
    # the candidate lines come from one substring search per hint over the joined text (a long healthy
    # log has few of them), in log order
    joined = "\n".join(ln.raw for ln in lines)
    starts, pos = [], 0
    for ln in lines:
        starts.append(pos)
        pos += len(ln.raw) + 1
    nxt = {h: p for h in _GENERIC_HINTS if (p := joined.find(h)) >= 0}
    while nxt:
        i = bisect.bisect_right(starts, min(nxt.values())) - 1
        ln = lines[i]
        if ln.text and GENERIC_FATAL_RE.search(ln.text) and not NOISE_RE.search(ln.text):
            return ln
        after = starts[i + 1] if i + 1 < len(lines) else len(joined) + 1
        for h in [h for h, p in nxt.items() if p < after]:
            p = joined.find(h, after)
            if p < 0:
                del nxt[h]
            else:
                nxt[h] = p
    return None


_BARE_EXC_RE = re.compile(r"^(?:Exception has occurred: )?[\w.]*(?:Error|Exception)\s*$")


def _generic_text(lines: list[_Line], ln: _Line) -> str:
    """The first error as a sentence: a bare exception name gets the message line after it, or the
    assert statement before it."""
    text = ln.text
    if re.search(r"\]Killed\s*$", text):  # the shell's message glued to an unterminated progress bar
        bar = re.sub(r"[\u2580-\u259f#=]+", "", text[:-len("Killed")].rstrip())
        bar = " ".join(bar.split())[:80]
        return f"Killed (the shell's message, after: {bar})"
    if re.search(r"\bpanicked at \S+:\s*$", text):
        nxt = next((x for x in lines[ln.index + 1: ln.index + 3] if x.text), None)
        return f"{text} {nxt.text}" if nxt is not None else text
    if not _BARE_EXC_RE.match(text):
        return text
    nxt = next((x for x in lines[ln.index + 1: ln.index + 3] if x.text), None)
    if nxt is not None and not nxt.text.startswith(("File ", "Traceback")):
        return f"{text}: {nxt.text}"
    prev = next((x for x in reversed(lines[max(0, ln.index - 2): ln.index]) if x.text), None)
    if prev is not None and prev.text.startswith("assert "):
        return f"{text} ({prev.text})"
    return text


_OS_ERROR_RE = re.compile(r"\[Errno \d+\]|Os \{ code: \d+")


def _first_traceback(lines: list[_Line]) -> _Line | None:
    for ln in lines:
        if "Traceback (most recent call last)" in ln.raw or "hit an exception" in ln.raw:
            return ln
    return None
