"""Action plugin of dflash_tree: building the patched tree (the wheel read, the patch series applied, the files
written and checked) says how it goes, a line every ``progress_interval`` seconds (the step, bytes written, time
so far), through the same async run and progress record as a layer build
(module_utils/dflash_common/progress.py ``run_module_with_progress``). Every other action, check mode and
``progress_interval: 0`` run the module once."""

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
        host = (task_vars or {}).get("inventory_hostname", "")
        out = progress.run_build(
            self, "dflash_tree", args, task_vars,
            lambda: os.path.join(str(args["trees_dir"]), f".progress-{secrets.token_hex(6)}.json"),
            interval, 3600, "sglang tree", lambda text: display.display(f"{host}: {text}"), "build")
        return merge_hash(result, out)
