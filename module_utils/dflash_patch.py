"""Patched SGLang tree: pure logic, no Ansible import.

A tree is a content-addressed directory ``<trees_dir>/sglang-<version>-<hash12>/`` that holds the
``sglang`` package, extracted from a pinned wheel (a zip, so no pip and no particular host Python is
needed) with a patch series applied, or copied from a user's own checkout (``sglang_tree_src``), plus
``manifest.json`` (what went in) and ``FILES.sha256`` (every file, ``sha256sum -c`` format).

Patches are unified diffs applied here, in Python, with exact context and a nearest-first offset
search like ``patch`` (no fuzz), so hosts need no ``patch`` binary. Every patch is applied in memory
first; a failure raises :class:`PatchError` naming the patch, the file and the hunk, and nothing has
been written. Trees are built in a temporary sibling directory and renamed into place; a tree whose
manifest and files match is recognised and left alone.

Code here must run on the hosts' system Python (3.8+) as well as on the controller.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import zipfile

MANIFEST = "manifest.json"
FILES_LIST = "FILES.sha256"
MANIFEST_FORMAT = 1
PACKAGE = "sglang"
TREE_PREFIX = "sglang-"
TMP_PREFIX = ".tmp-"
OLD_PREFIX = ".old-"
MAX_OFFSET = None  # search the whole file, nearest first (what `patch` does); no fuzz


class TreeError(Exception):
    """Anything wrong with the inputs or the tree that is not a patch hunk."""


class PatchError(TreeError):
    """A patch does not apply. Names the patch, the file and the hunk (number and header line)."""

    def __init__(self, patch, reason, file=None, hunk=None, header=None):
        self.patch = patch
        self.file = file
        self.hunk = hunk
        self.header = header
        self.reason = reason
        where = f"patch {patch}"
        if file:
            where += f", file {file}"
        if hunk is not None:
            where += f", hunk #{hunk}"
            if header:
                where += f" ({header})"
        super().__init__(f"{where}: {reason}")


# --------------------------------------------------------------------------- hashing


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def record_hash_to_hex(value):
    """RECORD's ``sha256=<urlsafe b64, no padding>`` -> hex digest."""
    algo, _, b64 = value.partition("=")
    if algo != "sha256" or not b64:
        raise TreeError(f"unsupported RECORD hash {value!r}")
    return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()


# --------------------------------------------------------------------------- series


def parse_series(text, where="series"):
    """Patch names from a quilt-style series: one name per line, ``#`` comments, blank lines."""
    names = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) != 1:
            raise TreeError(
                f"{where} line {lineno}: {raw!r}: one patch file name per line (no options; patches are -p1)"
            )
        if "/" in line or line.startswith("."):
            raise TreeError(f"{where} line {lineno}: {raw!r}: a plain file name in the series directory")
        if line in names:
            raise TreeError(f"{where} line {lineno}: {line} is listed twice")
        names.append(line)
    return names


def read_series_dir(path):
    """Read ``<path>/series`` and the patches it names: list of ``{name, content (bytes), sha256}``."""
    series_path = os.path.join(path, "series")
    if not os.path.isfile(series_path):
        raise TreeError(f"no series file at {series_path}")
    with open(series_path, encoding="utf-8") as f:
        names = parse_series(f.read(), series_path)
    patches = []
    for name in names:
        ppath = os.path.join(path, name)
        if not os.path.isfile(ppath):
            raise TreeError(f"{series_path} names {name}, but {ppath} does not exist")
        with open(ppath, "rb") as f:
            content = f.read()
        patches.append({"name": name, "content": content, "sha256": sha256_bytes(content)})
    return patches


# --------------------------------------------------------------------------- unified diff


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


# --------------------------------------------------------------------------- wheel


