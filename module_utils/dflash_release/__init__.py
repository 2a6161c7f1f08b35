"""dflash_release: the release stage (roles/dflash_release, library/dflash_release.py, library/dflash_activation.py).

A release is ``<prefix>/releases/<id>/`` holding everything the instances run (manifest.json, venv and
tree links, instances/<name>.env, status.json, smoke/<name>.json); ``<prefix>/current -> releases/<id>``
is what the units read. Pure functions plus small filesystem helpers; no Ansible import.

- ``manifest``: ids, content hashes, the manifest and what differs between two
- ``envfile``: the instances' 0600 env files (render, parse)
- ``order``: ordering by sequence, keep-N, pruning plans, rollback targets
- ``store``: releases on disk (read, write atomically, verify)
- ``ops``: the module's operations (prepare, activate, mark, listing, rollback, prune, absent instances)
- ``activation``: the activation transaction; also installed on hosts as the boot guard (standalone)
"""
