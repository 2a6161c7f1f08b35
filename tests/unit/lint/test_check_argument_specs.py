"""scripts/check_argument_specs.py (run by `make lint`): each role's argument_specs mirror its defaults."""

import importlib.util
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("check_argument_specs", REPO / "scripts" / "check_argument_specs.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def role(tmp_path, name, defaults, options, entry="main"):
    d = tmp_path / name
    (d / "defaults").mkdir(parents=True)
    (d / "meta").mkdir()
    (d / "defaults" / "main.yml").write_text(yaml.safe_dump(defaults))
    (d / "meta" / "argument_specs.yml").write_text(
        yaml.safe_dump({"argument_specs": {entry: {"options": options}}}, sort_keys=False))
    return d


def test_the_repository_roles_match():
    assert check.main(["x", str(REPO / "roles")]) == 0


def test_every_mismatch_is_named(tmp_path, capsys):
    role(tmp_path, "dflash", {"dflash_prefix": "/opt/dflash"}, {"dflash_prefix": {"type": "raw", "default": "/opt/dflash"}})
    role(tmp_path, "dflash_x", {"__dflash_x_internal": 0, "dflash_x_a": 1, "dflash_x_b": "{{ dflash_prefix }}/b", "dflash_x_gone": 3},
         {"dflash_x_a": {"type": "int", "default": 2},
          "dflash_x_b": {"type": "path", "default": "/opt/dflash/b"},  # a template: documented in words
          "dflash_prefix": {"type": "path", "default": "/srv"},
          "dflash_x_new": {"type": "str", "default": "n"},
          "dflash_x_opt": {"type": "str"},  # optional, no default anywhere: consistent
          "dflash_x_req": {"type": "str", "required": True}})
    assert check.main(["x", str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[:-1] == [
        "dflash_x: dflash_x_gone is in defaults/main.yml but not an option of any entry point",
        "dflash_x (main): dflash_x_a default 2 in argument_specs, 1 in defaults/main.yml",
        ("dflash_x (main): dflash_prefix default '/srv' in argument_specs, '/opt/dflash' in "
        "roles/dflash/defaults/main.yml"),
        ("dflash_x (main): dflash_x_new has default 'n' in argument_specs but none in defaults/main.yml "
        "(nor roles/dflash/defaults/main.yml)"),
    ]
    assert out[-1] == "argument_specs vs defaults: 2 roles, 4 mismatches"


def test_defaults_without_specs(tmp_path, capsys):
    (tmp_path / "dflash_y" / "defaults").mkdir(parents=True)
    (tmp_path / "dflash_y" / "defaults" / "main.yml").write_text("dflash_y_a: 1\n")
    assert check.main(["x", str(tmp_path)]) == 1
    assert "dflash_y: defaults/main.yml but no meta/argument_specs.yml" in capsys.readouterr().out
