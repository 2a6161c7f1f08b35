"""files/patches/sglang/versions.yml against the wheels it cites and the version folders.

Each supported version's pins are its wheel's own Requires-Dist (METADATA), its attention backends and
speculative algorithms are what its source declares (read with ast: nothing imported), its overlay pins
(overlay.yml, which roles/dflash_layers reads) and its lock (overlay.lock.json: every wheel with a sha256
and URL) agree with them, the version ranges agree with the per-version pins, and every fact names its
source.
"""

from __future__ import annotations

import ast
import json
import re
import zipfile

import pytest
import yaml
from sglang_wheel import REPO_ROOT, patch_dir, sglang_wheel, versions

DATA = yaml.safe_load((REPO_ROOT / "files" / "patches" / "sglang" / "versions.yml").read_text())
SUPPORTED = DATA["supported"]
CHOICES_FILE = {"0.5.11": "sglang/srt/server_args.py", "0.5.17": "sglang/srt/server_args.py",
                "0.5.23": "sglang/srt/arg_groups/choices.py"}  # fmt: skip
# METADATA spells some names differently (extras, underscores)
META_NAME = {"flashinfer-python": "flashinfer_python", "flashinfer-cubin": "flashinfer_cubin"}


def wheel_zip(version):
    return zipfile.ZipFile(sglang_wheel(version=version))


def requires(version):
    """{name: version} of the wheel's exact (==) Requires-Dist, extras and markers dropped."""
    with wheel_zip(version) as z:
        meta = z.read(f"sglang-{version}.dist-info/METADATA").decode()
    out = {}
    for line in meta.splitlines():
        m = re.match(r"Requires-Dist: ([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^;\s]+)", line)
        if m:
            out[m.group(1).lower()] = m.group(2)
        if line.startswith("Requires-Python:"):
            out["python"] = line.split(":", 1)[1].strip()
    return out


def module_assign(version, rel, name):
    with wheel_zip(version) as z:
        tree = ast.parse(z.read(rel))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{rel} of sglang {version} has no {name}")


