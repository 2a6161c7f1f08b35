"""pytest setup shared by every test: make module_utils/ importable as plain modules.

`module_utils/dflash_<topic>.py` holds the toolkit's logic as pure functions; tests import them
directly (`import dflash_fingerprint`), the Ansible modules as `ansible.module_utils.dflash_<topic>`.
"""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MODULE_UTILS = str(REPO_ROOT / "module_utils")

if MODULE_UTILS not in sys.path:
    sys.path.insert(0, MODULE_UTILS)

# torch._dynamo registers graph substitutes for stdlib functions (sys.intern among them) when first
# imported; ansible-core replaces sys.intern with a patch object at import, after which that
# registration raises TypeError. Import dynamo first where torch is installed, so the DDTree tests
# pass whatever order pytest collects them in.
try:
    import torch._dynamo  # noqa: F401
except ImportError:
    pass
