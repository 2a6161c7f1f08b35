"""Unified diffs applied in Python: exact context, nearest-first offset search like ``patch``, no fuzz.

Every patch is applied in memory first; a failure raises :class:`PatchError` naming the patch, the file
and the hunk, and nothing has been written.
"""

from __future__ import annotations

import io
import re

from ansible.module_utils.dflash_tree.common import PACKAGE, PatchError, sha256_bytes

MAX_OFFSET = None  # search the whole file, nearest first (what `patch` does); no fuzz


class Hunk:
    __slots__ = ("header", "lines", "new_len", "new_start", "number", "old_len", "old_start")

    def __init__(self, number, header, old_start, old_len, new_start, new_len):
        self.number = number
        self.header = header
        self.old_start = old_start
        self.old_len = old_len
        self.new_start = new_start
        self.new_len = new_len
        self.lines = []  # (tag, bytes incl. newline) with tag in " -+"

    def old_lines(self):
        return [t for tag, t in self.lines if tag in " -"]

    def new_lines(self):
        return [t for tag, t in self.lines if tag in " +"]


class FilePatch:
    __slots__ = ("hunks", "new_path", "old_path")

    def __init__(self, old_path, new_path):
        self.old_path = old_path
        self.new_path = new_path
        self.hunks = []

    @property
    def creates(self):
        return self.old_path is None

    @property
    def deletes(self):
        return self.new_path is None

    @property
    def path(self):
        return self.new_path if self.new_path is not None else self.old_path


_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip_path(raw, patch_name, lineno):
    """``--- a/sglang/x.py\\tdate`` -> ``sglang/x.py`` (-p1); ``/dev/null`` -> None."""
    text = raw.split(b"\t", 1)[0].strip().decode("utf-8", "surrogateescape")
    if text == "/dev/null":
        return None
    if text.startswith('"'):
        raise PatchError(patch_name, f"line {lineno}: quoted paths are not supported: {text}")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if len(parts) < 2:
        raise PatchError(patch_name, f"line {lineno}: path {text!r} has nothing left after -p1")
    parts = parts[1:]
    if parts[0] == "python" and len(parts) > 1 and parts[1] == PACKAGE:
        parts = parts[1:]  # upstream repository layout: python/sglang/...
    if ".." in parts or parts[0] != PACKAGE:
        raise PatchError(
            patch_name,
            f"line {lineno}: path {text!r} must name a file under {PACKAGE}/ (a/{PACKAGE}/... after -p1)",
        )
    return "/".join(parts)


def parse_patch(content, patch_name):
    """Parse a unified diff (bytes) into a list of :class:`FilePatch`."""
    if isinstance(content, str):
        content = content.encode("utf-8")
    lines = io.BytesIO(content).readlines()
    files = []
    i = 0
    n = len(lines)
    for k, line in enumerate(lines):
        if line.startswith((b"GIT binary patch", b"Binary files ")):
            raise PatchError(patch_name, f"line {k + 1}: binary patches are not supported")
    while i < n:
        line = lines[i]
        if not (line.startswith(b"--- ") and i + 1 < n and lines[i + 1].startswith(b"+++ ")):
            i += 1
            continue
        old = _strip_path(line[4:], patch_name, i + 1)
        new = _strip_path(lines[i + 1][4:], patch_name, i + 2)
        if old is None and new is None:
            raise PatchError(patch_name, f"line {i + 1}: both sides are /dev/null")
        if old is not None and new is not None and old != new:
            raise PatchError(patch_name, f"line {i + 1}: renames are not supported ({old} -> {new})")
        fp = FilePatch(old, new)
        files.append(fp)
        i += 2
        number = 0
        while i < n and lines[i].startswith(b"@@"):
            m = _HUNK_RE.match(lines[i])
            number += 1
            header = lines[i].rstrip(b"\r\n").decode("utf-8", "replace")
            if not m:
                raise PatchError(patch_name, "malformed hunk header", fp.path, number, header)
            old_start, new_start = int(m.group(1)), int(m.group(3))
            old_len = 1 if m.group(2) is None else int(m.group(2))
            new_len = 1 if m.group(4) is None else int(m.group(4))
            hunk = Hunk(number, header, old_start, old_len, new_start, new_len)
            i += 1
            o = nw = 0
            while o < old_len or nw < new_len:
                if i >= n:
                    raise PatchError(patch_name, "patch ends inside the hunk", fp.path, number, header)
                body = lines[i]
                tag = body[:1]
                if body in (b"\n", b"\r\n"):  # a blank context line whose leading space was stripped
                    tag, text = b" ", body
                elif tag in (b" ", b"-", b"+"):
                    text = body[1:]
                elif tag == b"\\":
                    i += 1
                    _drop_last_newline(hunk)
                    continue
                else:
                    raise PatchError(
                        patch_name,
                        f"line {i + 1}: hunk has {o}/{nw} old/new lines, expected {old_len}/{new_len}",
                        fp.path,
                        number,
                        header,
                    )
                tag = tag.decode()
                if tag in " -":
                    o += 1
                if tag in " +":
                    nw += 1
                if o > old_len or nw > new_len:
                    raise PatchError(
                        patch_name,
                        f"line {i + 1}: hunk is longer than its header says",
                        fp.path,
                        number,
                        header,
                    )
                hunk.lines.append((tag, text))
                i += 1
            while i < n and lines[i].startswith(b"\\"):
                _drop_last_newline(hunk)
                i += 1
            fp.hunks.append(hunk)
        if not fp.hunks:
            raise PatchError(patch_name, "no hunks (mode-only and empty diffs are not supported)", fp.path)
    if not files:
        raise PatchError(patch_name, "no file diffs found (expected a unified diff: ---/+++/@@)")
    return files


