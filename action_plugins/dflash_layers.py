"""Action plugin of dflash_layers: a layer build (GBs of wheels, up to an hour) says how it goes.

``action: ensure`` runs the module asynchronously (Ansible's own async wrapper) and, every
``progress_interval`` seconds until it ends, reads the progress record the module keeps on the host
(module_utils/dflash_common/progress.py: the layer, the uv step, distributions installed so far of the planned
ones, bytes written) and prints one line for the host: what, how far, how long so far. Every other action, check
mode, an async task of the user's and ``progress_interval: 0`` run the module once, as the generic action does.
"""

from __future__ import annotations

import os
import secrets

import ansible.module_utils
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

# the repository's module_utils/ under the name the modules import it by (docs/design.md, "Import path")
_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)

from ansible.module_utils.dflash_common import progress

display = Display()


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        interval = progress.interval_arg(args, pop=True)
        limit = int(args.get("build_timeout") or 3600) * max(1, len(args.get("layers") or [])) * 2 + 300
        host = (task_vars or {}).get("inventory_hostname", "")
        out = progress.run_build(
            self, "dflash_layers", args, task_vars,
            lambda: os.path.join(str(args["prefix"]), "layers", f".progress-{secrets.token_hex(6)}.json"),
            interval, limit, "venv layers", lambda text: display.display(f"{host}: {text}"), "ensure", "ensure")
        return merge_hash(result, out)
