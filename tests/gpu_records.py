"""Files of the project's GPU records (gpu-harness/records/<record>/) for tests.

A record keeps its README.md as a plain file and the raw run in raw.tar.xz (gpu-harness/pack_record.py):
a test that takes real figures or logs from a record reads the member from the archive.
"""

from __future__ import annotations

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
