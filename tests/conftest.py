"""pytest setup shared by every test.

The toolkit's code (`module_utils/dflash_<stage>/`) is imported by one name everywhere: the name the Ansible
modules import it by, `ansible.module_utils.dflash_<stage>.<file>` (AnsiballZ ships exactly what is imported that
way). Here, as in the filter and callback plugins, the repository's module_utils/ is added to the package path of
`ansible.module_utils` (docs/design.md, "Import path").
"""

import os
import sys
from pathlib import Path

# torch._dynamo registers graph substitutes for stdlib functions (sys.intern among them) when first
# imported; ansible-core replaces sys.intern with a patch object at import, after which that
# registration raises TypeError. Import dynamo first where torch is installed, so the DDTree tests
# pass whatever order pytest collects them in.
# It imports Triton too, where installed, and Triton decides at its import whether its library runs in
# its CPU interpreter: the tests have no GPU, and the Triton kernels they run (the DDTree build kernel,
# tests/unit/tree/test_ddtree_kernel.py) run interpreted, so the variable is set first.
os.environ.setdefault("TRITON_INTERPRET", "1")
try:
    import torch._dynamo  # noqa: F401
except ImportError:
    pass

import ansible.module_utils

REPO_ROOT = Path(__file__).resolve().parent.parent
MODULE_UTILS = str(REPO_ROOT / "module_utils")

if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)

# Tests live by stage (tests/unit/<stage>/test_*.py); their shared helpers stay importable by name
# (tests/sglang_wheel.py, tests/unit/ansible_play.py, and helpers one stage's tests take from another's,
# e.g. the lab stand-in's Server from tests/unit/lab/test_standin.py).
_UNIT = REPO_ROOT / "tests" / "unit"
for helpers in (REPO_ROOT / "tests", _UNIT, *sorted(p for p in _UNIT.iterdir() if p.is_dir() and p.name != "__pycache__")):
    if str(helpers) not in sys.path:
        sys.path.insert(1, str(helpers))