class Wheel:
    """The pinned sglang wheel: checked against its pinned sha256 and against its own RECORD."""

    def __init__(self, path, expected_sha256=None):
        if not os.path.isfile(path):
            raise TreeError(f"wheel {path} does not exist")
        self.path = path
        self.name = os.path.basename(path)
        self.sha256 = sha256_file(path)
        if expected_sha256 and self.sha256 != expected_sha256.lower():
            raise TreeError(
                f"wheel {path} has sha256 {self.sha256}, pinned {expected_sha256}: refusing to use it"
            )
        m = re.match(r"^([A-Za-z0-9_.]+)-([^-]+)-", self.name)
        if not m or m.group(1).lower() != PACKAGE:
            raise TreeError(f"{self.name} is not an sglang wheel file name")
        self.version = m.group(2)
        self.zip = zipfile.ZipFile(path)
        record_name = f"{m.group(1)}-{self.version}.dist-info/RECORD"
        try:
            record = self.zip.read(record_name).decode("utf-8")
        except KeyError:
            raise TreeError(f"{self.name} has no {record_name}") from None
        self.record = {}
        for fields in csv.reader(io.StringIO(record)):
            if len(fields) == 3 and fields[1]:
                self.record[fields[0]] = record_hash_to_hex(fields[1])
        self.members = {
            info.filename: info
            for info in self.zip.infolist()
            if info.filename.startswith(PACKAGE + "/") and not info.is_dir()
        }
        missing = [p for p in self.members if p not in self.record]
        if missing:
            raise TreeError(
                "{}: files not in its RECORD: {}".format(self.name, ", ".join(sorted(missing)[:5]))
            )

    def read(self, relpath):
        info = self.members.get(relpath)
        if info is None:
            return None
        data = self.zip.read(info)
        if sha256_bytes(data) != self.record[relpath]:
            raise TreeError(f"{self.name}: {relpath} does not match the wheel's RECORD")
        return data

    def mode(self, relpath):
        perm = (self.members[relpath].external_attr >> 16) & 0o777
        return 0o755 if perm & 0o111 else 0o644

    def close(self):
        self.zip.close()


def tree_hash_for_wheel(wheel_sha256, patches):
    h = hashlib.sha256()
    h.update(b"dflash-tree/1\nwheel %s\n" % wheel_sha256.encode())
    for p in patches:
        h.update(b"patch %s %s\n" % (p["name"].encode(), p["sha256"].encode()))
    return h.hexdigest()


def tree_hash_for_src(content_sha256):
    return hashlib.sha256(b"dflash-tree/1\nsrc %s\n" % content_sha256.encode()).hexdigest()


def tree_name(version, tree_hash):
    return f"{TREE_PREFIX}{version}-{tree_hash[:12]}"


def files_listing(file_hashes):
    """``sha256sum`` format, sorted by path; its sha256 is the tree digest."""
    return "".join(f"{file_hashes[p]}  {p}\n" for p in sorted(file_hashes)).encode()


def plan_wheel(wheel_path, wheel_sha256, patches):
    """Check the wheel and dry-run the whole series in memory. Nothing is written.

    Returns the plan: everything the tree will contain and the manifest that describes it.
    """
    wheel = Wheel(wheel_path, wheel_sha256)
    try:
        contents, pristine, touched_by = apply_series(wheel.read, patches)
        file_hashes = {p: wheel.record[p] for p in wheel.members}
        modes = {p: wheel.mode(p) for p in wheel.members}
        for path, data in contents.items():
            if data is None:
                file_hashes.pop(path, None)
                modes.pop(path, None)
            else:
                file_hashes[path] = sha256_bytes(data)
                modes.setdefault(path, 0o644)
        thash = tree_hash_for_wheel(wheel.sha256, patches)
        manifest = {
            "format": MANIFEST_FORMAT,
            "name": tree_name(wheel.version, thash),
            "hash": thash,
            "source": "wheel",
            "sglang_version": wheel.version,
            "wheel": {"name": wheel.name, "sha256": wheel.sha256},
            "src": None,
            "patches": [
                {
                    "name": p["name"],
                    "sha256": p["sha256"],
                    "files": sorted(f for f, names in touched_by.items() if p["name"] in names),
                }
                for p in patches
            ],
            "files": {
                path: {"sha256": file_hashes.get(path), "pristine_sha256": pristine[path]}
                for path in sorted(contents)
            },
            "file_count": len(file_hashes),
            "tree_sha256": sha256_bytes(files_listing(file_hashes)),
        }
        return {
            "manifest": manifest,
            "wheel": wheel,
            "contents": contents,
            "file_hashes": file_hashes,
            "modes": modes,
        }
    except BaseException:
        wheel.close()
        raise


