#!/usr/bin/env python3
"""Check that each role's meta/argument_specs.yml mirrors its defaults/main.yml (run by `make lint`).

  scripts/check_argument_specs.py [ROLES_DIR]      (default: roles/ next to this script's parent)

For every role with defaults or argument specs:
  - every variable in defaults/main.yml is an option of some entry point, so that role argument
    validation sees it;
  - every option with a `default:` in any entry point has the same default as defaults/main.yml
    (the spec documents the default the role really uses); a default that is a template ("{{ ... }}")
    is documented in words by the spec and not compared;
  - an option that claims a default is defined with it: in the role's defaults or in the shared defaults
    of the `dflash` role (roles/dflash/defaults/main.yml) that every stage role depends on.
Internal variables (`__dflash_...`) in defaults are not inputs and need no spec.
Prints every mismatch at once (role, entry point, variable), exits 1 when there is one.
"""

import sys
from pathlib import Path

import yaml

SHARED_ROLE = "dflash"


def load_yaml(path):
    if not path.is_file():
        return None
    return yaml.safe_load(path.read_text()) or {}


def templated(value):
    return isinstance(value, str) and "{{" in value


def role_problems(role_dir, shared_defaults):
    """The mismatches of one role, as sentences naming role, entry point and variable."""
    name = role_dir.name
    defaults = load_yaml(role_dir / "defaults" / "main.yml") or {}
    specs = (load_yaml(role_dir / "meta" / "argument_specs.yml") or {}).get("argument_specs") or {}
    problems = []
    if defaults and not specs:
        return [f"{name}: defaults/main.yml but no meta/argument_specs.yml"]
    all_options = set()
    for entry in specs.values():
        all_options |= set((entry or {}).get("options") or {})
    for var in defaults:
        if var not in all_options and not var.startswith("__"):
            problems.append(f"{name}: {var} is in defaults/main.yml but not an option of any entry point")
    for entry_name, entry in specs.items():
        for var, spec in ((entry or {}).get("options") or {}).items():
            spec = spec or {}
            if var in defaults:
                if "default" in spec and spec["default"] != defaults[var] and not templated(defaults[var]):
                    problems.append(
                        f"{name} ({entry_name}): {var} default {spec['default']!r} in argument_specs, "
                        f"{defaults[var]!r} in defaults/main.yml")
            elif var in shared_defaults and name != SHARED_ROLE:
                if ("default" in spec and spec["default"] != shared_defaults[var]
                        and not templated(shared_defaults[var])):
                    problems.append(
                        f"{name} ({entry_name}): {var} default {spec['default']!r} in argument_specs, "
                        f"{shared_defaults[var]!r} in roles/{SHARED_ROLE}/defaults/main.yml")
            elif "default" in spec:
                problems.append(
                    f"{name} ({entry_name}): {var} has default {spec['default']!r} in argument_specs but none in "
                    f"defaults/main.yml (nor roles/{SHARED_ROLE}/defaults/main.yml)")
    return problems


def main(argv):
    roles = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "roles"
    shared = load_yaml(roles / SHARED_ROLE / "defaults" / "main.yml") or {}
    problems = []
    checked = 0
    for role_dir in sorted(p for p in roles.iterdir() if p.is_dir()):
        if (role_dir / "defaults").is_dir() or (role_dir / "meta" / "argument_specs.yml").is_file():
            checked += 1
            problems += role_problems(role_dir, shared)
    for line in problems:
        print(line)
    print(f"argument_specs vs defaults: {checked} roles, {len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
