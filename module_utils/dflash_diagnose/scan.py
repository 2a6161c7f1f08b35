"""The log read and normalised line by line (ANSI codes, carriage returns, journal / rank / logger prefixes),
split into the starts of a unit, and matched against the rule table."""

from __future__ import annotations

import bisect
import dataclasses
import os
import re
from dataclasses import dataclass, field

from ansible.module_utils.dflash_diagnose.facts import _FACT_KEYWORDS
from ansible.module_utils.dflash_diagnose.rule import Rule
from ansible.module_utils.dflash_diagnose.rules import RULE_KEYWORDS, RULES

# A strong match of higher priority this many lines after the first one is taken as the same
# incident (e.g. the "undefined symbol" line a few lines after sgl_kernel's CRITICAL banner).
INCIDENT_LINES = 40


# Evidence lines returned at most, and the longest line kept verbatim in evidence.
MAX_EVIDENCE = 6


MAX_EVIDENCE_CHARS = 600


# Lines before / after the deciding line that remedy details are read from.
CONTEXT_BEFORE = 400


CONTEXT_AFTER = 100


# Files larger than this are read as head + tail (the first fatal error is usually near the
# start of a failed run, the latest run is at the end).
DEFAULT_MAX_BYTES = 16 * 1024 * 1024


HEAD_FRACTION = 0.25


ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][A-Za-z0-9]|\u2190\[[0-9;]*m")


# Prefixes peeled off (repeatedly) before matching.
_PREFIX_RES = [
    # journalctl short: "May 23 10:15:02 host python[1234]: "
    re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ [^\s:\[]+(?:\[\d+\])?: "),
    # journalctl short-iso / -o short-precise: "2025-05-23T10:15:02+0000 host python[1234]: "
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)? \S+ [^\s:\[]+(?:\[\d+\])?: "),
    # bracketed ISO timestamps (CI / kubectl): "[2025-09-12T15:42:57Z] "
    re.compile(r"^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]\s*"),
    # docker/k8s timestamps: "2025-05-23T10:15:02.123456789Z "
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"),
    # vLLM / ray worker tags: "(VllmWorker rank=1 pid=123) ", "(EngineCore_DP0 pid=1) ", "(pid=1) "
    re.compile(r"^\((?:[A-Za-z_][\w.:-]*\s+)?(?:rank=\d+\s+)?pid=\d+(?:,\s*ip=[\d.]+)?\)\s*"),
    # docker compose service prefixes: "openedai-images-flux  | "
    re.compile(r"^[a-z0-9][\w.-]*(?:-\d+)?\s+\| "),
    # an issue title's tag before the error line it quotes: "[Bug] ", "[Feature]: ", "[Usage]: "
    re.compile(r"^\[(?:Bug|BUG|Feature|Usage|Question|Installation|Performance|Misc|Doc|Docs|RFC|Help)\]:?\s+"),
    # torchrun rank prefixes: "[rank0]: ", "[default0]:", "0: "
    re.compile(r"^\[(?:rank|default)\d+\]:\s?"),
    # sglang: "[2025-05-23 10:15:02 TP0] ", "[2025-05-23 10:15:02 DP0 TP1 EP1] ", "[2025-05-23 10:15:02] "
    re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z]{2,4}\d+)*\] "),
    # vLLM: "ERROR 05-23 10:15:02 [core.py:123] ", "INFO 05-23 10:15:02 engine.py:12] "
    re.compile(r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[?[\w./-]+:\d+\]\s*"),
    # python logging: "2025-05-23 10:15:02,123 - name - ERROR - ", "2025-05-23 10:15:02 ERROR "
    re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:\s+-\s+[\w.]+)?\s+-?\s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)?\s*-?\s*"),
]


def strip_ansi(line: str) -> str:
    return ANSI_RE.sub("", line)


def strip_prefixes(line: str) -> str:
    """Peel journal / rank / logger prefixes (any order, a few levels deep)."""
    for _ in range(6):
        for rx in _PREFIX_RES:
            m = rx.match(line)
            if m and m.end() > 0:
                line = line[m.end():]
                break
        else:
            return line
    return line


_HEALTHY_KEYWORDS = ("fired up", "uvicorn running", "startup complete", "started server process")