# --------------------------------------------------------------------------- user source tree


def _walk_files(root):
    """Relative paths of the regular files under root/sglang, skipping caches and VCS dirs."""
    base = os.path.join(root, PACKAGE)
    if not os.path.isdir(base):
        raise TreeError(f"{root} has no {PACKAGE}/ package directory")
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith(".git"))
        for fn in sorted(filenames):
            if fn.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, fn)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            out.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return out


def src_package_root(src):
    """A checkout may be the repository (python/sglang) or a directory that holds sglang/ directly."""
    for cand in (src, os.path.join(src, "python")):
        if os.path.isfile(os.path.join(cand, PACKAGE, "__init__.py")):
            return cand
    raise TreeError(f"sglang_tree_src {src}: neither {PACKAGE}/ nor python/{PACKAGE}/ holds a package")


_VERSION_RE = re.compile(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""")


def version_from_source(text):
    m = _VERSION_RE.search(text)
    return m.group(1) if m else None


def read_version(root):
    """sglang's version from _version.py / version.py without importing it."""
    for fn in ("_version.py", "version.py"):
        path = os.path.join(root, PACKAGE, fn)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                version = version_from_source(f.read())
            if version:
                return version
    return "unknown"


def pack_src(src, out_dir):
    """Controller side: pack a user's checkout into a deterministic tarball named by its content.

    Returns ``{archive, content_sha256, sglang_version, file_count, changed}``.
    """
    root = src_package_root(os.path.abspath(src))
    rels = _walk_files(root)
    hashes = {}
    for rel in rels:
        hashes[rel] = sha256_file(os.path.join(root, rel))
    content_sha = sha256_bytes(files_listing(hashes))
    version = read_version(root)
    os.makedirs(out_dir, exist_ok=True)
    archive = os.path.join(out_dir, f"sglang-src-{content_sha[:16]}.tar")
    changed = False
    if not os.path.isfile(archive):
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=out_dir)
        os.close(fd)
        try:
            with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
                for rel in rels:
                    full = os.path.join(root, rel)
                    info = tar.gettarinfo(full, arcname=rel)
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mtime = 0
                    info.mode = 0o755 if os.stat(full).st_mode & 0o111 else 0o644
                    with open(full, "rb") as f:
                        tar.addfile(info, f)
            os.replace(tmp, archive)
            changed = True
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return {
        "archive": archive,
        "manifest": src_manifest(hashes, version, root),
        "content_sha256": content_sha,
        "sglang_version": version,
        "file_count": len(rels),
        "src": root,
        "changed": changed,
    }


def src_manifest(file_hashes, version, src_label=None):
    """The manifest of a tree shipped from a user's checkout."""
    content_sha256 = sha256_bytes(files_listing(file_hashes))
    thash = tree_hash_for_src(content_sha256)
    return {
        "format": MANIFEST_FORMAT,
        "name": tree_name(version, thash),
        "hash": thash,
        "source": "src",
        "sglang_version": version,
        "wheel": None,
        "src": {"path": src_label, "content_sha256": content_sha256},
        "patches": [],
        # a user's checkout: every file is recorded, since any of them may carry their changes
        "files": {p: {"sha256": file_hashes[p], "pristine_sha256": None} for p in sorted(file_hashes)},
        "file_count": len(file_hashes),
        "tree_sha256": content_sha256,
    }


