"""The one reader of a server command line (a list of words as the unit passes them to sglang): a flag's value,
whether a flag is given. What the validation, the smoke test, the bench and the diagnosis ask of an argv, in one
place. Pure functions, no Ansible import.
"""

from __future__ import annotations


def arg_value(args, flag):
    """Value of ``--flag value`` or ``--flag=value`` (the last one wins), else None."""
    value = None
    args = [str(a) for a in args or []]
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def has_flag(args, flag) -> bool:
    return any(str(a) == flag or str(a).startswith(flag + "=") for a in args or [])
