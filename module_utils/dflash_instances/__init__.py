"""dflash_instances: the instances stage (roles/dflash_instances, library/dflash_instances_facts.py,
filter_plugins/dflash_instances.py). Pure functions, no Ansible import.

- ``fields``: the instance fields (names, keys, defaults, managed flags/env) and small helpers
- ``validate``: controller-side validation, every error at once naming host, instance and field
- ``rules``: the fallback rules engine (the rules themselves are data: roles/dflash_instances/vars/main.yml)
- ``flags``: the flags fact, each instance's sglang arguments and environment
- ``host``: read-only facts gathered on the host (/proc listeners and their units, paths, draft block
  size, the final layer's CUDA, installed units); the only part library/dflash_instances_facts.py ships

Add a fallback rule: a row in roles/dflash_instances/vars/main.yml (CONTRIBUTING.md, "Where to change what").
"""