def plan_src_archive(archive, content_sha256, src_label=None):
    """Host side: read a packed checkout into memory and check it against its content hash."""
    contents = {}
    modes = {}
    with tarfile.open(archive, "r") as tar:
        for info in tar:
            if not info.isfile():
                raise TreeError(f"{archive}: {info.name} is not a regular file")
            name = info.name
            parts = name.split("/")
            if name.startswith("/") or ".." in parts or parts[0] != PACKAGE:
                raise TreeError(f"{archive}: unexpected member {name}")
            contents[name] = tar.extractfile(info).read()
            modes[name] = 0o755 if info.mode & 0o111 else 0o644
    file_hashes = {p: sha256_bytes(d) for p, d in contents.items()}
    actual = sha256_bytes(files_listing(file_hashes))
    if actual != content_sha256:
        raise TreeError(f"{archive}: content sha256 {actual}, expected {content_sha256}")
    version = "unknown"
    for fn in ("sglang/_version.py", "sglang/version.py"):
        found = version_from_source(contents[fn].decode("utf-8", "replace")) if fn in contents else None
        if found:
            version = found
            break
    manifest = src_manifest(file_hashes, version, src_label)
    return {
        "manifest": manifest,
        "wheel": None,
        "contents": contents,
        "file_hashes": file_hashes,
        "modes": modes,
    }


# --------------------------------------------------------------------------- tree on disk


def read_manifest(tree_dir):
    path = os.path.join(tree_dir, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def scan_tree(tree_dir):
    """sha256 of every file in the tree's package (caches skipped)."""
    return {rel: sha256_file(os.path.join(tree_dir, rel)) for rel in _walk_files(tree_dir)}


def verify_tree(tree_dir, expected_hash=None):
    """Is the tree on disk exactly what its manifest says? Returns (ok, reason)."""
    if not os.path.isdir(tree_dir):
        return False, "absent"
    manifest = read_manifest(tree_dir)
    if manifest is None:
        return False, f"no readable {MANIFEST}"
    if manifest.get("format") != MANIFEST_FORMAT:
        return False, "manifest format {!r}".format(manifest.get("format"))
    if expected_hash and manifest.get("hash") != expected_hash:
        return False, "manifest hash {} differs from {}".format(manifest.get("hash"), expected_hash)
    try:
        found = scan_tree(tree_dir)
    except TreeError as e:
        return False, str(e)
    if sha256_bytes(files_listing(found)) == manifest.get("tree_sha256"):
        return True, "matches its manifest"
    recorded = {}
    try:
        with open(os.path.join(tree_dir, FILES_LIST), encoding="utf-8") as f:
            for row in f:
                digest, _, rel = row.rstrip("\n").partition("  ")
                recorded[rel] = digest
    except OSError:
        pass
    diffs = sorted(p for p in set(found) | set(recorded) if found.get(p) != recorded.get(p))
    detail = (": " + ", ".join(diffs[:5]) + (" ..." if len(diffs) > 5 else "")) if diffs else ""
    return False, f"files differ from the manifest{detail}"


def _remove_pycache(tree_dir, relpaths):
    """Drop the bytecode caches of touched modules (and any stray ones: a fresh tree has none)."""
    removed = []
    dirs = {os.path.dirname(os.path.join(tree_dir, p)) for p in relpaths}
    for d in sorted(dirs):
        cache = os.path.join(d, "__pycache__")
        if os.path.isdir(cache):
            shutil.rmtree(cache)
            removed.append(os.path.relpath(cache, tree_dir))
    return removed


def write_tree(plan, tree_dir):
    """Write the plan into a temporary sibling of tree_dir and rename it into place."""
    parent = os.path.dirname(tree_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=TMP_PREFIX + os.path.basename(tree_dir) + "-", dir=parent)
    try:
        os.chmod(tmp, 0o755)
        wheel = plan["wheel"]
        contents = plan["contents"]
        for rel in sorted(plan["file_hashes"]):
            if rel in contents:
                data = contents[rel]
            else:
                data = wheel.read(rel)
            dest = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
            with open(dest, "wb") as f:
                f.write(data)
            os.chmod(dest, plan["modes"].get(rel, 0o644))
        listing = files_listing(plan["file_hashes"])
        with open(os.path.join(tmp, FILES_LIST), "wb") as f:
            f.write(listing)
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(plan["manifest"], f, indent=2, sort_keys=True)
            f.write("\n")
        for fn in (FILES_LIST, MANIFEST):
            os.chmod(os.path.join(tmp, fn), 0o644)
        for dirpath, _dirnames, _filenames in os.walk(tmp):
            os.chmod(dirpath, 0o755)  # readable by the service user whatever the umask
        _remove_pycache(tmp, contents)
        ok, reason = verify_tree(tmp, plan["manifest"]["hash"])
        if not ok:
            raise TreeError(f"tree written to {tmp} does not verify: {reason}")
        old = None
        if os.path.lexists(tree_dir):
            old = tempfile.mkdtemp(prefix=OLD_PREFIX + os.path.basename(tree_dir) + "-", dir=parent)
            os.rmdir(old)
            os.rename(tree_dir, old)
        os.rename(tmp, tree_dir)
        tmp = None
        if old:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp and os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def clean_leftovers(trees_dir):
    """Remove temporary build dirs left behind by an interrupted run (never a finished tree)."""
    removed = []
    if not os.path.isdir(trees_dir):
        return removed
    for fn in sorted(os.listdir(trees_dir)):
        if fn.startswith((TMP_PREFIX + TREE_PREFIX, OLD_PREFIX + TREE_PREFIX)):
            full = os.path.join(trees_dir, fn)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full, ignore_errors=True)
                removed.append(fn)
    return removed


