#!/usr/bin/env python3
"""dflash-guard: the boot guard (dflash-guard.service; roles/dflash_instances/tasks/guard.yml installs it).

Installed as <prefix>/libexec/guard/dflash-guard beside ansible/module_utils/dflash_release/journal.py and
ansible/module_utils/dflash_service/systemd.py: the toolkit's own two files, under the name they import each other
by (docs/design.md, "Import path"; this directory comes first on sys.path, no Ansible is installed or needed).
"""

import sys

from ansible.module_utils.dflash_release.journal import main

if __name__ == "__main__":
    sys.exit(main())
