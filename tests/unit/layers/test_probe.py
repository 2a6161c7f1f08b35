"""dflash_probe: per-import isolation, crash/timeout reporting, the gate, and the committed probe
outputs (tests/fixtures/probe/: the lab's, and the GPU machine's once recorded)."""

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from ansible.module_utils.dflash_layers import probe as P

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures" / "probe"


def test_each_component_snippet_compiles():
    for name in P.COMPONENTS:
        compile(P.component_code(name), f"<probe {name}>", "exec")


def test_parse_component_output_cases():
    ok = P.parse_component_output(0, 'noise\nDFLASH_PROBE_RESULT {"ok": true, "version": "1"}\n', "")
    assert ok == {"ok": True, "version": "1"}
    seg = P.parse_component_output(-11, "", "Fatal Python error: Segmentation fault\n")
    assert seg["error"] == "Crash: killed by SIGSEGV" and seg["traceback"][-1].startswith("Fatal Python error")
    died = P.parse_component_output(3, "", "boom")
    assert died["error"] == "Crash: exited 3 without a result"
    slow = P.parse_component_output(None, "", "", timed_out=True, timeout=7)
    assert slow["error"] == "Timeout: no result within 7s"


@pytest.fixture
def fake_site(tmp_path):
    """Importable test packages standing in for the probed ones, each with one real behaviour:
    a segfault (sgl_kernel), a hang (flashinfer), an ImportError raised inside (xgrammar's missing
    StructuralTag is separate: here soundfile imports but lacks its library version)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sgl_kernel.py").write_text("import ctypes\nctypes.string_at(0)\n")  # real SIGSEGV
    (site / "flashinfer.py").write_text("import time\ntime.sleep(60)\n")
    (site / "xgrammar.py").write_text("__version__ = '0.1.10'\n")  # no StructuralTag, as on CT200
    (site / "soundfile.py").write_text("raise OSError('sndfile library not found')\n")
    return site


def test_one_crash_does_not_hide_the_others(fake_site):
    out = P.run_probe(sys.executable, str(fake_site),
                      components=["python", "sgl_kernel", "flashinfer", "xgrammar", "soundfile", "sglang"],
                      timeout=6, workers=6)
    assert out["sgl_kernel"]["ok"] is False and out["sgl_kernel"]["error"] == "Crash: killed by SIGSEGV"
    assert out["flashinfer"]["error"] == "Timeout: no result within 6s"
    assert out["xgrammar"] == {**out["xgrammar"], "ok": True, "version": "0.1.10", "structural_tag": False}
    assert out["soundfile"]["error"] == "OSError: sndfile library not found"
    assert out["sglang"]["error"] == "ModuleNotFoundError: No module named 'sglang'"
    assert out["python"]["ok"] and str(fake_site) in out["python"]["path"]
    assert out["_meta"]["pythonpath"] == str(fake_site)
    # nothing was written next to the probed modules
    assert sorted(os.listdir(fake_site)) == ["flashinfer.py", "sgl_kernel.py", "soundfile.py", "xgrammar.py"]
    problems = P.gate(out, "13.0", required=["xgrammar", "soundfile", "sgl_kernel"])
    assert any("sgl_kernel: Crash: killed by SIGSEGV" in p for p in problems)
    assert any("soundfile: OSError" in p for p in problems)
    assert any("xgrammar 0.1.10 has no StructuralTag" in p for p in problems)


def test_gate_torch_cuda_newer_than_driver_names_both():
    probe = {"torch": {"ok": True, "version": "2.11.0+cu130", "cuda": "13.0"}}
    problems = P.gate(probe, "12.8", host="ct200")
    assert len(problems) == 1
    assert "ct200: torch 2.11.0+cu130 is built for CUDA 13.0" in problems[0]
    assert "driver supports CUDA 12.8" in problems[0]
    assert P.gate(probe, "13.0") == []
    assert P.gate(probe, "13.1") == []
    assert P.gate({"torch": {"ok": True, "version": "2.11.0+cu128", "cuda": "12.8"}}, "12.10") == []
    assert P.gate({"torch": {"ok": True, "version": "2.13.0+cpu", "cuda": None}}, "12.8") == []
    assert P.gate(probe, None) == []  # no fingerprint: nothing to compare
    assert P.gate({}, "12.8", required=["torch"]) == ["torch: required but not probed"]


def test_run_probe_rejects_unknown_components():
    with pytest.raises(ValueError, match="unknown probe components: tensorflow"):
        P.run_probe(sys.executable, components=["tensorflow"])


def test_probe_snippets_read_real_module_shapes(tmp_path):
    """The sglang snippet reads SpeculativeAlgorithm members and sgl_kernel's common_ops the way
    the real packages expose them (module layout from sglang 0.5.11 / sglang-kernel 0.4.2)."""
    site = tmp_path / "site"
    spec = site / "sglang" / "srt" / "speculative"
    spec.mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("__version__ = '0.5.11'\n")
    (site / "sglang" / "srt" / "__init__.py").write_text("")
    (spec / "__init__.py").write_text("")
    (spec / "spec_info.py").write_text(textwrap.dedent("""
        from enum import IntEnum, auto
        class SpeculativeAlgorithm(IntEnum):
            NONE = auto()
            EAGLE = auto()
            DFLASH = auto()
            DDTREE = auto()
    """))
    (site / "sgl_kernel").mkdir()
    (site / "sgl_kernel" / "__init__.py").write_text("common_ops = None\n")
    out = P.run_probe(sys.executable, [str(site)], components=["sglang", "sgl_kernel"], timeout=30)
    assert out["sglang"]["speculative_algorithms"] == ["NONE", "EAGLE", "DFLASH", "DDTREE"]
    assert out["sglang"]["version"] == "0.5.11" and out["sglang"]["registered_algorithms"] == []
    assert out["sgl_kernel"]["error"] == "ImportError: sgl_kernel imported but common_ops did not load"


def test_probe_finds_ddtree_in_the_registry_from_0_5_17(tmp_path):
    """From 0.5.17 DDTREE is not a member of the enum: the patch series registers it (speculative/spec_registry.py,
    through an import at the end of spec_info.py); the probe lists it and the gate holds the instances' algorithms
    against what the imported sglang resolves."""
    site = tmp_path / "site"
    spec = site / "sglang" / "srt" / "speculative"
    spec.mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("__version__ = '0.5.17'\n")
    (site / "sglang" / "srt" / "__init__.py").write_text("")
    (spec / "__init__.py").write_text("")
    (spec / "spec_registry.py").write_text("_REGISTRY = {}\n")
    (spec / "spec_info.py").write_text(textwrap.dedent("""
        from enum import IntEnum, auto
        from sglang.srt.speculative import spec_registry
        class SpeculativeAlgorithm(IntEnum):
            NONE = auto()
            DFLASH = auto()
        spec_registry._REGISTRY["DDTREE"] = object()
    """))
    out = P.run_probe(sys.executable, [str(site)], components=["sglang"], timeout=30)
    assert out["sglang"]["speculative_algorithms"] == ["NONE", "DFLASH", "DDTREE"]
    assert out["sglang"]["registered_algorithms"] == ["DDTREE"]
    assert P.gate(out, algorithms=["DFLASH", "DDTREE"]) == []
    (spec / "spec_info.py").write_text("from enum import IntEnum, auto\nclass SpeculativeAlgorithm(IntEnum):\n"
                                       "    NONE = auto()\n    DFLASH = auto()\n")
    bare = P.run_probe(sys.executable, [str(site)], components=["sglang"], timeout=30)
    assert P.gate(bare, algorithms=["DDTREE"]) == [
        ("sglang 0.5.17 does not resolve the speculative algorithm DDTREE (its algorithms: NONE, DFLASH): the patch "
        "series was not applied to the tree on PYTHONPATH")]


def _fixtures():
    return sorted(FIXTURES.glob("*.json"))


def test_lab_fixture_exists():
    assert (FIXTURES / "lab.json").exists()


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_committed_probe_outputs(path):
    """Every committed probe output has one entry per component, each facts or an error, and the
    gate's verdict recorded next to it still holds."""
    data = json.loads(path.read_text())
    probe, expect = data["probe"], data["expect"]
    for name in expect["components"]:
        res = probe[name]
        assert isinstance(res["ok"], bool)
        assert ("error" in res) != res["ok"]
    problems = P.gate(probe, expect.get("driver_cuda_version"), expect.get("required", []))
    assert problems == expect["problems"]
    for name, version in expect.get("versions", {}).items():
        assert probe[name]["ok"] and probe[name]["version"] == version
    if "speculative_algorithms" in expect:
        assert set(expect["speculative_algorithms"]) <= set(probe["sglang"]["speculative_algorithms"])
    if "torch_cuda" in expect:
        assert probe["torch"]["cuda"] == expect["torch_cuda"]