# Lines that show the server came up (a weak-only hint before/after them is just a warning).
HEALTHY_RE = re.compile(
    r"The server is fired up and ready to roll|Uvicorn running on|Application startup complete"
    r"|Started server process",
    re.IGNORECASE,
)


# Generic failure lines, for an honest "unknown" when no rule matched.
GENERIC_FATAL_RE = re.compile(
    r"^(?:[\w.]+\.)?(?:(?:[A-Z]\w*)?(?:Error|Exception)|KeyboardInterrupt|SystemExit)(?::|\(|$)"
    r"|^Exception has occurred: |\b[A-Z_]*ASSERT\w*\(.*\) failed|Assertion [`'].*' failed"
    r"|Segmentation fault|core dumped|Fatal Python error|terminate called after|Aborted"
    r"|CUDA error:|Main process exited, code=|Failed with result|ERROR|FATAL|CRITICAL"
    # a bare OS error, a process killed by SIGKILL (shell / docker / kernel OOM killer / systemd), a Rust
    # panic (sglang's router), a quantization the GPU cannot run (vLLM's check, printed without a class)
    r"|^\[Errno \d+\] |^Killed\s*$|\]Killed\s*$|\d Killed\s|Out of memory: Kill(?:ed)? process|killed by the OOM killer"
    r"|exited with code 137|exit code 137|status=9/KILL|\bpanicked at |on an `Err` value"
    r"|is not supported for the current GPU"
    # an error quoted inside a sentence (an issue title: "[Bug] DeepSeek-V3.1 RuntimeError: Triton Error ...",
    # "When serving X. Error: Triton compilation failed: ...")
    r"|(?<=[\s.])(?:[A-Z]\w*)?(?:Error|Exception): [A-Z\"'\w]",
)


# ... but these are consequences, never a root cause.
NOISE_RE = re.compile(
    r"scheduler is dead|Received sigquit|sigquit|Please check if there are relevant logs"
    r"|Killing process|child process|Exception ignored in|Traceback \(most recent call last\)"
    r"|During handling of the above exception|The above exception was the direct cause"
    r"|Failed with result 'exit-code'|Main process exited|Unit .* entered failed state"
    r"|EngineCore encountered an issue|Engine core initialization failed|See root cause above"
    r"|(?<![A-Za-z])(?-i:ERROR)\s*$|^\s*$",
    re.IGNORECASE,
)


# systemd lines that start a new run of the unit ("Started" is logged on every (re)start).
START_RE = re.compile(
    r"(?:^|systemd\[\d+\]: )Started (?:\S+\.service\b|.*(?:sglang|SGLang|dflash|DFlash|[Ss]erver))"
)


class _Line:
    """One log line: ``raw`` (ANSI/CR removed, shown in evidence); ``text`` (prefixes peeled, lazily)."""

    __slots__ = ("_text", "index", "raw")

    def __init__(self, index: int, raw: str):
        self.index = index
        self.raw = raw
        self._text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = strip_prefixes(self.raw.lstrip()).strip()
        return self._text


@dataclass
class _Match:
    rule: Rule
    line: _Line
    groups: dict = field(default_factory=dict)


