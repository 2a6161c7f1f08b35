"""dflash_layers: spec validation, content hash, wheel selection, pruning, and real uv builds.

The build tests run the real uv against wheels made here (tiny pure-Python projects written as
real wheel files), so they need no network and take a few seconds.
"""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from ansible.module_utils.dflash_layers import build as L
from ansible.module_utils.dflash_layers import wheelhouse as WH
from ansible.module_utils.dflash_layers import wheels as W

UV = shutil.which("uv")
needs_uv = pytest.mark.skipif(UV is None, reason="uv is not on PATH (the controller env is made with uv)")
FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures" / "layers"


# --------------------------------------------------------------------------- helpers

def make_wheel(directory, name, version, body=None, requires=()):
    """Write a real, installable pure-Python wheel ``name-version-py3-none-any.whl``."""
    mod = name.replace("-", "_")
    body = body if body is not None else f"__version__ = {version!r}\n"
    return Path(directory) / W.write_wheel(str(directory), name, version, {f"{mod}.py": body}, requires)


def snapshot(root):
    """(path, size, mtime_ns, ctime_ns) of everything under root."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out.append((p, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return sorted(out)


def run_py(python, code):
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}).stdout.strip()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    d = tmp_path_factory.mktemp("wheels")
    make_wheel(d, "dfl-shadow", "1.0")
    make_wheel(d, "dfl-shadow", "2.0")
    make_wheel(d, "dfl-shadow", "3.0")
    make_wheel(d, "dfl-baseonly", "1.0")
    make_wheel(d, "dfl-needs", "1.0", requires=["dfl-baseonly==1.0"])
    return d


def two_layers(wheels, overlay_pin="dfl-shadow==2.0"):
    common = {"python": sys.executable, "no_index": True, "find_links": [str(wheels)]}
    return [
        {"name": "base", **common, "requirements": ["dfl-shadow==1.0", "dfl-baseonly==1.0"]},
        {"name": "overlay", "parent": "base", **common, "no_deps": True,
         "requirements": [overlay_pin, "dfl-needs==1.0"]},
    ]


# --------------------------------------------------------------------------- specs

def test_parse_requirement_normalises_names_and_extras():
    assert L.parse_requirement("Flashinfer_Python==0.6.8.post1") == ("flashinfer-python", (), "0.6.8.post1")
    assert L.parse_requirement("torch==2.11.0+cu128") == ("torch", (), "2.11.0+cu128")
    assert L.parse_requirement("huggingface_hub[CLI, hf_xet]==1.0") == ("huggingface-hub", ("cli", "hf-xet"), "1.0")
    for bad in ("torch", "torch>=2.11", "torch==2.11; python_version>'3'", "git+https://x/y", "==1.0", None):
        with pytest.raises(ValueError, match="pinned|not pinned"):
            L.parse_requirement(bad)


def test_validate_reports_every_problem_with_layer_and_field():
    errors = L.validate_layers([
        {"name": "base", "python": "python3.12", "requirements": ["torch>=2", "six==1", "Six==2"]},
        {"name": "base", "python": "python3.12"},
        {"name": "ov", "parent": "later", "requirements": "six==1", "cuda": 13, "colour": "x"},
        {"name": "nopy", "requirements": ["six==1"],
         "exclude": [{"name": "six", "reason": "x"}, {"name": "bad name"}, "cffi", {"name": "ok", "reason": "r", "x": 1}]},
        {"name": "later", "existing_path": "relative/venv", "requirements": ["six==1"], "parent": "base"},
        {"name": "Bad Name"},
        {"name": "idx", "python": "p", "index_strategy": "fastest", "extra_index_urls": "https://x",
         "no_deps": "yes", "env": {"A": True}},
    ])
    text = "\n".join(errors)
    expected = [
        "dflash_venv_layers[0] (base): requirements[0]: 'torch>=2' is not pinned",
        "dflash_venv_layers[0] (base): requirements[2]: six pinned twice",
        "dflash_venv_layers[1] (base): name: duplicate of dflash_venv_layers[0]",
        "dflash_venv_layers[2] (ov): parent: 'later' must name a layer listed before this one",
        "dflash_venv_layers[2] (ov): requirements: must be a list",
        "dflash_venv_layers[2] (ov): cuda: 13 must be a 'major.minor' string",
        "dflash_venv_layers[2] (ov): colour: unknown field",
        "dflash_venv_layers[4] (later): existing_path: 'relative/venv' must be an absolute path",
        "dflash_venv_layers[4] (later): requirements: a layer with existing_path is used as it is",
        "dflash_venv_layers[4] (later): parent: a layer with existing_path cannot have a parent",
        "dflash_venv_layers[5]: name: 'Bad Name' must match",
        "dflash_venv_layers[6] (idx): index_strategy: 'fastest' not one of",
        "dflash_venv_layers[6] (idx): extra_index_urls: must be a list",
        "dflash_venv_layers[6] (idx): no_deps: must be true or false",
        "dflash_venv_layers[6] (idx): env: must be a mapping",
        "dflash_venv_layers[3] (nopy): python: required",
        "dflash_venv_layers[3] (nopy): exclude[0]: six is one of this layer's own requirements",
        "dflash_venv_layers[3] (nopy): exclude[1]: name: 'bad name' must be a project name",
        "dflash_venv_layers[3] (nopy): exclude[1]: reason: required",
        "dflash_venv_layers[3] (nopy): exclude[2]: name: None must be a project name",
        "dflash_venv_layers[3] (nopy): exclude[3]: x: unknown field",
    ]
    for item in expected:
        assert item in text, f"missing: {item}\n{text}"
    assert L.validate_layers([]) == ["dflash_venv_layers: must be a non-empty list of layers"]


def _role_default_layers(**inventory):
    """dflash_venv_layers as the role's defaults render it for an inventory (Ansible's own templar)."""
    import warnings

    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar, trust_as_template

    with warnings.catch_warnings():  # configured once per session; a second call only warns
        warnings.simplefilter("ignore", UserWarning)
        init_plugin_loader()  # the overlay's lookup('ansible.builtin.file', ...) of the version's folder

    root = Path(__file__).resolve().parents[3]
    # the shared inputs (roles/dflash, the role's meta dependency) under the role's own defaults
    defaults = yaml.safe_load((root / "roles/dflash/defaults/main.yml").read_text())
    defaults.update(yaml.safe_load((root / "roles/dflash_layers/defaults/main.yml").read_text()))

    def trust(v):
        if isinstance(v, str):
            return trust_as_template(v)
        if isinstance(v, dict):
            return {k: trust(x) for k, x in v.items()}
        if isinstance(v, list):
            return [trust(x) for x in v]
        return v

    variables = {k: trust(v) for k, v in {**defaults, **inventory}.items()}
    variables["role_path"] = str(root / "roles" / "dflash_layers")  # the overlay comes from the version's folder
    return Templar(loader=DataLoader(), variables=variables).template(variables["dflash_venv_layers"])


def test_role_default_follows_the_seeds_and_lab_layers_are_valid():
    import yaml

    root = Path(__file__).resolve().parents[3]
    # the host's own venv named: it is the base, used as it is; the overlay inherits its interpreter
    existing = _role_default_layers(dflash_base_venv="/root/venv")
    assert existing[0] == {"name": "base", "existing_path": "/root/venv"}
    assert existing[1]["parent"] == "base" and "python" not in existing[1]
    # a fresh base only when asked: the seeds' cu128 stack from the PyTorch index
    fresh = _role_default_layers(dflash_layers_fresh_base=True)
    assert fresh[0]["python"] == "python3.12" and fresh[0]["requirements"] == ["torch==2.11.0+cu128"]
    assert fresh[0]["extra_index_urls"] == ["https://download.pytorch.org/whl/cu128"] and fresh[1]["parent"] == "base"
    # neither: the overlay alone with its whole closure
    alone = _role_default_layers()
    assert len(alone) == 1 and alone[0]["python"] == "python3.12" and "parent" not in alone[0]
    for layers in (existing, fresh, alone):
        assert L.validate_layers(layers) == []
    overlay = L.normalise_layer(alone[0])
    assert overlay["cuda"] == "13.0"
    for pin in ("torch==2.11.0", "sglang-kernel==0.4.2", "flashinfer-python==0.6.8.post1",
                "flashinfer-cubin==0.6.8.post1", "xgrammar==0.1.32", "soundfile==0.13.1", "sglang==0.5.11"):
        assert pin in overlay["requirements"]
    lab = yaml.safe_load((root / "inventory/lab/group_vars/all/layers.yml").read_text())
    assert L.validate_layers(lab["dflash_venv_layers"]) == []
    # the lab's other sglang versions: the same base, an overlay of their own (a venv per version)
    for version, stack in lab["dflash_venv_layers_by_version"].items():
        assert L.validate_layers(stack) == [], version
        assert stack[0] == lab["dflash_venv_layers"][0] and stack[-1] != lab["dflash_venv_layers"][-1]
    # the host's version chooses the overlay (files/patches/sglang/<version>/overlay.yml)
    newer = _role_default_layers(dflash_sglang_version="0.5.17")
    assert "sglang==0.5.17" in newer[0]["requirements"] and "sglang-kernel==0.4.5" in newer[0]["requirements"]
    assert not [r for r in newer[0]["requirements"] if r.startswith("flashinfer-cubin")]
    # the GPU machine: its torch venv is the base through the production default, the overlay computed
    gpu = yaml.safe_load((root / "inventory/gpu/group_vars/all/layers.yml").read_text())
    layers = _role_default_layers(**{k: v for k, v in gpu.items() if k.startswith("dflash_")})
    assert L.validate_layers(layers) == []
    assert layers[0] == {"name": "base", "existing_path": "/opt/torch/.venv"} and layers[1]["parent"] == "base"
    assert not [r for r in layers[1]["requirements"] if r.startswith("torch==")]
    assert all(e["reason"] for e in layers[1]["exclude"])


def test_hash_is_stable_order_insensitive_and_covers_what_matters():
    interp = {"implementation": "cpython", "version": "3.12.3"}
    a = L.normalise_layer({"name": "ov", "python": "python3.12", "requirements": ["b==1", "A_x==2"]})
    b = L.normalise_layer({"name": "ov", "python": "python3.12", "requirements": ["a-x==2", "B==1"]})
    h = L.layer_hash(a, "p" * 64, interp)
    assert h == L.layer_hash(b, "p" * 64, interp)
    assert len(h) == 64 and L.layer_dirname("ov", h) == f"ov-{h[:12]}"
    # a patch release of the host python does not rebuild; a minor one does
    assert h == L.layer_hash(a, "p" * 64, {"implementation": "cpython", "version": "3.12.9"})
    assert h != L.layer_hash(a, "p" * 64, {"implementation": "cpython", "version": "3.13.0"})
    assert h != L.layer_hash(a, "q" * 64, interp)  # parent changed
    assert h != L.layer_hash(a, "p" * 64, interp, wheel_sha256s=["0" * 64])
    assert h != L.layer_hash(a, "p" * 64, interp, closure=["six==1.16.0@parent"])
    e = L.normalise_layer({"name": "ov", "python": "python3.12", "requirements": ["b==1", "a-x==2"],
                           "exclude": [{"name": "Flashinfer_Cubin", "reason": "JIT instead"}]})
    assert e["exclude"] == [{"name": "flashinfer-cubin", "reason": "JIT instead"}]
    assert h != L.layer_hash(e, "p" * 64, interp)
    c = L.normalise_layer({"name": "ov", "python": "python3.12", "requirements": ["b==1", "a-x==3"]})
    assert h != L.layer_hash(c, "p" * 64, interp)
    d = L.normalise_layer({"name": "ov", "python": "python3.12", "requirements": ["b==1", "a-x==2"],
                           "env": {"X": "1"}})
    assert h != L.layer_hash(d, "p" * 64, interp)


def test_parent_pth_appends_parent_with_its_own_pth_files(tmp_path):
    parent = tmp_path / "parent-site"
    grand = tmp_path / "grand-site"
    for d in (parent, grand):
        d.mkdir()
    (parent / "_link.pth").write_text(L.parent_pth([str(grand)]))
    child = tmp_path / "child-site"
    child.mkdir()
    (child / "x.pth").write_text(L.parent_pth([str(parent)]))
    code = f"import site, sys; site.addsitedir({str(child)!r}); print('\\n'.join(sys.path))"
    path = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          check=True).stdout.split("\n")
    assert path.index(str(child)) < path.index(str(parent)) < path.index(str(grand))


def test_install_args_never_resolve():
    spec = L.normalise_layer({"name": "b", "python": "p", "requirements": ["torch==2.11.0+cu128"],
                              "index_url": "https://pypi.org/simple",
                              "extra_index_urls": ["https://download.pytorch.org/whl/cu128"],
                              "index_strategy": "unsafe-best-match", "no_deps": True})
    idx = ["--index-url", "https://pypi.org/simple", "--extra-index-url", "https://download.pytorch.org/whl/cu128",
           "--index-strategy", "unsafe-best-match"]
    assert L.install_args(spec) == [*idx, "--no-deps", "torch==2.11.0+cu128"]
    assert L.install_args(spec, ["/w/a.whl"]) == ["--offline", "--no-index", "--no-deps", "/w/a.whl"]
    # computed entries: exact version strings (=== keeps 2.11.0 from matching 2.11.0+cu128)
    assert L.install_args(spec, entries=[{"name": "torch", "version": "2.11.0"}]) == [
        *idx, "--no-deps", "torch===2.11.0"]


def test_normalise_layers_inherits_the_parents_python():
    specs = L.normalise_layers([{"name": "train", "existing_path": "/srv/venv/"},
                                {"name": "ov", "parent": "train"},
                                {"name": "top", "parent": "ov"},
                                {"name": "own", "parent": "ov", "python": "python3.12"}])
    assert [s["python"] for s in specs] == [None, "/srv/venv/bin/python", "/srv/venv/bin/python", "python3.12"]


# --------------------------------------------------------------------------- wheel selection / locks

def test_platform_tags_follow_the_hosts_glibc():
    plats = W.manylinux_platforms("x86_64", "2.36")
    assert plats[0] == "manylinux_2_36_x86_64" and "manylinux2014_x86_64" in plats
    assert "manylinux1_x86_64" in plats and plats[-1] == "linux_x86_64"
    assert "manylinux2014_aarch64" in W.manylinux_platforms("aarch64", "2.35")
    assert "manylinux1_aarch64" not in W.manylinux_platforms("aarch64", "2.35")
    tags = W.supported_tags("3.12", "x86_64", "2.35")
    pick = W.select_wheel([
        {"url": "https://f/x/sglang-0.5.11-cp312-cp312-manylinux_2_34_x86_64.whl"},
        {"url": "https://f/x/sglang-0.5.11-cp311-cp311-manylinux_2_34_x86_64.whl"},
    ], tags)
    assert pick[0] == "sglang-0.5.11-cp312-cp312-manylinux_2_34_x86_64.whl"
    # a wheel needing a newer glibc than the host has is never chosen
    assert W.select_wheel([{"url": "https://f/a-1-cp312-cp312-manylinux_2_39_x86_64.whl"}], tags) is None
    # abi3 wheels built for an older CPython fit (sglang-kernel is cp310-abi3)
    assert W.select_wheel([{"url": "https://f/sglang_kernel-0.4.2-cp310-abi3-manylinux2014_x86_64.whl"}], tags)
    # a platform wheel beats the pure one; local versions arrive URL-quoted from the PyTorch index
    pick = W.select_wheel([
        {"url": "https://f/soundfile-0.13.1-py2.py3-none-any.whl"},
        {"url": "https://f/soundfile-0.13.1-py2.py3-none-manylinux_2_28_x86_64.whl"},
    ], tags)
    assert pick[0] == "soundfile-0.13.1-py2.py3-none-manylinux_2_28_x86_64.whl"
    pick = W.select_wheel([{"url": "https://d/whl/cu128/torch-2.11.0%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl"}],
                          tags)
    assert pick[0] == "torch-2.11.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl"


def test_wheel_entries_from_a_real_uv_pylock():
    import tomllib

    pylock = tomllib.loads((FIXTURES / "pylock.soundfile-cp312.toml").read_text())
    tags = W.supported_tags("3.12", "x86_64", "2.36")
    by_name = {e["name"]: e for e in (W.wheel_entry(p, tags) for p in pylock["packages"])}
    assert sorted(by_name) == ["cffi", "numpy", "pycparser", "six", "soundfile"]
    assert by_name["soundfile"]["filename"] == "soundfile-0.13.1-py2.py3-none-manylinux_2_28_x86_64.whl"
    assert by_name["soundfile"]["sha256"] == "03267c4e493315294834a0870f31dbb3b28a95561b80b134f0bd3cf2d5f0e618"
    assert by_name["cffi"]["filename"].startswith("cffi-2.1.1-cp312-cp312-")
    cffi = next(p for p in pylock["packages"] if p["name"] == "cffi")
    with pytest.raises(L.LayerError, match="cffi==2.1.1: no wheel for the host"):
        W.wheel_entry(cffi, W.supported_tags("3.12", "aarch64", "2.36"))


def test_target_from_interpreter():
    t = W.target_from_interpreter({"version": "3.12.3", "implementation": "cpython", "machine": "x86_64",
                                   "libc": ["glibc", "2.39"]})
    assert t == {"python_version": "3.12", "arch": "x86_64", "glibc": "2.39", "implementation": "cp"}
    assert W.target_from_interpreter({"version": "3.11.2", "implementation": "cpython", "machine": "x86_64",
                                      "libc": ["", ""]})["glibc"] == "2.17"


def test_wheelhouse_locks_once_verifies_sha256_and_refetches_corrupt_files(tmp_path, wheels):
    src = wheels / "dfl_shadow-1.0-py3-none-any.whl"
    sha = W.sha256_file(src)
    calls = {"compile": 0, "fetch": 0}

    def runner(argv, env=None, timeout=None):
        calls["compile"] += 1
        out = argv[argv.index("-o") + 1]
        assert "--python-platform" in argv and argv[argv.index("--python-platform") + 1] == "x86_64-manylinux_2_36"
        assert argv[argv.index("--python-version") + 1] == "3.12"
        Path(out).write_text(
            'lock-version = "1.0"\n[[packages]]\nname = "dfl-shadow"\nversion = "1.0"\n'
            f'wheels = [{{ url = "file://{src}", hashes = {{ sha256 = "{sha}" }} }}]\n')
        return 0, "", ""

    def fetch(url, dest):
        calls["fetch"] += 1
        shutil.copyfile(url[len("file://"):], dest)

    spec = L.normalise_layer({"name": "base", "python": "python3.12", "requirements": ["dfl-shadow==1.0"]})
    target = {"python_version": "3.12", "arch": "x86_64", "glibc": "2.36", "implementation": "cp"}
    res = WH.ensure_wheelhouse(str(tmp_path), [spec], {"base": target}, {}, ["uv"], runner=runner, fetch=fetch)
    assert res["changed"] and res["downloaded"] == [src.name] and calls == {"compile": 1, "fetch": 1}
    lock = json.loads(Path(res["lock_files"]["base"]).read_text())
    assert lock["packages"][0]["sha256"] == sha and lock["packages"][0]["url"] == f"file://{src}"
    # reuse: no resolution, no download, nothing changed
    res = WH.ensure_wheelhouse(str(tmp_path), [spec], {"base": target}, {}, ["uv"], runner=runner, fetch=fetch)
    assert not res["changed"] and calls == {"compile": 1, "fetch": 1}
    # a corrupt wheel is detected by its sha256 and fetched again
    (tmp_path / "files" / src.name).write_bytes(b"corrupt")
    res = WH.ensure_wheelhouse(str(tmp_path), [spec], {"base": target}, {}, ["uv"], runner=runner, fetch=fetch)
    assert res["redownloaded"] == [src.name] and calls["fetch"] == 2
    assert W.sha256_file(tmp_path / "files" / src.name) == sha

    # a download that does not match the lock is refused and leaves nothing behind
    def bad_fetch(url, dest):
        Path(dest).write_bytes(b"tampered")

    os.unlink(tmp_path / "files" / src.name)
    with pytest.raises(L.LayerError, match="does not match the lock"):
        WH.ensure_wheelhouse(str(tmp_path), [spec], {"base": target}, {}, ["uv"], runner=runner, fetch=bad_fetch)
    assert sorted(os.listdir(tmp_path / "files")) == []


def test_extract_uv_binary(tmp_path):
    whl = tmp_path / "uv-9.9.9-py3-none-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("uv-9.9.9.data/scripts/uv", b"\x7fELF-binary")
        zf.writestr("uv/__init__.py", "")
    dest = tmp_path / "out" / "uv"
    assert WH.extract_uv_binary(str(whl), str(dest)) is True
    assert dest.read_bytes() == b"\x7fELF-binary" and os.access(dest, os.X_OK)
    assert WH.extract_uv_binary(str(whl), str(dest)) is False


# --------------------------------------------------------------------------- pruning

def test_prune_candidates_keeps_last_n_releases_and_parents():
    layers = "/opt/dflash/layers"
    dirs = [f"{layers}/base-aaaaaaaaaaaa", f"{layers}/overlay-bbbbbbbbbbbb", f"{layers}/overlay-cccccccccccc",
            f"{layers}/overlay-dddddddddddd", f"{layers}/.tmp-overlay-eeeeeeeeeeee-1234"]
    manifests = [
        {"id": "r3", "sequence": 3, "layers": [{"path": f"{layers}/overlay-dddddddddddd"}]},
        {"id": "r1", "sequence": 1, "layers": [{"path": f"{layers}/overlay-bbbbbbbbbbbb"},
                                               {"path": f"{layers}/base-aaaaaaaaaaaa"}]},
        {"id": "r2", "sequence": 2, "venv": f"{layers}/overlay-cccccccccccc"},
    ]
    parents = {f"{layers}/overlay-dddddddddddd": [f"{layers}/base-aaaaaaaaaaaa"]}
    # keep 2 newest (r2, r3): b goes; base kept through d's marker parent; .tmp never a candidate
    assert L.prune_candidates(dirs, manifests, 2, parents=parents) == [f"{layers}/overlay-bbbbbbbbbbbb"]
    # without the parent link the base would go too
    assert L.prune_candidates(dirs, manifests, 1) == [
        f"{layers}/base-aaaaaaaaaaaa", f"{layers}/overlay-bbbbbbbbbbbb", f"{layers}/overlay-cccccccccccc"]
    # protect keeps this run's layers even when no release has them yet
    assert f"{layers}/overlay-bbbbbbbbbbbb" not in L.prune_candidates(
        dirs, manifests, 1, protect=[f"{layers}/overlay-bbbbbbbbbbbb/"])
    assert L.prune_candidates(dirs, manifests, 0) == []


# --------------------------------------------------------------------------- real builds with uv

@needs_uv
def test_build_reuse_rebuild_and_shadowing(tmp_path, wheels):
    prefix = tmp_path / "prefix"
    cache = str(tmp_path / "uvcache")
    b = L.LayerBuilder(str(prefix), UV, cache_dir=cache, compile_bytecode=True)
    items, changed, stale = b.ensure(two_layers(wheels))
    assert changed and stale == [] and [i["changed"] for i in items] == [True, True]
    base, overlay = L.layers_fact(items)
    assert overlay["path"] == f"{prefix}/layers/overlay-{overlay['hash'][:12]}"
    assert overlay["sys_path_order"] == overlay["site_packages"] + base["site_packages"]
    marker = json.loads((Path(overlay["path"]) / L.MARKER).read_text())
    assert marker["hash"] == overlay["hash"] and "dfl-shadow==2.0" in marker["freeze"]
    assert "dfl-baseonly==1.0" not in marker["freeze"]  # no_deps: the dependency comes from base
    # the overlay's version wins, the base's package is still found, the base alone keeps its own
    got = run_py(overlay["python"], "import dfl_shadow, dfl_baseonly, dfl_needs;"
                 "print(dfl_shadow.__version__, dfl_shadow.__file__, dfl_baseonly.__file__)").split()
    assert got[0] == "2.0" and got[1].startswith(overlay["path"]) and got[2].startswith(base["path"])
    assert run_py(base["python"], "import dfl_shadow; print(dfl_shadow.__version__)") == "1.0"
    assert not [n for n in os.listdir(prefix / "layers") if n.startswith(L.TMP_PREFIX)]

    # unchanged: nothing reported, nothing written (not even times)
    before = snapshot(prefix)
    items2, changed2, _ = L.LayerBuilder(str(prefix), UV, cache_dir=cache).ensure(two_layers(wheels))
    assert not changed2 and [i["action"] for i in items2] == ["reuse", "reuse"]
    assert snapshot(prefix) == before

    # check mode on a changed pin: reports the overlay, writes nothing
    items3, changed3, _ = L.LayerBuilder(str(prefix), UV, cache_dir=cache, check_mode=True).ensure(
        two_layers(wheels, "dfl-shadow==3.0"))
    assert changed3 and [i["changed"] for i in items3] == [False, True]
    assert snapshot(prefix) == before

    # changed overlay pin: new overlay, base reused, old overlay untouched
    items4, changed4, _ = L.LayerBuilder(str(prefix), UV, cache_dir=cache).ensure(
        two_layers(wheels, "dfl-shadow==3.0"))
    new_base, new_overlay = L.layers_fact(items4)
    assert changed4 and not new_base["changed"] and new_overlay["changed"]
    assert new_base["path"] == base["path"] and new_overlay["path"] != overlay["path"]
    assert run_py(new_overlay["python"], "import dfl_shadow; print(dfl_shadow.__version__)") == "3.0"
    assert run_py(overlay["python"], "import dfl_shadow; print(dfl_shadow.__version__)") == "2.0"

    # relocated venv: console scripts and sys.prefix follow the final path, not the .tmp one
    assert run_py(new_overlay["python"], "import sys; print(sys.prefix)") == new_overlay["path"]


def test_find_links_listing_names_what_a_local_directory_offers(tmp_path):
    w = tmp_path / "wh"
    w.mkdir()
    make_wheel(w, "dfl-dep", "1.0")
    (w / "dfl_src-1.0.tar.gz").write_bytes(b"x" * 7)
    (w / "README").write_text("not a distribution")
    (w / "sub").mkdir()
    make_wheel(w / "sub", "dfl-deep", "1.0")  # uv does not look into subdirectories
    wheel = w / "dfl_dep-1.0-py3-none-any.whl"
    listing = L.find_links_listing({"find_links": [str(w), f"file://{w}", "https://example.invalid/simple",
                                                   str(tmp_path / "gone")]})
    assert listing == [f"{w}/dfl_dep-1.0-py3-none-any.whl {wheel.stat().st_size}", f"{w}/dfl_src-1.0.tar.gz 7"] * 2 + [
        f"{tmp_path / 'gone'} missing"]
    # nothing local to list: the spec alone addresses the layer, and the hash is the one it always was
    assert L.find_links_listing({"find_links": ["https://example.invalid/simple"]}) is None
    assert L.find_links_listing({"find_links": []}) is None
    spec = L.normalise_layer({"name": "ov", "python": "python3.12", "requirements": ["a==1"]})
    interp = {"implementation": "cpython", "version": "3.12.3"}
    assert L.layer_hash(spec, None, interp) == L.layer_hash(spec, None, interp, find_links=None)
    assert L.layer_hash(spec, None, interp, find_links=[]) != L.layer_hash(spec, None, interp)
    assert (L.layer_hash(spec, None, interp, find_links=["/w/a.whl 1", "/w/b.whl 2"])
            == L.layer_hash(spec, None, interp, find_links=["/w/b.whl 2", "/w/a.whl 1"]))


@needs_uv
def test_a_changed_find_links_directory_is_a_new_layer_not_the_old_one_reused(tmp_path):
    """A layer resolved on the host takes its unpinned dependencies from what the directory offers:
    a wheelhouse with a newer one must give a new layer (the H200's overlay once resolved uvicorn
    0.55.0 where the same spec had given 0.54.0, under the same directory name)."""
    w = tmp_path / "wh"
    w.mkdir()
    make_wheel(w, "dfl-dep", "1.0")
    make_wheel(w, "dfl-top", "1.0", requires=["dfl-dep>=1.0"])
    prefix, cache = tmp_path / "prefix", str(tmp_path / "uvcache")
    layers = [{"name": "base", "python": sys.executable, "no_index": True, "find_links": [str(w)],
               "requirements": ["dfl-top==1.0"]}]
    items, changed, _ = L.LayerBuilder(str(prefix), UV, cache_dir=cache).ensure(layers)
    first = L.layers_fact(items)[0]
    assert changed and run_py(first["python"], "import dfl_dep; print(dfl_dep.__version__)") == "1.0"
    items, changed, _ = L.LayerBuilder(str(prefix), UV, cache_dir=cache).ensure(layers)
    assert not changed and items[0]["action"] == "reuse"  # the same directory: the same layer
    make_wheel(w, "dfl-dep", "1.1")
    plan = L.LayerBuilder(str(prefix), UV, cache_dir=cache, check_mode=True).plan(layers)
    assert plan[0]["action"] == "build" and plan[0]["path"] != first["path"]
    items, changed, _ = L.LayerBuilder(str(prefix), UV, cache_dir=cache).ensure(layers)
    second = L.layers_fact(items)[0]
    assert changed and second["path"] == plan[0]["path"]
    assert run_py(second["python"], "import dfl_dep; print(dfl_dep.__version__)") == "1.1"
    assert run_py(first["python"], "import dfl_dep; print(dfl_dep.__version__)") == "1.0"  # untouched


@needs_uv
def test_killed_build_is_never_trusted(tmp_path, wheels):
    prefix = tmp_path / "prefix"
    layers = two_layers(wheels)
    plan = L.LayerBuilder(str(prefix), UV).plan(layers)
    # a killed build left its tmp dir, and a directory at the final path without a marker
    tmp_left = prefix / "layers" / f".tmp-base-{plan[0]['hash'][:12]}-dead"
    tmp_left.mkdir(parents=True)
    half = Path(plan[1]["path"])
    (half / "bin").mkdir(parents=True)
    (half / "bin" / "python").write_text("not a python")
    items, changed, stale = L.LayerBuilder(str(prefix), UV).ensure(layers)
    assert changed and stale == [str(tmp_left)] and not tmp_left.exists()
    assert [i["action"] for i in items] == ["build", "build"]
    assert (half / L.MARKER).exists()
    assert run_py(str(half / "bin" / "python"), "import dfl_shadow; print(dfl_shadow.__version__)") == "2.0"


@needs_uv
def test_failed_install_leaves_nothing(tmp_path, wheels):
    prefix = tmp_path / "prefix"
    layers = two_layers(wheels, "dfl-shadow==9.9")  # no such wheel
    with pytest.raises(L.LayerError, match=r"(?s)layer overlay: resolving its requirements failed.*no version of dfl-shadow==9.9"):
        L.LayerBuilder(str(prefix), UV).ensure(layers)
    names = os.listdir(prefix / "layers")
    assert [n for n in names if n.startswith("overlay")] == []
    assert [n for n in names if n.startswith(L.TMP_PREFIX)] == []
    assert [n for n in names if n.startswith("base-")]  # the base was built and stays trusted


@needs_uv
def test_existing_venv_as_base_and_wheelhouse_install(tmp_path, wheels):
    existing = tmp_path / "train-venv"
    subprocess.run([UV, "venv", "--no-config", "--python", sys.executable, str(existing)], check=True,
                   capture_output=True)
    subprocess.run([UV, "pip", "install", "--no-config", "--offline", "--python", str(existing / "bin/python"),
                    str(wheels / "dfl_baseonly-1.0-py3-none-any.whl")], check=True, capture_output=True)
    prefix = tmp_path / "prefix"
    wh = tmp_path / "wheelhouse"
    wh.mkdir()
    shutil.copy(wheels / "dfl_shadow-2.0-py3-none-any.whl", wh)
    lock = {"ov": [{"name": "dfl-shadow", "version": "2.0", "filename": "dfl_shadow-2.0-py3-none-any.whl",
                    "sha256": W.sha256_file(wh / "dfl_shadow-2.0-py3-none-any.whl")}]}
    layers = [{"name": "train", "existing_path": str(existing)},
              {"name": "ov", "parent": "train", "python": sys.executable, "requirements": ["dfl-shadow==2.0"]}]
    before = snapshot(existing)
    items, changed, _ = L.LayerBuilder(str(prefix), UV).ensure(layers, lock, str(wh))
    assert changed
    fact = L.layers_fact(items)
    assert fact[0]["path"] == str(existing) and fact[0]["existing"] and not fact[0]["changed"]
    assert snapshot(existing) == before  # the existing venv is never written to
    got = run_py(fact[1]["python"], "import dfl_shadow, dfl_baseonly; print(dfl_shadow.__file__, dfl_baseonly.__file__)")
    assert got.split()[0].startswith(fact[1]["path"]) and got.split()[1].startswith(str(existing))
    # the existing venv's content is part of the hash: installing into it changes both hashes
    subprocess.run([UV, "pip", "install", "--no-config", "--offline", "--python", str(existing / "bin/python"),
                    str(wheels / "dfl_needs-1.0-py3-none-any.whl")], check=True, capture_output=True)
    plan = L.LayerBuilder(str(prefix), UV).plan(layers, lock, str(wh))
    assert plan[0]["hash"] != fact[0]["hash"] and plan[1]["hash"] != fact[1]["hash"]
    # the wheel's sha256 is part of the hash too
    lock2 = {"ov": [dict(lock["ov"][0], sha256="0" * 64)]}
    assert L.LayerBuilder(str(prefix), UV).plan(layers, lock2, str(wh))[1]["hash"] != plan[1]["hash"]


@needs_uv
def test_prune_layers_removes_unused_and_keeps_parents(tmp_path, wheels):
    prefix = tmp_path / "prefix"
    b = L.LayerBuilder(str(prefix), UV)
    first = L.layers_fact(b.ensure(two_layers(wheels))[0])
    second = L.layers_fact(b.ensure(two_layers(wheels, "dfl-shadow==3.0"))[0])
    manifests = [{"id": "r1", "sequence": 1, "layers": [{"path": first[1]["path"]}]},
                 {"id": "r2", "sequence": 2, "layers": [{"path": second[1]["path"]}]}]
    assert L.prune_layers(str(prefix), manifests, 1, check_mode=True) == [first[1]["path"]]
    assert os.path.isdir(first[1]["path"])
    assert L.prune_layers(str(prefix), manifests, 1) == [first[1]["path"]]
    left = sorted(n for n in os.listdir(prefix / "layers") if not n.startswith("."))
    # the base stays: the kept overlay's marker names it as its parent
    assert left == sorted([os.path.basename(second[0]["path"]), os.path.basename(second[1]["path"])])


def test_missing_wheels_and_one_tar_push(tmp_path, wheels):
    import tarfile

    files = tmp_path / "files"
    files.mkdir()
    for n in ("dfl_shadow-1.0-py3-none-any.whl", "dfl_baseonly-1.0-py3-none-any.whl"):
        shutil.copy(wheels / n, files / n)
    lock = [{"filename": n, "sha256": W.sha256_file(files / n)} for n in sorted(os.listdir(files))]
    host = tmp_path / "host-wheelhouse"
    host.mkdir()
    assert WH.missing_wheels(str(host), lock + lock[:1]) == sorted(os.listdir(files))
    tar_path = WH.bundle_wheels(str(files), [w["filename"] for w in lock], str(tmp_path / "push"))
    assert WH.bundle_wheels(str(files), [w["filename"] for w in lock], str(tmp_path / "push")) == tar_path
    with tarfile.open(tar_path) as tar:
        tar.extractall(host, filter="data")
    assert WH.missing_wheels(str(host), lock) == []
    (host / lock[0]["filename"]).write_bytes(b"corrupt")  # a damaged copy is pushed again
    assert WH.missing_wheels(str(host), lock) == [lock[0]["filename"]]


def test_a_uv_option_is_one_row_prerelease():
    """The layer field added in one place (dflash_layers/overlay.py UV_OPTIONS) as README's demonstration:
    checked, part of the hash only where set (existing layers keep theirs), in the lock key and in uv's argv."""
    from ansible.module_utils.dflash_layers import overlay as O

    base = {"name": "ov", "python": "python3.12", "requirements": ["b==1"]}
    assert L.validate_layers([dict(base, prerelease="allow")]) == []
    assert L.validate_layers([dict(base, prerelease="sometimes")]) == [
        ("dflash_venv_layers[0] (ov): prerelease: 'sometimes' not one of disallow, allow, if-necessary, explicit, "
        "if-necessary-or-explicit")]
    plain, pre = L.normalise_layer(base), L.normalise_layer(dict(base, prerelease="allow"))
    assert "prerelease" not in plain and pre["prerelease"] == "allow"
    interp = {"implementation": "cpython", "version": "3.12.3"}
    assert L.layer_hash(plain, "p" * 64, interp) != L.layer_hash(pre, "p" * 64, interp)
    assert O.index_args(pre) == ["--prerelease", "allow"]
    assert O.index_args(dict(L.normalise_layer(dict(base, index_strategy="unsafe-best-match", no_index=True,
                                                        find_links=["/w"])), prerelease="if-necessary")) == [
        "--no-index", "--find-links", "/w", "--index-strategy", "unsafe-best-match", "--prerelease", "if-necessary"]
    target = {"python_version": "3.12", "arch": "x86_64", "glibc": "2.36"}
    assert WH.wheelhouse_key(plain, target) != WH.wheelhouse_key(pre, target)


