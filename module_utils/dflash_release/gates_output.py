"""Output gates of the smoke test: is the T=0 reply right, or garbage?

The seeds judged a release by its reply to one prompt ("Write a Python function fibonacci(n) using
iteration. Return only code."). A reply that is merely not empty is not enough: the seeds' CT129
service answered "!!!!!!!!", the H200 dummy weights answered " w56626 w65798 w2196 w65798 ...", and
a reasoning model (Qwen3.6) answers with ``content: null`` and the text in ``reasoning_content``.

* ``degenerate(text)``: one character or a short cycle of tokens repeated, replacement characters
  (U+FFFD: bytes that are not text), too few distinct words.
* ``reply_texts(message)``: content and reasoning_content, both read.
* ``match_patterns(patterns, text)``: the expected patterns (regular expressions) of the reply.
* ``extract_code(text, function)`` + ``run_code(code, function, args)``: the returned code, run in
  a sandboxed subprocess (isolated interpreter, audit hook refusing network, processes and file
  writes, resource limits, unprivileged user when started as root, a wall-clock timeout), and
  the value of ``function(*args)``.

Pure functions (``run_code`` starts one subprocess); no Ansible import.
"""

from __future__ import annotations

import ast
import collections
import json
import os
import re
import subprocess
import sys

REPLACEMENT = "\ufffd"
RESULT_TAG = "DFLASH_GATE_RESULT "

# --------------------------------------------------------------------------- reply texts


def reply_texts(message: dict) -> dict:
    """{'content': str, 'reasoning': str} of a chat completion message (None -> '')."""
    message = message or {}
    content = message.get("content")
    reasoning = message.get("reasoning_content")
    if reasoning is None:
        reasoning = message.get("reasoning")  # some servers name it so
    return {"content": "" if content is None else str(content),
            "reasoning": "" if reasoning is None else str(reasoning)}


