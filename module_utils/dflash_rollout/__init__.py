"""dflash_rollout: the rollout across hosts (roles/dflash_rollout, filter_plugins/dflash_rollout.py,
callback_plugins/dflash_rollout.py). Pure functions, no Ansible import.

- ``batches``: Ansible's own rule for ``serial`` (the batches), the rollout summary rows
- ``multinode``: instances spanning hosts (nnodes, node_rank, dist_init_addr) checked across the fleet
"""