def fact_from_manifest(manifest, tree_dir):
    """The ``dflash_tree`` fact (docs/design.md)."""
    return {
        "name": manifest["name"],
        "hash": manifest["hash"],
        "path": tree_dir,
        "site_packages": tree_dir,
        "manifest": os.path.join(tree_dir, MANIFEST),
        "source": manifest["source"],
        "sglang_version": manifest["sglang_version"],
        "wheel_name": (manifest.get("wheel") or {}).get("name"),
        "wheel_sha256": (manifest.get("wheel") or {}).get("sha256"),
        "src": manifest.get("src"),
        "patches": [{"name": p["name"], "sha256": p["sha256"]} for p in manifest["patches"]],
        "files": {p: v["sha256"] for p, v in manifest["files"].items()},
        "tree_sha256": manifest["tree_sha256"],
    }


def ensure_tree(plan, trees_dir, check_mode=False):
    """Make ``<trees_dir>/<plan name>`` hold exactly the plan. Returns ``{changed, reason, tree}``.

    A tree whose manifest hash and files match is left alone (nothing written). Otherwise it is
    (re)built in a temporary sibling and renamed into place.
    """
    manifest = plan["manifest"]
    tree_dir = os.path.join(trees_dir, manifest["name"])
    ok, reason = verify_tree(tree_dir, manifest["hash"])
    leftovers = []
    if os.path.isdir(trees_dir):
        leftovers = [
            fn
            for fn in os.listdir(trees_dir)
            if fn.startswith((TMP_PREFIX + TREE_PREFIX, OLD_PREFIX + TREE_PREFIX))
        ]
    result = {"tree": fact_from_manifest(manifest, tree_dir), "manifest": manifest}
    if ok:
        result.update(changed=bool(leftovers), reason="already in place: " + reason)
        if leftovers and not check_mode:
            clean_leftovers(trees_dir)
        result["leftovers_removed"] = leftovers
        return result
    result.update(changed=True, reason="{}: {}".format("build" if reason == "absent" else "rebuild", reason))
    result["leftovers_removed"] = leftovers
    if check_mode:
        return result
    clean_leftovers(trees_dir)
    write_tree(plan, tree_dir)
    return result


def close_plan(plan):
    if plan.get("wheel") is not None:
        plan["wheel"].close()


def plan_summary(plan):
    """What the controller-side dry run returns: no file contents, just the facts."""
    m = plan["manifest"]
    return {
        "name": m["name"],
        "hash": m["hash"],
        "sglang_version": m["sglang_version"],
        "wheel": m["wheel"],
        "patches": m["patches"],
        "files": m["files"],
        "tree_sha256": m["tree_sha256"],
    }


def is_tree_name(name):
    return name.startswith(TREE_PREFIX) and not name.startswith((TMP_PREFIX, OLD_PREFIX))