def enum_members(version):
    with wheel_zip(version) as z:
        tree = ast.parse(z.read("sglang/srt/speculative/spec_info.py"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SpeculativeAlgorithm")
    return [t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]


def test_the_supported_versions_are_the_version_folders():
    assert SUPPORTED == versions()
    assert DATA["default"] in SUPPORTED and set(DATA["gpu_proven"]) == set(SUPPORTED)


@pytest.mark.parametrize("version", SUPPORTED)
def test_pins_are_the_wheels_own_requires_dist(version):
    facts = DATA["versions"][version]
    meta = requires(version)
    pins = {k: v for k, v in facts["pins"].items() if k != "source"}
    for name, pinned in pins.items():
        assert meta.get(META_NAME.get(name, name).lower()) == pinned, f"{version}: {name}"
    assert meta["python"] == facts["python"]["value"]
    for gone in facts.get("no_longer_pinned", {}).get("value", []):
        assert META_NAME.get(gone, gone).lower() not in meta
    wheels = json.loads((patch_dir(version) / "wheels.json").read_text())["wheels"]
    tags = sorted({name.split("-")[2] for name in wheels})
    assert tags == facts["python"]["wheels"]


@pytest.mark.parametrize("version", SUPPORTED)
def test_backends_and_algorithms_are_the_sources_own(version):
    facts = DATA["versions"][version]
    assert module_assign(version, CHOICES_FILE[version], "ATTENTION_BACKEND_CHOICES") == facts["attention_backends"]["value"]
    assert enum_members(version) == facts["speculative_algorithms"]["value"]


def overlay_requirements(version):
    """The version's overlay pins: its folder's overlay.yml (roles/dflash_layers reads it for the host's version)."""
    return yaml.safe_load((patch_dir(version) / "overlay.yml").read_text())["dflash_layers_overlay"]["requirements"]


def test_the_layers_role_reads_the_versions_overlay():
    defaults = (REPO_ROOT / "roles" / "dflash_layers" / "defaults" / "main.yml").read_text()
    assert "files/patches/sglang/' ~ dflash_sglang_version" in defaults and "/overlay.yml'" in defaults
    for version in SUPPORTED:
        assert (patch_dir(version) / "overlay.yml").is_file()


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_overlay_pins_the_wheels_versions_and_its_lock_has_every_digest(version):
    reqs = dict(r.split("==") for r in overlay_requirements(version))
    pins = DATA["versions"][version]["pins"]
    assert reqs["sglang"] == version
    for name, pinned in reqs.items():
        if name in pins:
            assert pinned == pins[name], f"{version}: overlay pins {name}=={pinned}, sglang {pins[name]}"
    lock_path = patch_dir(version) / "overlay.lock.json"
    if not lock_path.is_file():
        assert version == "0.5.11"  # its overlay is resolved by the role (wheelhouse locks), not committed
        return
    lock = json.loads(lock_path.read_text())
    assert sorted(lock["requirements"]) == sorted(overlay_requirements(version))
    wheels = {w["name"]: w for w in lock["wheels"]}
    for name, pinned in reqs.items():
        assert wheels[name]["version"] == pinned
    for w in lock["wheels"]:
        assert re.fullmatch(r"[0-9a-f]{64}", w["sha256"]) and w["url"].startswith("https://files.pythonhosted.org/")
        assert w["filename"].endswith(".whl") and w["url"].endswith("/" + w["filename"])


def in_range(version, spec):
    def key(v):
        return tuple(int(x) for x in v.split("."))

    for clause in spec.split(","):
        op, v = re.match(r"(>=|<=|<|>|==)(.+)", clause.strip()).groups()
        ok = {">=": key(version) >= key(v), "<=": key(version) <= key(v), "<": key(version) < key(v),
              ">": key(version) > key(v), "==": key(version) == key(v)}[op]  # fmt: skip
        if not ok:
            return False
    return True


def test_the_ranges_agree_with_the_versions():
    for row in DATA["ranges"]:
        assert row["source"], row
        for version in SUPPORTED:
            if not in_range(version, row["versions"]):
                continue
            facts = DATA["versions"][version]
            if row["fact"] == "torch_pin":
                assert facts["pins"]["torch"] == row["value"], (version, row)
            elif row["fact"] == "python_min":
                assert facts["python"]["value"] == ">=" + row["value"], (version, row)
            elif row["fact"] == "spec_registry":
                assert facts["speculative_algorithms"].get("registry", False) == row["value"], (version, row)
            elif row["fact"] == "dflash_v1_worker":
                with wheel_zip(version) as z:
                    has = "sglang/srt/speculative/dflash_worker.py" in z.namelist()
                assert has == row["value"], (version, row)


def test_every_fact_names_its_source():
    for version, facts in DATA["versions"].items():
        for name, fact in facts.items():
            assert isinstance(fact, dict) and fact.get("source"), f"{version}: {name} has no source"


def test_the_router_decision_is_what_the_router_role_pins():
    """versions.yml's router: sglang-router 0.3.2 kept for every sglang version (its reason there), the pin and the
    command roles/dflash_router and module_utils/dflash_router.py use."""
    router = DATA["router"]
    assert router["pinned"]["package"] == "sglang-router" and "keep sglang-router 0.3.2" in router["successor"]["decision"]
    role = yaml.safe_load((REPO_ROOT / "roles" / "dflash_router" / "defaults" / "main.yml").read_text())
    pins = [r for layer in role["dflash_router_venv_layers"] for r in layer["requirements"]]
    assert pins == [f"{router['pinned']['package']}=={router['pinned']['version']}"]
    code = (REPO_ROOT / "module_utils" / "dflash_router.py").read_text()
    assert router["pinned"]["command"].split("-m ", 1)[1] in code
    assert "--mini-lb" not in code  # the flag smg drops: the toolkit never passes it