def test_a_full_disk_under_uv_is_the_headline_with_the_fullest_directory(tmp_path):
    """uv's own words for a full cache (tests/fixtures/layers/uv-0.13.9-cache-full.txt, real uv 0.13.9 on a full
    tmpfs): the failure says first that there is no space, where (uv's cache: the directory the build passes as
    UV_CACHE_DIR) and how much is free, then what failed and uv's output."""
    err = (FIXTURES / "uv-0.13.9-cache-full.txt").read_text()
    cache = tmp_path / "cache" / "uv"
    b = L.LayerBuilder(str(tmp_path / "opt"), "/usr/bin/uv", runner=lambda argv, env, timeout: (1, "", err),
                       cache_dir=str(cache))
    with pytest.raises(L.LayerError) as exc:
        b._uv(["pip", "install", "x.whl"], {"name": "overlay", "env": {}}, "uv pip install")
    msg = str(exc.value)
    assert msg.startswith(f"layer overlay: no space left on {cache} (uv's cache): have ")
    assert " MiB free of " in msg.splitlines()[0]
    assert ": uv pip install failed (rc 1): /usr/bin/uv pip install x.whl" in msg.splitlines()[0]
    assert msg.rstrip().endswith("No space left on device (os error 28)")
    # another failure keeps its own words first
    b2 = L.LayerBuilder(str(tmp_path), "/usr/bin/uv", runner=lambda argv, env, timeout: (2, "", "error: No solution"))
    with pytest.raises(L.LayerError, match=r"^layer overlay: uv pip install failed \(rc 2\)"):
        b2._uv(["pip", "install"], {"name": "overlay", "env": {}}, "uv pip install")
