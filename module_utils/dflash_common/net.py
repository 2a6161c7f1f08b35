"""Addresses in URLs: an instance's base URL from its own host, an address as it goes into a URL, an instance's
port and base URL as its release manifest entry records them. Pure functions, no Ansible import."""

from __future__ import annotations

from ansible.module_utils.dflash_common.argv import arg_value
from ansible.module_utils.dflash_common.sglang import DEFAULT_PORT

# the bind addresses that mean "every address of this host"
WILDCARDS = ("0.0.0.0", "::", "[::]")


def url_host(address: str) -> str:
    """An address as it goes into a URL (IPv6 in brackets)."""
    a = str(address)
    return f"[{a}]" if ":" in a and not a.startswith("[") else a


def local_url(host, port) -> str:
    """The base URL that reaches a server listening on ``host``:``port`` from its own host (a wildcard bind, or
    none, is reached on 127.0.0.1)."""
    host = str(host or "")
    if host in WILDCARDS or not host:
        host = "127.0.0.1"
    return f"http://{url_host(host)}:{int(port)}"


def instance_address(entry: dict) -> tuple:
    """(port, base_url) of an instance's release manifest entry: what the flags fact recorded (``port``, ``base_url``).

    Entries written before the manifest carried them (they hold ``args`` only) are read from the launch arguments
    they recorded, here and nowhere else: those releases stay readable (rollback.yml, the activation's port
    plan, what serves checked) without anything else parsing arguments. Without any port: (None, the URL of
    sglang's default port)."""
    port, url, host = entry.get("port"), entry.get("base_url"), None
    if port is None:
        args = entry.get("args") or []
        port, host = arg_value(args, "--port"), arg_value(args, "--host")
    try:
        port = int(port) if port is not None else None
    except (TypeError, ValueError):
        port = None
    if url is None:
        url = local_url(host, DEFAULT_PORT if port is None else port)
    return port, url
