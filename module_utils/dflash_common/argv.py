"""The one reader of a server command line (a list of words as the unit passes them to sglang).

sglang's argparse reads ``--flag value`` and ``--flag=value``; a word after a flag is its value unless it is
itself a flag (``--...``); the last occurrence of a flag wins. What the validation, the fallback rules, the smoke
test, the bench and the reports ask of an argv is answered here, from ``pairs``. The port and the address an
instance is reached at are not read from its argv: the flags fact and the release manifest carry them
(``port``, ``base_url``). Pure functions, no Ansible import.
"""

from __future__ import annotations


def takes_value(args, i) -> bool:
    """Whether the word after ``args[i]`` (a flag without ``=``) is its value."""
    return i + 1 < len(args) and not str(args[i + 1]).startswith("--")


def pairs(args) -> list:
    """``['--a', '1', '--b=2', '--c', 'x']`` -> ``[('--a', '1'), ('--b', '2'), ('--c', 'x')]``; a bare switch
    has the value None, a word that is neither a flag nor a flag's value comes as (word, None)."""
    out, i = [], 0
    args = [str(a) for a in args or []]
    while i < len(args):
        a = args[i]
        if a.startswith("--") and "=" in a:
            out.append(tuple(a.split("=", 1)))
        elif a.startswith("--") and takes_value(args, i):
            out.append((a, args[i + 1]))
            i += 1
        else:
            out.append((a, None))
        i += 1
    return out


def split_flags(args) -> dict:
    """``['--a', 'x', '--b=y', '--c']`` -> ``{'--a': 'x', '--b': 'y', '--c': None}`` (flags only; last wins)."""
    return {f: v for f, v in pairs(args) if f.startswith("--")}


def flag_values(args, flag) -> list:
    """Every value given to ``flag``, in order."""
    return [v for f, v in pairs(args) if f == flag and v is not None]


def get_flag(args, flag):
    """The last value of ``flag``; True for a bare switch; None when absent."""
    value = None
    for f, v in pairs(args):
        if f == flag:
            value = True if v is None else v
    return value


def arg_value(args, flag):
    """The last value of ``flag`` as a string, None when absent or given as a bare switch."""
    value = get_flag(args, flag)
    return None if value is True else value


def has_flag(args, flag) -> bool:
    return any(f == flag for f, _v in pairs(args))
