"""The real sglang 0.5.11 wheel for tests: downloaded once from PyPI into .cache/wheels/ (gitignored).

The file name, URL and sha256 come from files/patches/sglang/0.5.11/wheels.json (PyPI's published
digests). A cached copy is re-checked against the pin every time; a download goes to a temporary
file and is renamed into place only when its sha256 matches. ``DFLASH_SGLANG_WHEEL=<path>`` points
the tests at an already-downloaded copy (it is checked against the pin too).
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
PATCH_DIR = REPO_ROOT / "files" / "patches" / "sglang" / SGLANG_VERSION
PINS_FILE = PATCH_DIR / "wheels.json"
CACHE_DIR = REPO_ROOT / ".cache" / "wheels"
# the wheel of the seeds' and the GPU machine's stack (Python 3.12, x86_64)
WHEEL_NAME = f"sglang-{SGLANG_VERSION}-cp312-cp312-manylinux_2_34_x86_64.whl"


def pins() -> dict:
    return json.loads(PINS_FILE.read_text())["wheels"]


def pinned_sha256(name: str = WHEEL_NAME) -> str:
    return pins()[name]["sha256"]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sglang_wheel(name: str = WHEEL_NAME) -> Path:
    """Path of the verified wheel, downloading it once if needed."""
    pin = pins()[name]
    override = os.environ.get("DFLASH_SGLANG_WHEEL")
    if override:
        path = Path(override)
        if _sha256(path) != pin["sha256"]:
            raise RuntimeError(f"DFLASH_SGLANG_WHEEL={path} does not match the pinned sha256 {pin['sha256']}")
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
