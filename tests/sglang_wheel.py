"""The real sglang wheels for tests: downloaded once from PyPI into .cache/wheels/ (gitignored).

The file name, URL and sha256 come from files/patches/sglang/<version>/wheels.json (PyPI's published
digests); 0.5.11 unless a version is named. A cached copy is re-checked against the pin every time; a
download goes to a temporary file and is renamed into place only when its sha256 matches.
``DFLASH_SGLANG_WHEEL=<path>`` points the 0.5.11 tests at an already-downloaded copy and
``DFLASH_SGLANG_WHEEL_<version with underscores>`` (e.g. ``DFLASH_SGLANG_WHEEL_0_5_17``) those of another
version (checked against the pin too).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SGLANG_VERSION = "0.5.11"
PATCHES = REPO_ROOT / "files" / "patches" / "sglang"
PATCH_DIR = PATCHES / SGLANG_VERSION
PINS_FILE = PATCH_DIR / "wheels.json"
CACHE_DIR = REPO_ROOT / ".cache" / "wheels"


def versions() -> list[str]:
    """Every version the toolkit has a folder for (a series and PyPI's digests), oldest first."""
    found = [d.name for d in PATCHES.iterdir() if (d / "wheels.json").is_file() and (d / "series").is_file()]
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")))


def patch_dir(version: str = SGLANG_VERSION) -> Path:
    return PATCHES / version


def wheel_name(version: str = SGLANG_VERSION) -> str:
    """The wheel of the seeds' and the GPU machine's stack (Python 3.12, x86_64)."""
    return f"sglang-{version}-cp312-cp312-manylinux_2_34_x86_64.whl"


WHEEL_NAME = wheel_name()


def pins(version: str = SGLANG_VERSION) -> dict:
    return json.loads((patch_dir(version) / "wheels.json").read_text())["wheels"]


def pinned_sha256(name: str | None = None, version: str = SGLANG_VERSION) -> str:
    return pins(version)[name or wheel_name(version)]["sha256"]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sglang_wheel(name: str | None = None, version: str = SGLANG_VERSION) -> Path:
    """Path of the verified wheel, downloading it once if needed."""
    name = name or wheel_name(version)
    pin = pins(version)[name]
    env = "DFLASH_SGLANG_WHEEL" + ("" if version == SGLANG_VERSION else "_" + version.replace(".", "_"))
    override = os.environ.get(env)
    if override:
        path = Path(override)
        if _sha256(path) != pin["sha256"]:
            raise RuntimeError(f"{env}={path} does not match the pinned sha256 {pin['sha256']}")
        return path
    path = CACHE_DIR / name
    if path.is_file():
        if _sha256(path) == pin["sha256"]:
            return path
        path.unlink()  # a stale or truncated copy: fetch it again
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=CACHE_DIR)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(pin["url"], timeout=120) as resp:
            while chunk := resp.read(1 << 20):
                out.write(chunk)
        got = _sha256(Path(tmp))
        if got != pin["sha256"]:
            raise RuntimeError(f"{pin['url']}: sha256 {got}, PyPI publishes {pin['sha256']}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
