"""`nvidia-smi topo -m` / `topo -p2p` parsing on real captures (tests/fixtures/topo/SOURCE.md)."""

from pathlib import Path

import pytest
from ansible.module_utils.dflash_fingerprint import topo as t

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "topo"


def topo(name):
    return (FIX / f"{name}.topo.txt").read_text()


def p2p(name):
    return (FIX / f"{name}.p2p.txt").read_text()


@pytest.mark.parametrize("name, gpus, nics, pair, cell, numa", [
    ("rtx5090x2-phb", [0, 1], 0, "0-1", "PHB", {0: 0, 1: 0}),
    ("node2-markdown", [0, 1], 0, "0-1", "NODE", {0: 0, 1: 0}),
    ("rtx4090x8-sys", list(range(8)), 2, "3-4", "SYS", {0: 0, 3: 0, 4: 1, 7: 1}),
    ("mixed5-numa", list(range(5)), 0, "1-2", "PHB", {0: 1, 1: 0, 4: 0}),
    ("h100x8-nv18-glued", list(range(8)), 12, "0-7", "NV18", {0: 0, 7: 1}),
    ("h100x8-nv18-ansi", list(range(8)), 9, "3-4", "NV18", {3: 0, 4: 1}),
    ("l4x2-sys", [0, 1], 0, "0-1", "SYS", {0: 0, 1: 2}),
    ("sys4-indented", [0, 1, 2, 3], 0, "2-3", "SYS", {0: 0, 3: 0}),
    ("phb4-prompt", [0, 1, 2, 3], 0, "1-3", "PHB", {2: 0}),
])
def test_matrix_real_captures(name, gpus, nics, pair, cell, numa):
    m = t.parse_topo_matrix(topo(name))
    assert m["error"] is None
    assert m["gpus"] == gpus
    assert m["nics"] == nics
    assert m["links"][pair] == cell
    # every pair of GPUs once, NIC cells never taken for GPU links
    assert len(m["links"]) == len(gpus) * (len(gpus) - 1) // 2
    for k, v in numa.items():
        assert m["numa_affinity"][k] == v


def test_matrix_trailing_cells_survive_glued_nic_cells():
    # rows 4-7 of the vLLM copy glue two NIC cells ("NODENODE"): the NIC count shifts, the
    # CPU / NUMA cells are read from the end and stay right
    m = t.parse_topo_matrix(topo("h100x8-nv18-glued"))
    assert m["cpu_affinity"][5] == "56-111,168-223"
    assert m["numa_affinity"][5] == 1


def test_matrix_mixed_links_of_five_gpus():
    m = t.parse_topo_matrix(topo("mixed5-numa"))
    assert [m["links"][k] for k in ("0-1", "1-2", "1-3", "3-4")] == ["SYS", "PHB", "NODE", "PHB"]
    assert m["cpu_affinity"][0] == "8-15,24-31"


@pytest.mark.parametrize("name, status", [("rtx5090x2-phb", "GNS"), ("node2-markdown", "NS"), ("p2p-ok2", "OK")])
def test_p2p_real_captures(name, status):
    p = t.parse_p2p_matrix(p2p(name))
    assert p == {"gpus": [0, 1], "status": {"0-1": status}, "error": None}


def test_p2p_pair_takes_the_worse_direction():
    text = " \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tCNS\tX\t\n"
    assert t.parse_p2p_matrix(text)["status"] == {"0-1": "CNS"}


@pytest.mark.parametrize("text, err", [
    ("", "no topology matrix"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "no topology matrix"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-63\n", "no row for GPU 1"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tWAT\t0-63\nGPU1\tPHB\t X \t0-63\n", "GPU0: cannot read"),
])
def test_matrix_errors_say_what_is_wrong(text, err):
    assert err in t.parse_topo_matrix(text)["error"]


def test_single_gpu_matrix():
    # a one-GPU host (GB10 layout): no pairs, nothing to say about links
    m = t.parse_topo_matrix("\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNODE\t0-19\t0\t\tN/A\n")
    assert m["gpus"] == [0] and m["links"] == {} and m["error"] is None and m["numa_affinity"] == {0: 0}


def test_parse_topology_combines_and_stringifies_keys():
    topology = t.parse_topology(topo("rtx5090x2-phb"), p2p("rtx5090x2-phb"))
    assert topology["p2p"] == {"0-1": "GNS"}
    assert topology["numa_affinity"] == {"0": 0, "1": 0}
    assert topology["errors"] == []
    assert t.parse_topology(None, None) is None
    broken = t.parse_topology("garbage", None)
    assert broken["errors"] == ["nvidia-smi topo -m: no topology matrix (no header naming GPU0)"]


def test_gpu_set_pcie_without_p2p():
    topology = t.parse_topology(topo("rtx5090x2-phb"), p2p("rtx5090x2-phb"))
    f = t.gpu_set_facts(topology, [0, 1])
    assert f["known"] and f["worst"] == "PHB" and f["all_nvlink"] is False
    assert f["p2p_ok"] is False and f["p2p_bad"] == ["0-1 GNS (GPU not supported)"]
    assert f["cross_numa"] is False and f["numa_nodes"] == [0]


def test_gpu_set_nvlink_subset_across_numa():
    topology = t.parse_topology(topo("h100x8-nv18-ansi"), None)
    f = t.gpu_set_facts(topology, [2, 3, 4, 5])
    assert f["all_nvlink"] is True and f["worst"] == "NV"
    assert f["numa_nodes"] == [0, 1] and f["cross_numa"] is True
    assert f["p2p_ok"] is None  # no p2p capture
    assert f["numa_groups"] == {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}


def test_gpu_set_within_one_numa_node():
    topology = t.parse_topology(topo("rtx4090x8-sys"), None)
    assert t.gpu_set_facts(topology, [4, 5, 6, 7])["cross_numa"] is False
    assert t.gpu_set_facts(topology, [3, 4])["cross_numa"] is True
    assert t.describe_links(t.gpu_set_facts(topology, [3, 4])) == "3-4 SYS"


def test_gpu_set_unknown_pieces():
    assert t.gpu_set_facts(None, [0, 1])["known"] is False
    assert t.gpu_set_facts({"links": {"0-1": "PIX"}}, [0])["known"] is False  # one GPU: nothing to link
    f = t.gpu_set_facts(t.parse_topology(topo("l4x2-sys"), None), [0, 1, 2])  # GPU 2 not in the matrix
    assert f["known"] is False and f["worst"] is None
