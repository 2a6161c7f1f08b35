"""The production default's index path, resolved against the lab's local PEP 503 indexes
(lab/pyindex.py: PyPI-like + PyTorch-like cu128/cu130 trees of small stand-in wheels, served over
HTTP): local version labels, ``extra_index_urls`` searched first, uv's index strategies, and the
computed overlay over a fresh cu128 base, with the real uv."""

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from ansible.module_utils.dflash_layers import build as L
from ansible.module_utils.dflash_layers import overlay as O
from ansible.module_utils.dflash_layers import probe as P
from ansible.module_utils.dflash_layers import wheelhouse as WH
from test_layers import _role_default_layers, run_py

UV = shutil.which("uv")
ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(UV is None, reason="uv is not on PATH (the controller env is made with uv)")


def _pyindex():
    spec = importlib.util.spec_from_file_location("pyindex", ROOT / "lab" / "pyindex.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def index_url(tmp_path_factory):
    pyindex = _pyindex()
    root = tmp_path_factory.mktemp("lab-index")
    made = pyindex.build(str(root))
    assert "torch-2.11.0+cu128-py3-none-any.whl" in made["cu128"] and "torch-2.11.0-py3-none-any.whl" in made["pypi"]
    state = str(tmp_path_factory.mktemp("lab-index-state"))
    port = pyindex.serve(str(root), state, bind="127.0.0.1")
    yield f"http://127.0.0.1:{port}"
    pyindex.stop(state)


def production_default(url, **inventory):
    """The role's default layers for an inventory, the PyTorch/PyPI URLs swapped for the lab's."""
    layers = _role_default_layers(**inventory)
    out = []
    for layer in layers:
        layer = dict(layer)
        extra = layer.get("extra_index_urls") or []
        assert all(u.startswith("https://download.pytorch.org/whl/") for u in extra)
        if extra:
            layer["extra_index_urls"] = [u.replace("https://download.pytorch.org", url) for u in extra]
        layer["index_url"] = f"{url}/pypi/simple"
        if layer.get("python"):
            layer["python"] = sys.executable  # the production python3.12 is this machine's interpreter here
        out.append(layer)
    return out


def resolved(spec, parent=(), work=None):
    res = O.resolve(L.normalise_layer(spec), list(parent), [UV], L.default_runner, str(work), python=sys.executable,
                    fmt="txt")
    return {e["name"]: e["version"] for e in res["closure"]}, res


def test_index_strategy_and_local_labels(index_url, tmp_path):
    base = production_default(index_url, dflash_layers_fresh_base=True)[0]
    # first-index (uv's default): torch's +cu128 build from the extra (PyTorch-like) index, searched
    # before index_url; filelock and typing-extensions too, since that index mirrors old versions
    got, _ = resolved(base, work=tmp_path / "first")
    assert got == {"torch": "2.11.0+cu128", "nvidia-cuda-runtime-cu12": "12.8.90", "filelock": "3.13.1",
                   "typing-extensions": "4.12.2"}
    # unsafe-best-match: the best version over every index
    got, _ = resolved({**base, "index_strategy": "unsafe-best-match"}, work=tmp_path / "best")
    assert got["torch"] == "2.11.0+cu128" and got["filelock"] == "3.20.0" and got["typing-extensions"] == "4.15.0"
    # unsafe-first-match: the first index with a compatible version, per package
    got, _ = resolved({**base, "index_strategy": "unsafe-first-match",
                       "requirements": ["torch==2.11.0+cu128", "filelock==3.20.0"]}, work=tmp_path / "firstmatch")
    assert got["filelock"] == "3.20.0" and got["typing-extensions"] == "4.12.2"
    # a pin is the exact version string: torch==2.11.0 with both indexes is the unlabelled build
    got, _ = resolved({**base, "requirements": ["torch==2.11.0"], "index_strategy": "unsafe-best-match"},
                      work=tmp_path / "exact")
    assert got["torch"] == "2.11.0" and got["nvidia-cuda-runtime"] == "13.0.96"
    # ...while a range admits the local builds, which sort above the plain version
    got, _ = resolved({**base, "requirements": ["torchaudio==2.11.0"], "index_strategy": "unsafe-best-match"},
                      work=tmp_path / "range")
    assert got["torch"] == "2.11.0+cu128"


def test_production_default_fresh_base_and_computed_overlay(index_url, tmp_path):
    layers = production_default(index_url, dflash_layers_fresh_base=True)
    items, _changed, _ = L.LayerBuilder(str(tmp_path / "prefix"), UV).ensure(layers)
    base, overlay = L.layers_fact(items)
    bmark = json.loads((Path(base["path"]) / L.MARKER).read_text())
    omark = json.loads((Path(overlay["path"]) / L.MARKER).read_text())
    assert bmark["installed"] == ["filelock==3.13.1", "nvidia-cuda-runtime-cu12==12.8.90", "torch==2.11.0+cu128",
                                  "typing-extensions==4.12.2"]
    # the overlay: the cu130 torch (the base's +cu128 is another version), sglang's stack, filelock
    # upgraded (sglang needs >=3.16); typing-extensions is the base's
    assert "torch==2.11.0" in omark["installed"] and "nvidia-cuda-runtime==13.0.96" in omark["installed"]
    assert "filelock==3.20.0" in omark["installed"] and "sglang==0.5.11" in omark["installed"]
    assert omark["from_parent"] == ["typing-extensions==4.12.2"]
    assert run_py(overlay["python"], "import torch, typing_extensions as t; print(torch.__version__, t.__file__)"
                  ).split()[0] == "2.11.0"
    assert "STAND-IN" in run_py(overlay["python"], "import sglang; print(sglang.LAB_STANDIN)")
    res = P.probe_consistency(overlay["python"], closure=overlay["closure"])
    assert res["ok"] and res["problems"] == [] and res["distributions"] == 18
    # the shadowed base packages are reported, not hidden
    assert {s["name"] for s in res["shadowed"]} == {"torch", "filelock"}


def test_seeds_layering_over_an_existing_venv_and_the_controller_lock(index_url, tmp_path):
    """The seeds' CT200: a training venv with torch 2.11.0+cu128 and transformers is the base; the
    controller resolves the overlay for it from the host's description (wheelhouse mode)."""
    train = tmp_path / "train-venv"
    L.default_runner([UV, "venv", "--no-config", "--python", sys.executable, str(train)])
    rc, _out, err = L.default_runner([UV, "pip", "install", "--no-config", "--python", str(train / "bin/python"),
                                     "--index-url", f"{index_url}/pypi/simple", "--extra-index-url",
                                     f"{index_url}/whl/cu128", "torch==2.11.0+cu128", "transformers==5.6.0"])
    assert rc == 0, err
    layers = production_default(index_url, dflash_base_venv=str(train))
    specs = L.normalise_layers(layers)
    interp = L.inspect_interpreter(sys.executable)
    dists = O.describe(O.view_paths(str(train / "bin/python"), L.inspect_interpreter(str(train / "bin/python"))["site"],
                                    L.default_runner))
    target = {"python_version": f"{sys.version_info[0]}.{sys.version_info[1]}", "arch": interp["machine"],
              "glibc": "2.28", "implementation": "cp"}
    res = WH.ensure_wheelhouse(str(tmp_path / "wh"), specs, {"overlay": target}, {"base": dists}, [UV])
    lock = {e["name"]: e for e in res["locks"]["overlay"]}
    assert lock["torch"]["version"] == "2.11.0" and lock["torch"]["source"] == "layer"
    assert lock["torch"]["url"] == f"{index_url}/pypi/simple/files/torch-2.11.0-py3-none-any.whl"
    assert {k for k, e in lock.items() if e["source"] == "parent"} == {"numpy", "tokenizers", "transformers",
                                                                       "typing-extensions"}
    assert "filelock" in {k for k, e in lock.items() if e["source"] == "layer"}
    # the host then installs exactly those wheels, offline
    wheelhouse = tmp_path / "wh" / "files"
    items, _, _ = L.LayerBuilder(str(tmp_path / "prefix"), UV).ensure(layers, res["locks"], str(wheelhouse))
    overlay = L.layers_fact(items)[1]
    omark = json.loads((Path(overlay["path"]) / L.MARKER).read_text())
    assert omark["from_parent"] == ["numpy==2.1.2", "tokenizers==0.22.2", "transformers==5.6.0",
                                    "typing-extensions==4.12.2"]
    assert P.probe_consistency(overlay["python"], closure=overlay["closure"])["ok"]
