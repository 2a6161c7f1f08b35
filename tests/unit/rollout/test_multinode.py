"""Multi-node instances across hosts (module_utils/dflash_rollout/multinode.py): every bad form is refused with
the hosts, the instance and the field; a good layout passes; the rollout batches must keep ranks together."""

import copy

import pytest
from ansible.module_utils.dflash_rollout import batches as ro
from ansible.module_utils.dflash_rollout import multinode as mn

ADDR = {"fl-d": ["fl-d", "mol-fl-d", "10.88.0.4"], "fl-e": ["fl-e", "mol-fl-e", "10.88.0.5"],
        "fl-a": ["fl-a", "10.88.0.1"]}


def rank(r, **kw):
    base = {"name": "mn", "gpus": [0], "tp": 2, "port": 30001, "algorithm": "DFLASH", "model_path": "/m",
            "draft_model_path": "/d", "nnodes": 2, "node_rank": r, "dist_init_addr": "mol-fl-d:29500"}
    base.update(kw)
    return base


def good():
    return {"fl-a": [{"name": "w", "gpus": [0], "port": 30001}], "fl-d": [rank(0)], "fl-e": [rank(1)]}


def check(fleet, run=("fl-a", "fl-d", "fl-e"), batches=None, serial=None):
    return mn.validate_fleet(fleet, list(run), ADDR, batches, serial)


def test_good_layout_passes_and_names_its_ranks():
    res = check(good(), batches=ro.batches(["fl-a", "fl-d", "fl-e"], [1, 2]), serial=[1, 2])
    assert res["errors"] == [] and res["warnings"] == []
    assert res["groups"] == {"mn": {"ranks": {"0": "fl-d", "1": "fl-e"}, "dist_init_addr": "mol-fl-d:29500",
                                    "hosts": ["fl-d", "fl-e"]}}
    assert mn.peer_hosts(good(), "fl-e") == ["fl-d"] and mn.peer_hosts(good(), "fl-a") == []


def bad(**per_host):
    f = good()
    for host, changes in per_host.items():
        if changes is None:
            f[host] = []
        else:
            f[host] = [rank(f[host][0]["node_rank"], **changes)]
    return f


@pytest.mark.parametrize("fleet, needle", [
    (bad(**{"fl-e": {"node_rank": 0}}),
     "fl-e: instance 'mn': field 'node_rank': rank 0 is also claimed by fl-d"),
    (bad(**{"fl-e": {"node_rank": 0}}),
     "fl-d, fl-e: instance 'mn': field 'node_rank': nnodes 2 needs ranks 0..1, no host has rank 1"),
    (bad(**{"fl-e": None}),
     "fl-d: instance 'mn': field 'node_rank': nnodes 2 needs ranks 0..1, no host has rank 1"),
    (bad(**{"fl-e": {"nnodes": 3}}),
     "fl-e: instance 'mn': field 'nnodes': 3 here but 2 on fl-d"),
    (bad(**{"fl-e": {"dist_init_addr": "mol-fl-e:29500"}}),
     "fl-e: instance 'mn': field 'dist_init_addr': 'mol-fl-e:29500' here but 'mol-fl-d:29500' on fl-d"),
    (bad(**{"fl-e": {"model_path": "/other"}}),
     "fl-e: instance 'mn': field 'model_path': '/other' here but '/m' on fl-d"),
    (bad(**{"fl-e": {"gpus": [0, 1], "tp": 2}}),
     "fl-d, fl-e: instance 'mn': field 'gpus': every rank needs the same number of GPUs"),
    (bad(**{"fl-d": {"dist_init_addr": "mol-fl-e:29500"}, "fl-e": {"dist_init_addr": "mol-fl-e:29500"}}),
     "fl-d: instance 'mn': field 'dist_init_addr': mol-fl-e:29500 is fl-e's address, but rank 0 runs on fl-d"),
    (bad(**{"fl-d": {"dist_init_addr": "10.88.0.9:29500"}, "fl-e": {"dist_init_addr": "10.88.0.9:29500"}}),
     "fl-d: instance 'mn': field 'dist_init_addr': 10.88.0.9 is not an address of fl-d, the rank-0 host (10.88.0.4)"),
])
def test_each_bad_form_is_refused_with_hosts_instance_and_field(fleet, needle):
    errors = check(fleet)["errors"]
    assert any(needle in e for e in errors), errors


def test_a_rank_left_out_by_the_limit():
    errors = check(good(), run=["fl-a", "fl-d"])["errors"]
    assert errors == [("fl-e: instance 'mn': field 'node_rank': rank 1 is on fl-e, which this run leaves out "
                       "(--limit fl-d): the ranks of a multi-node instance are deployed together; add it to the limit")]


def test_a_limit_to_other_hosts_leaves_the_multi_node_instance_alone():
    # deploy.yml -l fl-a (or playbooks/guard.yml -l fl-a) touches neither rank: nothing to refuse
    assert check(good(), run=["fl-a"])["errors"] == []


def test_ranks_in_different_batches():
    hosts = ["fl-a", "fl-d", "fl-e"]
    errors = check(good(), batches=ro.batches(hosts, [1, "25%"]), serial=[1, "25%"])["errors"]
    assert errors == [("fl-d, fl-e: instance 'mn': field 'node_rank': the ranks fall in rollout batches fl-d -> 2, "
                       "fl-e -> 3 of serial [1, '25%']: the ranks of a multi-node instance restart together (rank 0 "
                       "waits for all); order the hosts so they share a batch, or set dflash_rollout_serial")]


def test_unknown_name_for_rank_0_is_a_warning():
    f = bad(**{"fl-d": {"dist_init_addr": "head-node:29500"}, "fl-e": {"dist_init_addr": "head-node:29500"}})
    res = check(f)
    assert res["errors"] == [] and "head-node is not one of the names this inventory knows" in res["warnings"][0]


def test_more_hosts_than_nnodes_and_all_errors_at_once():
    f = good()
    f["fl-a"] = [rank(1)]  # a third member claiming rank 1 too
    errors = check(f)["errors"]
    assert any("rank 1 is also claimed by fl-a" in e for e in errors)
    assert any("3 hosts define the instance but nnodes is 2" in e for e in errors)


def test_single_node_instances_are_not_groups():
    f = copy.deepcopy(good())
    f["fl-d"] = [rank(0, nnodes=1)]
    f["fl-e"] = [rank(0, nnodes=1, node_rank=None)]
    assert mn.groups(f) == {}