def test_h200_fixture_shows_the_cu130_overlay_working():
    """The GPU machine's probe (gpu-harness/probe_overlay.sh): an overlay built with uv on its
    torch 2.11.0+cu130 venv imports every component the seeds' service crashed on."""
    path = FIXTURES / "h200.json"
    if not path.exists():
        pytest.skip("tests/fixtures/probe/h200.json not recorded yet (gpu-harness/probe_overlay.sh)")
    probe = json.loads(path.read_text())["probe"]
    assert probe["torch"]["ok"] and probe["torch"]["cuda"] == "13.0"
    assert probe["torch"]["device_count"] >= 1 and probe["torch"]["devices"][0]["capability"] == "9.0"
    assert probe["sgl_kernel"]["ok"] and probe["sgl_kernel"]["common_ops"]
    assert probe["xgrammar"]["ok"] and probe["xgrammar"]["structural_tag"]
    assert probe["soundfile"]["ok"] and probe["flashinfer"]["ok"]
    assert probe["sglang"]["ok"] and "DFLASH" in probe["sglang"]["speculative_algorithms"]
    assert P.gate(probe, "13.0", ["torch", "sgl_kernel", "flashinfer", "xgrammar", "soundfile", "sglang"]) == []
    assert P.gate(probe, "12.8")[0].startswith("torch 2.11.0+cu130 is built for CUDA 13.0")


def test_lab_fixture_shows_the_overlay_shadowing_the_base():
    """The lab probe ran with the overlay's python: its site-packages come first, the base's
    after; xgrammar 0.1.32 (with StructuralTag) is the overlay's although the base has 0.1.10, and
    torch, only in the base, is still found."""
    probe = json.loads((FIXTURES / "lab.json").read_text())["probe"]
    sites = [p for p in probe["python"]["path"] if p.endswith("site-packages")]
    assert len(sites) == 2 and "/layers/overlay-" in sites[0] and "/layers/base-" in sites[1]
    assert probe["xgrammar"]["file"].startswith(sites[0]) and probe["xgrammar"]["structural_tag"]
    assert probe["torch"]["file"].startswith(sites[1]) and probe["torch"]["cuda"] is None
    assert probe["soundfile"]["file"].startswith(sites[0])
    assert probe["sglang"]["error"] == "ModuleNotFoundError: No module named 'sglang'"
