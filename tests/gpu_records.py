"""Files of the project's GPU records (gpu-harness/records/<record>/) for tests.

A record keeps its README.md as a plain file and the raw run in raw.tar.xz (gpu-harness/pack_record.py):
a test that takes real figures or logs from a record reads the member from the archive.
"""

from __future__ import annotations

import fnmatch
import tarfile
from pathlib import Path

RECORDS = Path(__file__).resolve().parent.parent / "gpu-harness" / "records"


def record_file(record: str, member: str) -> bytes:
    """The bytes of `member` (its path inside the record, as the record's README names it)."""
    archive = RECORDS / record / "raw.tar.xz"
    with tarfile.open(archive, mode="r:xz") as tar:
        try:
            return tar.extractfile(member).read()
        except KeyError:
            raise KeyError(f"{archive}: no member {member}") from None


def record_text(record: str, member: str) -> str:
    return record_file(record, member).decode("utf-8")


def record_members(pattern: str) -> list[tuple[str, str]]:
    """(record, member) of every file in every record whose base name matches the glob `pattern`."""
    found = []
    for archive in sorted(RECORDS.glob("*/raw.tar.xz")):
        with tarfile.open(archive, mode="r:xz") as tar:
            found += [(archive.parent.name, m.name) for m in tar.getmembers()
                      if m.isfile() and fnmatch.fnmatch(Path(m.name).name, pattern)]
    return found
