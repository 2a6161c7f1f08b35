"""The status tests' fixtures, from status_host.py (a helper module of its own name: several test folders have a
conftest.py, so importing helpers `from conftest` would reach whichever was loaded first)."""

from status_host import host, start  # noqa: F401
