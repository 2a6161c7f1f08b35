"""Prometheus file_sd targets of every instance and router (module_utils/dflash_metrics.py)."""

import json

from ansible.module_utils import dflash_metrics as metrics
from test_router import FLEET

# --------------------------------------------------------------------------- Prometheus file_sd

def test_file_sd_targets():
    routers = {"fl-a": {"address": "mol-fl-a", "prometheus_port": 29000}}
    groups = metrics.targets(FLEET, routers)
    by = {g["targets"][0]: g["labels"] for g in groups}
    assert set(by) == {"mol-fl-a:30001", "[fd00::3]:30002", "mol-fl-d:30001", "mol-fl-a:29000"}
    assert by["mol-fl-d:30001"] == {"dflash_host": "fl-d", "dflash_instance": "mn", "dflash_role": "instance",
                                    "dflash_algorithm": "DFLASH", "dflash_node_rank": "0"}
    assert by["mol-fl-a:29000"]["dflash_role"] == "router"
    # fl-e's rank has metrics: false: no target
    text = metrics.file_sd(FLEET, routers)
    assert json.loads(text) == groups and text.endswith("\n")
    assert metrics.file_sd(FLEET, routers) == text  # stable