def read_log(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[str, dict]:
    """Read a log file; over max_bytes keep the head and the tail. Returns (text, info)."""
    size = os.path.getsize(path)
    info = {"bytes": size, "skipped_bytes": 0}
    with open(path, "rb") as fh:
        if size <= max_bytes:
            data = fh.read()
        else:
            head_n = int(max_bytes * HEAD_FRACTION)
            tail_n = max_bytes - head_n
            head = fh.read(head_n)
            fh.seek(size - tail_n)
            tail = fh.read(tail_n)
            # cut at line boundaries so no half line is matched
            head = head[: head.rfind(b"\n") + 1] if b"\n" in head else head
            nl = tail.find(b"\n")
            tail = tail[nl + 1:] if nl >= 0 else tail
            info["skipped_bytes"] = size - len(head) - len(tail)
            marker = b"[... %d bytes skipped ...]\n" % info["skipped_bytes"]
            data = head + (marker if head.endswith(b"\n") else b"\n" + marker) + tail
    return data.decode("utf-8", errors="replace"), info


def _split_lines(text: str) -> list[_Line]:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\x1b" in text or "\u2190[" in text:
        text = ANSI_RE.sub("", text)
    return [_Line(i, raw.rstrip()) for i, raw in enumerate(text.split("\n"))]


def _lines_with(lines: list[_Line], low_text: str, starts: list[int], words) -> set[int]:
    """Indexes of the lines that contain any of ``words`` (lower-case), found with str.find."""
    found: set[int] = set()
    end = len(low_text)
    for word in words:
        pos = low_text.find(word)
        while pos >= 0:
            li = bisect.bisect_right(starts, pos) - 1
            found.add(li)
            nxt = starts[li + 1] if li + 1 < len(starts) else end
            pos = low_text.find(word, nxt)
    return found

# Lines that show the server finished its start-up, warm-up request included: an error logged before one of
# these (in the same start) did not stop the server (sglang catches some, e.g. a missing optional module).
READY_RE = re.compile(r"The server is fired up and ready to roll", re.IGNORECASE)


class _Scan:
    """The candidate lines of a log, found once over the whole (lower-cased) text."""

    def __init__(self, lines: list[_Line]):
        joined = "\n".join(ln.raw for ln in lines)
        starts, pos = [], 0
        for ln in lines:
            starts.append(pos)
            pos += len(ln.raw) + 1
        low = joined.lower()
        self.rule_lines = _lines_with(lines, low, starts, RULE_KEYWORDS)
        self.fact_lines = _lines_with(lines, low, starts, _FACT_KEYWORDS)
        cands = sorted(_lines_with(lines, low, starts, _HEALTHY_KEYWORDS))
        first = next((i for i in cands if HEALTHY_RE.search(lines[i].raw)), None)
        last = next((i for i in reversed(cands) if HEALTHY_RE.search(lines[i].raw)), None)
        # the first and the last line that shows the server up (all that the verdict needs)
        self.healthy_lines = sorted({i for i in (first, last) if i is not None})
        self.ready_lines = [i for i in cands if READY_RE.search(lines[i].raw)]
        self.start_lines = sorted(i for i in _lines_with(lines, low, starts, ("started",))
                                  if START_RE.search(lines[i].raw))


# A line logged as a warning only hints, whatever it says (its rule is treated as weak).
WARNING_LINE_RE = re.compile(r"\bWARN(?:ING)?\b|UserWarning|warnings\.warn|\bW\d{4} ")


# Lines that report an error the program deliberately ignores (sglang skips model classes whose
# imports fail; vLLM falls back to slower kernels): never a cause.
NONFATAL_LINE_RE = re.compile(
    r"Ignore import error|\bignor(?:e|ed|ing)\b[^\n]{0,40}\berror|Falling back to|falls? back to"
    r"|will be disabled|is not available\. Fall",
    re.IGNORECASE,
)


def _match_line(line: _Line) -> list[_Match]:
    if NONFATAL_LINE_RE.search(line.raw):
        return []
    found = []
    warning = WARNING_LINE_RE.search(line.raw) is not None
    for rule in RULES:
        m = rule.pattern.search(line.text)
        if not m:
            continue
        if rule.unless is not None and rule.unless.search(line.text):
            continue
        if warning and not rule.weak:
            rule = dataclasses.replace(rule, weak=True)
        found.append(_Match(rule, line, {k: v for k, v in m.groupdict().items() if v}))
    return found


def _segments(lines: list[_Line], scan: _Scan) -> list[tuple[int, int]]:
    """(start, end) line ranges, one per start of the systemd unit (whole log if none)."""
    starts = list(scan.start_lines)
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    bounds = [*starts, len(lines)]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1) if bounds[i] < bounds[i + 1]]


_EXC_LINE_RE = re.compile(r"^-?\s*[\w.]*(?:Error|Exception|Warning)\b")


def _pick(matches: list[_Match]) -> _Match | None:
    strong = [m for m in matches if not m.rule.weak]
    if not strong:
        return None
    first = min(strong, key=lambda m: m.line.index)
    window = [m for m in strong if first.line.index <= m.line.index <= first.line.index + INCIDENT_LINES]
    # same priority: the exception line itself beats the source line quoted in the traceback
    return max(window, key=lambda m: (m.rule.priority, _EXC_LINE_RE.match(m.line.text) is not None,
                                      -m.line.index))