def _drop_last_newline(hunk):
    """``\\ No newline at end of file`` applies to the line just before it."""
    if hunk.lines:
        tag, text = hunk.lines[-1]
        if text.endswith(b"\n"):
            text = text[:-1]
            if text.endswith(b"\r"):
                text = text[:-1]
        hunk.lines[-1] = (tag, text)


def split_lines(data):
    return io.BytesIO(data).readlines()


def _first_mismatch(lines, old, pos):
    for k, want in enumerate(old):
        got = lines[pos + k] if pos + k < len(lines) else None
        if got != want:
            return pos + k, want, got
    return None


def _show(b):
    if b is None:
        return "end of file"
    s = b.decode("utf-8", "replace").rstrip("\n")
    return repr(s if len(s) <= 100 else s[:97] + "...")


def apply_file_patch(data, fp, patch_name):
    """Apply one file's hunks to ``data`` (bytes or None when the file does not exist).

    Returns the new bytes, or None when the patch deletes the file.
    """
    path = fp.path
    if fp.creates:
        if data is not None:
            raise PatchError(patch_name, "creates this file, but it already exists", path)
        lines = []
    else:
        if data is None:
            raise PatchError(patch_name, "file does not exist in the tree", path)
        lines = split_lines(data)
    out = []
    cursor = 0  # first line of `lines` not yet copied to `out`
    offset = 0  # cumulative offset of previous hunks, as `patch` tracks it
    for hunk in fp.hunks:
        old = hunk.old_lines()
        # unified diff: old_start is 1-based; with old_len == 0 it is the line *after which* we insert
        expected = (hunk.old_start - 1 if hunk.old_len else hunk.old_start) + offset
        pos = _find(lines, old, expected, cursor)
        if pos is None:
            reason = f"does not apply: its {len(old)} context/removed lines match nowhere in the file"
            if 0 <= expected <= len(lines):
                mm = _first_mismatch(lines, old, expected)
                if mm is not None:
                    reason += f" (at line {mm[0] + 1} the patch expects {_show(mm[1])}, the file has {_show(mm[2])})"
            if old and _find(lines, hunk.new_lines(), expected, cursor) is not None:
                reason += "; its result is already in the file (applied twice?)"
            raise PatchError(patch_name, reason, path, hunk.number, hunk.header)
        out.extend(lines[cursor:pos])
        out.extend(hunk.new_lines())
        cursor = pos + len(old)
        offset = pos - (hunk.old_start - 1 if hunk.old_len else hunk.old_start)
    out.extend(lines[cursor:])
    if fp.deletes:
        if out:
            raise PatchError(patch_name, f"deletes this file, but {len(out)} lines would remain", path)
        return None
    return b"".join(out)


def _find(lines, old, expected, lower):
    """Nearest position >= lower where ``old`` matches exactly, searching out from ``expected``."""
    n = len(old)
    last = len(lines) - n
    if last < lower:
        return None
    expected = min(max(expected, lower), last)
    limit = max(expected - lower, last - expected)
    if MAX_OFFSET is not None:
        limit = min(limit, MAX_OFFSET)
    for d in range(limit + 1):
        for pos in (expected + d, expected - d) if d else (expected,):
            if lower <= pos <= last and lines[pos : pos + n] == old:
                return pos
    return None


def apply_series(read_file, patches):
    """Apply every patch, in order, in memory. Nothing is written.

    ``read_file(relpath)`` returns the pristine bytes or None when absent. Returns
    ``(contents, pristine, touched_by)``: relpath -> patched bytes (None = deleted), relpath -> pristine
    sha256 (None = did not exist), relpath -> [patch names].
    """
    contents = {}
    pristine = {}
    touched_by = {}
    for patch in patches:
        name = patch["name"]
        for fp in parse_patch(patch["content"], name):
            path = fp.path
            if path not in contents:
                data = read_file(path)
                pristine[path] = None if data is None else sha256_bytes(data)
                contents[path] = data
            contents[path] = apply_file_patch(contents[path], fp, name)
            touched_by.setdefault(path, [])
            if name not in touched_by[path]:
                touched_by[path].append(name)
    return contents, pristine, touched_by
