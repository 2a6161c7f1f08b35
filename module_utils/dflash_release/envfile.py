"""The instances' env files (``instances/<name>.env``, 0600, systemd EnvironmentFile syntax)."""

from __future__ import annotations

from ansible.module_utils.dflash_common.secrets import MASK, SECRET_ENV_NAMES, is_secret_env
from ansible.module_utils.dflash_release.manifest import ENV_KEY_RE, ReleaseError


def _quote_env_value(value: str) -> str:
    # systemd EnvironmentFile: inside double quotes a backslash escapes  "  \  `  $  and
    # newlines would continue the value, so those are escaped / refused.
    out = value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
    return '"' + out + '"'


def render_env_file(env: dict, args: list, where: str) -> str:
    """EnvironmentFile text for one instance: the env (sorted) then DFLASH_ARGS.

    ``where`` names host/instance for error messages.  The unit expands ``$DFLASH_ARGS``
    unquoted, which systemd splits at whitespace without any quote handling: an argument that
    contains whitespace cannot survive that and is refused here rather than mangled."""
    lines = ["# managed by dflash-deploy (dflash_release); read by dflash-<instance>.service"]
    for key in sorted(env or {}):
        value = env[key]
        if not ENV_KEY_RE.match(str(key)):
            raise ReleaseError(f"{where}: env: {key!r} is not a valid environment variable name")
        if key == "DFLASH_ARGS":
            raise ReleaseError(f"{where}: env: DFLASH_ARGS is reserved for the rendered flags")
        if value is None:
            continue
        if isinstance(value, bool):
            value = "1" if value else "0"
        value = str(value)
        if "\n" in value or "\r" in value or "\0" in value:
            raise ReleaseError(f"{where}: env.{key}: a value may not contain newlines or NUL")
        lines.append(f"{key}={_quote_env_value(value)}")
    joined = []
    for i, arg in enumerate(args or []):
        arg = str(arg)
        if arg == "" or any(c.isspace() for c in arg):
            raise ReleaseError(
                f"{where}: args[{i}] {arg!r}: empty or contains whitespace; systemd splits "
                "$DFLASH_ARGS at whitespace (write JSON flags compactly, without spaces)"
            )
        joined.append(arg)
    lines.append(f"DFLASH_ARGS={_quote_env_value(' '.join(joined))}")
    return "\n".join(lines) + "\n"


def parse_env_file(text: str) -> dict:
    """Parse EnvironmentFile text the way systemd does for the subset render_env_file writes
    (comments, KEY=value, KEY="value" with \\-escapes, KEY='value')."""
    env = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, _, rest = line.partition("=")
        key = key.strip()
        rest = rest.lstrip()
        if rest.startswith('"'):
            out, i = [], 1
            while i < len(rest) and rest[i] != '"':
                if rest[i] == "\\" and i + 1 < len(rest):
                    i += 1
                out.append(rest[i])
                i += 1
            value = "".join(out)
        elif rest.startswith("'"):
            value = rest[1 : rest.index("'", 1)]
        else:
            value = rest.rstrip()
        env[key] = value
    return env


def _secret(key: str) -> bool:
    return key in SECRET_ENV_NAMES or is_secret_env(key)


def masked_env_text(text: str, changed=()) -> str:
    """An env file as it may be shown (a diff, the play output): the values of API keys and credential
    variables replaced by a mask (``changed``: those whose value differs from the other side, said so)."""
    out = []
    for line in (text or "").splitlines():
        key, sep, _rest = line.partition("=")
        if sep and not line.lstrip().startswith(("#", ";")) and _secret(key.strip()):
            line = f"{key}={MASK}{' (changed)' if key.strip() in changed else ''}"
        out.append(line)
    return "\n".join(out) + ("\n" if out else "")


def env_changes(old_text: str | None, new_text: str) -> tuple[list, set]:
    """What changes between two env files, in words (secrets by name only), and the secret variables whose
    value changes. -> (["env FOO: 1 -> 2", "env +BAR=x", "env -BAZ", "env HF_TOKEN: changed (a secret: not
    shown)", "flags: -a +b"], {"HF_TOKEN"})"""
    old = parse_env_file(old_text or "")
    new = parse_env_file(new_text or "")
    lines, secrets_changed = [], set()
    for key in sorted(set(old) | set(new)):
        if key == "DFLASH_ARGS" or old.get(key) == new.get(key):
            continue
        if _secret(key):
            secrets_changed.add(key)
            what = "added" if key not in old else ("removed" if key not in new else "changed")
            lines.append(f"env {key}: {what} (a secret: not shown)")
        elif key not in old:
            lines.append(f"env +{key}={new[key]}")
        elif key not in new:
            lines.append(f"env -{key}")
        else:
            lines.append(f"env {key}: {old[key]} -> {new[key]}")
    oa, na = (old.get("DFLASH_ARGS") or "").split(), (new.get("DFLASH_ARGS") or "").split()
    if oa != na:
        removed = [a for a in oa if a not in na]
        added = [a for a in na if a not in oa]
        lines.append("flags: " + (" ".join([f"-{a}" for a in removed] + [f"+{a}" for a in added]) or "reordered"))
    return lines, secrets_changed
