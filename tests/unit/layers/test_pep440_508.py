"""dflash_pep440 / dflash_pep508 (own PEP 440 / PEP 508 code for hosts without ``packaging``),
checked against ``packaging`` (the reference, present in the controller env) on real metadata:
every ``Requires-Dist`` of every distribution installed in the controller's venv, their markers
evaluated for this interpreter with and without each extra, and a grid of versions x specifiers
that covers local labels, pre/post/dev releases, epochs and wildcards."""

import importlib.metadata
import itertools

import pytest
from ansible.module_utils.dflash_layers import pep440 as V
from ansible.module_utils.dflash_layers import pep508 as R
from packaging.markers import default_environment
from packaging.requirements import Requirement as PReq
from packaging.specifiers import SpecifierSet as PSpecSet
from packaging.version import Version as PVersion

VERSIONS = [
    "0", "1", "1.0", "1.0.0", "1.0.post1", "1.0.post0", "1.0-1", "1.0.dev0", "1.0.dev1", "1.0a1", "1.0a1.dev1",
    "1.0b2", "1.0rc1", "1.0c2", "1.0.1", "1.1", "1.1.0a1", "1.1.post2.dev3", "1!0.5", "2.11.0",
    "2.11.0+cu128", "2.11.0+cu130", "2.11.0+cpu", "2.11.0+cu128.1", "2.11.0+1", "2.11.0.post1",
    "2.11.1", "2.12.0.dev20260101", "0.6.8.post1", "2025.9.1", "3.12", "3.12.0", "3.11.7",
    "1.0.0-alpha.1", "v1.2", "1.2.3.4.5", "0.0.10", "1.0+loc", "1.0.post1+loc", "1.0.post2+loc", "1.0a1.post1",
    "1.0rc1.dev1", "1.0.dev2", "0.9+l", "1.0.post1.dev0",
]
SPECS = [
    "==2.11.0", "==2.11.0+cu128", "!=2.11.0", "!=2.11.0+cu130", ">=2.11.0", "<=2.11.0", ">2.11.0", "<2.11.0",
    "<2.12", ">2.11", "~=2.11", "~=2.11.0", "~=1.0.post1", "==2.11.*", "!=2.11.*", "==1.*", "==1.0.*",
    ">=1.0,<2", ">1.0a1", "<1.0", ">1.0", ">=1!0", "===2.11.0", "===2.11.0+cu128", "<1.1", ">=1.0.dev0",
    "~=0.6.8", "==0.6.8.post1", "==3.12.*", "<3.12", ">=3.11.7", "<1.0.post1", ">1.0.post1", "<1.0rc1",
    ">1.0.dev1", "<=1.0", ">1.0.post0",
]


def test_versions_normalise_and_order_as_pep440():
    mine = [V.Version(v) for v in VERSIONS]
    ref = [PVersion(v) for v in VERSIONS]
    assert [str(m) for m in mine] == [str(r) for r in ref]
    for (a, pa), (b, pb) in itertools.product(zip(mine, ref), repeat=2):
        assert (a < b, a == b, a > b) == (pa < pb, pa == pb, pa > pb), (a, b)
    assert V.parse_version("not a version") is None
    assert V.same_version("2.11.0", "2.11.0.0") and not V.same_version("2.11.0", "2.11.0+cu128")


@pytest.mark.parametrize("spec", SPECS)
def test_specifiers_match_packaging(spec):
    mine, ref = V.SpecifierSet(spec), PSpecSet(spec)
    for v in VERSIONS:
        assert mine.contains(v) == ref.contains(v, prereleases=True), (spec, v)


def test_bad_specifiers_are_refused():
    for bad in ("=>1", ">=1.*", "~=1", ">=1.0+cu128", "==", "== not"):
        with pytest.raises(V.InvalidSpecifier):
            V.SpecifierSet(bad)


def _installed_requirements():
    for dist in importlib.metadata.distributions():
        extras = [""] + list(dist.metadata.get_all("Provides-Extra") or [])
        for text in dist.requires or []:
            yield dist.metadata["Name"], text, extras


def test_every_requirement_of_the_controller_env_parses_and_evaluates_like_packaging():
    env = default_environment()
    seen = 0
    for owner, text, extras in _installed_requirements():
        ref = PReq(text)
        mine = R.Requirement(text)
        assert mine.key == R.canonical_name(ref.name)
        assert mine.extras == {R.canonical_name(e) for e in ref.extras}
        assert str(mine.specifier) == str(ref.specifier) or sorted(str(mine.specifier).split(",")) == sorted(
            str(ref.specifier).split(",")), (owner, text)
        assert mine.url == ref.url
        for extra in extras:
            want = ref.marker is None or ref.marker.evaluate({**env, "extra": extra})
            assert mine.applies(env, (extra,)) == want, (owner, text, extra)
        seen += 1
    assert seen > 200  # the controller env has hundreds of requirements: real material


def test_markers_versions_strings_and_extras():
    env = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3",
           "platform_machine": "x86_64", "sys_platform": "linux"}
    cases = [
        'python_version >= "3.9" and platform_machine == "x86_64"',
        '(sys_platform == "darwin" or platform_machine == "aarch64") and python_version < "3.13"',
        'python_full_version < "3.12.1"',
        '"linux" in sys_platform',
        'platform_machine not in "arm64 aarch64"',
        "extra == 'Audio_Files'",
        'python_version ~= "3.10"',
        'platform_release >= "5"',
    ]
    for text in cases:
        ref = PReq(f"x; {text}").marker
        for extra in ("", "audio-files"):
            assert R.evaluate_marker(R.parse_marker(text), {**env, "extra": extra}) == ref.evaluate(
                {**env, "extra": extra}), (text, extra)
    for bad in ('python_version >= ', 'nonsense == "1"', '(python_version == "3.12"', 'os_name "x"'):
        with pytest.raises(R.InvalidRequirement):
            R.parse_marker(bad)


def test_requirement_forms():
    r = R.Requirement("Torch_Audio[Sound, x] (>=2.11,<2.12) ; python_version >= '3.10'")
    assert (r.key, r.extras, str(r.specifier)) == ("torch-audio", {"sound", "x"}, ">=2.11,<2.12")
    u = R.Requirement("sglang @ https://example.invalid/sglang-0.5.11-py3-none-any.whl ; os_name == 'posix'")
    assert u.url == "https://example.invalid/sglang-0.5.11-py3-none-any.whl" and u.marker is not None
    assert R.Requirement("six").specifier.contains("0.1")
    with pytest.raises(R.InvalidRequirement):
        R.Requirement("x >= not-a-version")
