"""Server flags checked against the pinned sglang's own argument parser, before anything changes.

``files/patches/sglang/<version>/server-flags.txt`` lists every option string that the patched
``ServerArgs.add_cli_args`` registers (``scripts/extract_sglang_flags.py``: ast over the pinned wheel +
the patch series, nothing imported) as ``--flag dest kind`` (kind: switch | value | values). These
functions apply argparse's rules to an instance's ``extra_args`` / ``pin_flags`` the way
``sglang serve``'s parser (allow_abbrev, the default) would: an exact option string, else a unique
prefix; an unknown one, an ambiguous prefix, a switch followed by a value, a flag without its value.

Pure functions, no Ansible import.
"""

from __future__ import annotations

import difflib
import os
import re

KINDS = ("switch", "value", "values")
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def parse_flags_text(text: str) -> dict:
    """server-flags.txt -> {flag: (dest, kind)}; '#' lines are comments."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if parts and parts[0].startswith("--"):
            kind = parts[2] if len(parts) > 2 and parts[2] in KINDS else "value"
            out[parts[0]] = (parts[1] if len(parts) > 1 else parts[0][2:].replace("-", "_"), kind)
    return out


def load_flags(path: str) -> tuple[dict | None, str]:
    """(flags or None, what was read / why not)."""
    if not path or not os.path.isfile(path):
        return None, f"{path or 'no file'} not found"
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    head = next((ln[1:].strip() for ln in text.splitlines() if ln.startswith("#")), "")
    return parse_flags_text(text), head


def resolve(token: str, known: dict) -> tuple[str | None, str | None]:
    """An option string as argparse finds it -> (full flag, None) | (None, 'unknown' | 'ambiguous: ...')."""
    flag = token.split("=", 1)[0]
    if flag in known:
        return flag, None
    matches = sorted(k for k in known if k.startswith(flag)) if flag.startswith("--") and len(flag) > 2 else []
    if len(matches) == 1:
        return matches[0], None
    if matches:
        return None, "ambiguous: " + ", ".join(matches[:6]) + (" ..." if len(matches) > 6 else "")
    return None, "unknown"


def _looks_like_flag(token: str) -> bool:
    return token.startswith("-") and not _NEGATIVE_NUMBER.match(token)


def suggest(token: str, known: dict) -> str:
    close = difflib.get_close_matches(token.split("=", 1)[0], list(known), n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def check_args(args: list, known: dict, version: str) -> tuple[list, list]:
    """-> (errors [(index, message)], parsed [(index, full flag, value or None)]) of an argument list."""
    errors, parsed = [], []
    args = [str(a) for a in args or []]
    i = 0
    what = f"sglang {version} (with the toolkit's patch series)"
    while i < len(args):
        tok = args[i]
        if not _looks_like_flag(tok):
            errors.append((i, (f"'{tok}' is not a flag and follows no flag that takes a value: sglang would stop "
                              f"with 'unrecognized arguments: {tok}'")))
            i += 1
            continue
        full, why = resolve(tok, known)
        if full is None:
            if why == "unknown":
                errors.append((i, (f"'{tok.split('=', 1)[0]}' is not a flag of {what}{suggest(tok, known)}: sglang "
                                  "would stop with 'unrecognized arguments'")))
            else:
                errors.append((i, (f"'{tok.split('=', 1)[0]}' is an ambiguous abbreviation in {what} "
                                  f"({why.split(': ', 1)[1]}): write the whole flag")))
            i += 1
            while i < len(args) and not _looks_like_flag(args[i]):
                i += 1  # its value(s) belong to the bad flag
            continue
        kind = known[full][1]
        inline = tok.split("=", 1)[1] if "=" in tok else None
        if kind == "switch":
            if inline is not None:
                errors.append((i, f"'{full}' takes no value, but '{tok}' gives one"))
            elif i + 1 < len(args) and not _looks_like_flag(args[i + 1]):
                errors.append((i + 1, (f"'{full}' takes no value, but '{args[i + 1]}' follows it: sglang would stop "
                                      f"with 'unrecognized arguments: {args[i + 1]}'")))
                i += 1
            parsed.append((i, full, None))
            i += 1
        elif kind == "value":
            if inline is not None:
                parsed.append((i, full, inline))
                i += 1
            elif i + 1 < len(args) and not _looks_like_flag(args[i + 1]):
                parsed.append((i, full, args[i + 1]))
                i += 2
            else:
                errors.append((i, f"'{full}' needs a value (sglang: 'expected one argument')"))
                i += 1
        else:  # values: everything up to the next flag
            vals = [inline] if inline is not None else []
            i += 1
            while inline is None and i < len(args) and not _looks_like_flag(args[i]):
                vals.append(args[i])
                i += 1
            parsed.append((i, full, vals))
    return errors, parsed


def check_pins(pins: dict, known: dict, version: str) -> tuple[list, list]:
    """pin_flags {flag: value} -> (errors [(flag, message)], parsed [(flag, full flag)])."""
    errors, parsed = [], []
    for flag, value in (pins or {}).items():
        flag = str(flag)
        full, why = resolve(flag, known)
        if full is None:
            if why == "unknown":
                errors.append((flag, (f"is not a flag of sglang {version} (with the toolkit's patch series)"
                                     f"{suggest(flag, known)}")))
            else:
                errors.append((flag, f"is an ambiguous abbreviation ({why.split(': ', 1)[1]}): write the whole flag"))
            continue
        kind = known[full][1]
        if kind == "switch" and value not in (True, None, False):
            errors.append((flag, f"'{full}' takes no value: pin it as true (or false to leave it out), not {value!r}"))
        elif kind != "switch" and value in (True, None):
            errors.append((flag, f"'{full}' needs a value"))
        parsed.append((flag, full))
    return errors, parsed