def _show(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- degenerate output


def _cycle_share(items: list, period: int) -> float:
    """Share of positions i >= period whose item equals the one ``period`` before."""
    n = len(items)
    if n <= period:
        return 0.0
    same = sum(1 for i in range(period, n) if items[i] == items[i - period])
    return same / (n - period)


def degenerate(text: str) -> str | None:
    """Why ``text`` is degenerate output, or None when it reads like text.

    Checked: replacement characters; one non-space character making most of the text ("!!!!");
    a cycle of 1 to 4 words repeated ("w65798 w2196 w65798 w2196 ..."); a cycle of up to 8
    characters in text without spaces; very few distinct words in a long reply."""
    if not text or not text.strip():
        return None
    n_repl = text.count(REPLACEMENT)
    if n_repl >= 3 or (n_repl and n_repl / len(text) > 0.02):
        return f"{n_repl} replacement characters (U+FFFD) in {len(text)}: the output is not valid text"
    chars = [c for c in text if not c.isspace()]
    if len(chars) >= 8:
        char, count = collections.Counter(chars).most_common(1)[0]
        if count / len(chars) >= 0.6:
            return (f"one character repeated: {char!r} is {round(100 * count / len(chars))}% of its "
                    f"{len(chars)} non-space characters ({_show(text, 40)!r})")
    words = text.split()
    if len(words) >= 12:
        for period in (1, 2, 3, 4):
            share = _cycle_share(words, period)
            if share >= 0.75:
                cycle = " ".join(words[-period:])
                return (f"a cycle of {period} word(s) repeated: {cycle!r} ({round(100 * share)}% of "
                        f"{len(words)} words follow it; {_show(text)!r})")
    elif len(chars) >= 24:
        squeezed = "".join(chars)
        for period in range(2, 9):
            if _cycle_share(list(squeezed), period) >= 0.9:
                return f"a cycle of {period} characters repeated: {squeezed[:period]!r} ({_show(text, 40)!r})"
    if len(words) >= 32:
        distinct = len(set(words))
        if distinct / len(words) < 0.15:
            return f"only {distinct} distinct words in {len(words)} ({_show(text)!r})"
    return None


def degenerate_reply(texts: dict, finish_reason=None) -> str | None:
    """The degenerate-output verdict of a whole reply: empty content without reasoning, or a
    degenerate content / reasoning text."""
    content, reasoning = texts.get("content", ""), texts.get("reasoning", "")
    if not content.strip() and not reasoning.strip():
        return f"empty reply: neither content nor reasoning_content (finish_reason={finish_reason})"
    for key, text in (("content", content), ("reasoning_content", reasoning)):
        why = degenerate(text)
        if why:
            return f"{key}: {why}"
    return None


# --------------------------------------------------------------------------- expected patterns


def compile_patterns(patterns) -> list:
    """[(source, compiled)]; raises re.error for a bad one."""
    return [(str(p), re.compile(str(p), re.MULTILINE)) for p in patterns or []]


def match_patterns(patterns, texts: dict) -> list:
    """[{pattern, found_in}] for every pattern: found_in is 'content', 'reasoning_content' or None."""
    out = []
    for src, rx in compile_patterns(patterns):
        where = None
        for key, name in (("content", "content"), ("reasoning", "reasoning_content")):
            if rx.search(texts.get(key, "")):
                where = name
                break
        out.append({"pattern": src, "found_in": where})
    return out


# --------------------------------------------------------------------------- code


_FENCE_RE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def _trim_to_parse(lines: list) -> str | None:
    """The longest prefix of ``lines`` that parses (prose after the code, a reply cut mid-line)."""
    for end in range(len(lines), 0, -1):
        code = "\n".join(lines[:end]).rstrip()
        if code and _parses(code):
            return code
    return None


def extract_code(text: str, function: str) -> str | None:
    """The Python code that defines ``function`` in a reply: a fenced block that defines it, else
    the text from the first ``def``/``import`` line on, cut to what parses. None when there is none."""
    if not text:
        return None
    define = re.compile(rf"^\s*def\s+{re.escape(function)}\s*\(", re.MULTILINE)
    for m in _FENCE_RE.finditer(text):
        block = m.group(2)
        if define.search(block):
            code = _trim_to_parse(block.rstrip().splitlines())
            if code:
                return code
    m = define.search(text)
    if not m:
        return None
    lines = text[: m.start()].splitlines()
    # keep the import lines right before the def (e.g. "from functools import lru_cache")
    head = []
    for line in reversed(lines):
        if re.match(r"^\s*(?:import|from)\s+\w", line) or (head and not line.strip()):
            head.insert(0, line)
        else:
            break
    body = text[m.start():].splitlines()
    return _trim_to_parse(head + body)


# The sandbox: an isolated interpreter (-I -S) reads the code from stdin, installs an audit hook
# that refuses network, new processes, file writes and native code loading, runs the code and
# calls the function. Audit hooks cannot be removed from Python code.
_HARNESS = r"""
import json, os, sys
FUNC, ARGS, TAG = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
SRC = sys.stdin.read()
_PREFIXES = ("socket.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.system",
             "os.kill", "os.killpg", "os.remove", "os.unlink", "os.rename", "os.replace", "os.rmdir",
             "os.mkdir", "os.chmod", "os.chown", "os.link", "os.symlink", "os.truncate", "os.utime",
             "os.setxattr", "os.removexattr", "shutil.", "ctypes.", "pty.", "webbrowser.", "urllib.",
             "http.", "ftplib.", "smtplib.", "telnetlib.", "sys.setprofile", "sys.settrace")
_BAD_IMPORTS = {"ctypes", "_ctypes", "socket", "_socket", "subprocess", "_posixsubprocess", "multiprocessing",
                "pty", "signal", "resource", "mmap", "fcntl", "ssl", "_ssl", "select", "asyncio"}
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
def _guard(event, args):
    if event.startswith(_PREFIXES):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "import" and args and str(args[0]).split(".")[0] in _BAD_IMPORTS:
        raise PermissionError(f"sandbox: import of {args[0]} is not allowed")
    if event == "open" and len(args) >= 3:
        mode, flags = args[1], args[2]
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITE):
            raise PermissionError(f"sandbox: writing {args[0]!r} is not allowed")
sys.addaudithook(_guard)
def _out(obj):
    sys.stdout.write("\n" + TAG + json.dumps(obj) + "\n")
    sys.stdout.flush()
try:
    ns = {"__name__": "__dflash_smoke__"}
    exec(compile(SRC, "<reply>", "exec"), ns)
    fn = ns.get(FUNC)
    if not callable(fn):
        _out({"ok": False, "error": f"the code defines no function {FUNC}"})
    else:
        value = fn(*ARGS)
        try:
            _out({"ok": True, "value": value, "repr": repr(value)[:200]})
        except (TypeError, ValueError):
            _out({"ok": True, "value": None, "repr": repr(value)[:200], "not_json": True})
except BaseException as exc:
    _out({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
"""

NOBODY = 65534
FALLBACK_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")


def world_runnable(path: str) -> bool:
    """True when any user can run ``path``: the file is o+rx and every directory above it o+x
    (the sandbox runs as nobody when the module runs as root)."""
    import stat

    try:
        real = os.path.realpath(path)
        st = os.stat(real)
        if not (st.st_mode & stat.S_IROTH and st.st_mode & stat.S_IXOTH):
            return False
        d = os.path.dirname(real)
        while True:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(d)
            if parent == d:
                return True
            d = parent
    except OSError:
        return False


def sandbox_python(preferred: str | None = None, as_root: bool | None = None) -> tuple:
    """(interpreter, drop_to_uid or None, note). As root: an interpreter that nobody may run, and
    nobody's uid; when none is, the preferred one as root (the audit hook and limits still apply)."""
    preferred = preferred or sys.executable
    as_root = (hasattr(os, "geteuid") and os.geteuid() == 0) if as_root is None else as_root
    if not as_root:
        return preferred, None, ""
    for cand in (preferred, *FALLBACK_PYTHONS):
        if cand and world_runnable(cand):
            return cand, NOBODY, f"as uid {NOBODY}"
    return preferred, None, f"as root: no interpreter that uid {NOBODY} may run ({preferred})"


def _limits(cpu_seconds: int, memory_bytes: int, drop_to: int | None):
    """preexec_fn of the sandbox: resource limits, then an unprivileged user when root."""

    def apply():
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        if drop_to is not None:
            os.setgroups([])
            os.setgid(drop_to)
            os.setuid(drop_to)
        try:  # no new processes (enforced for unprivileged users)
            resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        except (ValueError, OSError):
            pass

    return apply


def run_code(code: str, function: str, args=(), timeout: float = 5.0, python: str | None = None,
             memory_mib: int = 512) -> dict:
    """Run ``code`` and ``function(*args)`` in the sandbox. Returns {ok, value, repr} or
    {ok: False, error} (syntax or runtime error, timeout, refused operation, killed)."""
    python, drop_to, note = sandbox_python(python)
    argv = [python, "-I", "-S", "-c", _HARNESS, function, json.dumps(list(args)), RESULT_TAG]
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "LANG": "C.UTF-8"}
    try:
        proc = subprocess.run(argv, input=code, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd="/", check=False, start_new_session=True,
                              preexec_fn=_limits(max(1, int(timeout) + 1), memory_mib * 1024 * 1024, drop_to))
    except subprocess.TimeoutExpired:
        call = f"{function}({', '.join(repr(a) for a in args)})"
        return {"ok": False, "error": f"{call} did not return within {timeout:g} s (an endless loop?)",
                "timeout": True}
    except OSError as exc:
        return {"ok": False, "error": f"the sandbox could not start: {exc}"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            try:
                return dict(json.loads(line[len(RESULT_TAG):]), sandbox=note)
            except ValueError:
                break
    if proc.returncode < 0:
        return {"ok": False, "error": f"killed by signal {-proc.returncode} (CPU or memory limit)"}
    tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
    return {"ok": False, "error": f"exited {proc.returncode} without a result: {' | '.join(tail)[:300]}"}
