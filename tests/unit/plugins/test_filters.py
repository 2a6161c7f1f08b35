"""filter_plugins/*.py: the plugin files load by path (as Ansible loads them) and share one plain()
from module_utils/dflash_common/jinja.py; the fingerprint fleet filters give what the pure functions give."""

import importlib.util
from pathlib import Path

import pytest
from ansible.module_utils.dflash_common import jinja as dflash_jinja
from ansible.module_utils.dflash_fingerprint import collect, merge, report

ROOT = Path(__file__).resolve().parents[3]
LAB = ROOT / "lab" / "captures"


class TaggedStr(str):
    """Stands in for the tagged str subclasses Ansible 2.19 hands to filters."""


class TaggedInt(int):
    pass


def load_plugin(name):
    spec = importlib.util.spec_from_file_location(f"h10_{name}_filters", ROOT / "filter_plugins" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["dflash_fingerprint", "dflash_instances", "dflash_metrics", "dflash_rollout"])
def test_plugins_share_one_plain(name):
    mod = load_plugin(name)
    assert mod._plain is dflash_jinja.plain
    assert mod.FilterModule().filters()


def test_plain_gives_plain_python():
    got = dflash_jinja.plain({TaggedStr("a"): (TaggedInt(3), True, None, 1.5, [TaggedStr("x")]), 7: {"b": False}})
    assert got == {"a": [3, True, None, 1.5, ["x"]], "7": {"b": False}}
    assert [type(k) for k in got] == [str, str]
    assert [type(v) for v in got["a"]] == [int, bool, type(None), float, list]
    assert type(got["a"][4][0]) is str
    marker = object()
    assert dflash_jinja.plain(marker) is marker


def test_fleet_filters_match_the_pure_functions():
    filters = load_plugin("dflash_fingerprint").FilterModule().filters()
    hostvars = {
        "ct200": {"dflash_fingerprint": merge.fingerprint_from_raw(collect.read_capture(LAB / "ct200")),
                  "__dflash_fingerprint_result": {"refusals": [TaggedStr("ct200: GPU 0 is busy")]}},
        "ct129": {"dflash_fingerprint": merge.fingerprint_from_raw(collect.read_capture(LAB / "ct129"))},
        "down": {},
    }
    collected = filters["dflash_fleet_collect"](hostvars, [TaggedStr("ct200"), "ct129", "down"])
    fleet, refusals = collected["fleet"], collected["refusals"]
    assert fleet["down"] is None and refusals == {"ct200": ["ct200: GPU 0 is busy"], "ct129": [], "down": []}
    assert type(refusals["ct200"][0]) is str
    assert filters["dflash_fleet_rows"](fleet, refusals) == report.fleet_rows(fleet, refusals)
    assert filters["dflash_fleet_text"](fleet, refusals) == report.fleet_text(fleet, refusals)
    assert filters["dflash_fleet_markdown"](fleet, refusals) == report.fleet_markdown(fleet, refusals)
