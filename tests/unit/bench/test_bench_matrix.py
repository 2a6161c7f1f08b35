"""The benchmark matrix: names, sweep, every error at once, waves, cells, progress."""

import pytest
from ansible.module_utils.dflash_bench import matrix as mx


def test_names_and_defaults():
    cfgs = mx.normalize([{"algorithm": "none"}, {"algorithm": "DFLASH", "attention_backend": "triton"},
                         {"algorithm": "DDTREE"}, {"running": "main"}, {"name": "mine", "algorithm": "DDTREE",
                                                                         "budget": 7, "topk": 1, "tp": 2}])
    assert [c["name"] for c in cfgs] == ["none", "dflash-triton", "ddtree-b15-k8", "running-main", "mine"]
    assert cfgs[2]["budget"] == 15 and cfgs[2]["topk"] == 8 and cfgs[2]["mode"] == "tree"
    assert cfgs[0]["algorithm"] == "NONE" and "budget" not in cfgs[0]
    assert cfgs[4]["tp"] == 2 and cfgs[4]["env"] == {} and cfgs[4]["extra_args"] == []


def test_sweep_is_a_cross_product_after_the_declared_ones():
    cfgs = mx.normalize([{"algorithm": "NONE"}], {"algorithm": ["DDTREE"], "budget": [7, 15, 31], "topk": [1, 4, 8]})
    assert len(cfgs) == 10
    assert [c["name"] for c in cfgs[1:4]] == ["ddtree-b7-k1", "ddtree-b7-k4", "ddtree-b7-k8"]
    assert cfgs[-1]["name"] == "ddtree-b31-k8"


def test_every_error_at_once_naming_host_configuration_and_field():
    with pytest.raises(mx.MatrixError) as exc:
        mx.normalize([{"algorithm": "EAGLE"}, {"algorithm": "NONE", "budget": 7}, {"algorithm": "DDTREE", "budget": 99},
                      {"algorithm": "DFLASH", "colour": "red"}, {"algorithm": "DFLASH"},
                      {"algorithm": "DFLASH", "gpus": [0, 1], "tp": 1}, {"running": "main", "tp": 2},
                      {"algorithm": "DFLASH", "mem_fraction_static": 1.5}], {"depth": [1]}, host="ct200")
    errs = exc.value.errors
    assert all(e.startswith("ct200: ") for e in errs)
    text = "\n".join(errs)
    assert "[0] (eagle): field 'algorithm': 'EAGLE' is not one of NONE, DFLASH, DDTREE" in text
    assert "[1] (none): field 'budget': only DDTREE has a budget" in text
    assert "field 'budget': 99 must be an integer 1..64" in text
    assert "field 'colour': unknown" in text
    assert "field 'name': 'dflash' is also configuration #3" in text
    assert "field 'tp': 1 but 2 GPU(s) in 'gpus'" in text
    assert "field 'running': a running instance is measured as it is" in text
    assert "field 'mem_fraction_static': 1.5 must be in (0, 1)" in text
    assert "dflash_bench_sweep: field 'depth': not a sweep axis" in text
    assert "[5] (dflash): field 'name': 'dflash' is also configuration #3" in text
    assert len(errs) == 11


def test_lenient_keeps_the_good_configurations_for_further_checks():
    good, errs = mx.normalize([{"algorithm": "EAGLE"}, {"algorithm": "DDTREE", "budget": 31}], host="h", lenient=True)
    assert [c["name"] for c in good] == ["ddtree-b31-k8"] and len(errs) == 1 and "'EAGLE'" in errs[0]


def test_workload_and_concurrency_errors():
    assert mx.check_workloads(["seeds", "agent"], [1, 4]) == []
    errs = mx.check_workloads(["seeds", "chat"], [0, "x"], host="h")
    assert errs == ["h: dflash_bench_workloads: 'chat' is not one of seeds, random, agent",
                    "h: dflash_bench_concurrency: 0 must be an integer 1..256",
                    "h: dflash_bench_concurrency: 'x' must be an integer 1..256"]


def test_waves_put_running_instances_first_and_group_the_rest():
    cfgs = mx.normalize([{"algorithm": "NONE"}, {"running": "main"}, {"algorithm": "DFLASH"}],
                        {"algorithm": ["DDTREE"], "budget": [7, 15]})
    waves = mx.waves(cfgs, parallel=2)
    assert [[c["name"] for c in w] for w in waves] == [["running-main"], ["none", "dflash"],
                                                       ["ddtree-b7-k8", "ddtree-b15-k8"]]
    cells = mx.cells(waves, ["seeds", "agent"], [1, 4])
    assert len(cells) == 5 * 2 * 2 and [c["n"] for c in cells] == list(range(1, 21))
    assert cells[0] == {"n": 1, "id": "running-main__seeds__c1", "config": "running-main", "workload": "seeds",
                        "concurrency": 1, "wave": 0, "repeat": 1}
    assert cells[-1]["id"] == "ddtree-b15-k8__agent__c4" and cells[-1]["wave"] == 2


def test_repeats_measure_each_cell_again_on_the_same_server():
    waves = [[{"name": "dflash"}], [{"name": "none"}]]
    cells = mx.cells(waves, ["seeds", "agent"], [1, 4], repeats=3)
    assert len(cells) == 2 * 3 * 2 * 2 and len({c["id"] for c in cells}) == len(cells)
    first = [c["id"] for c in cells if c["config"] == "dflash"]
    assert first[:5] == ["dflash__seeds__c1__r1", "dflash__seeds__c4__r1", "dflash__agent__c1__r1",
                         "dflash__agent__c4__r1", "dflash__seeds__c1__r2"]
    assert [c["repeat"] for c in cells if c["id"].startswith("none__seeds__c1")] == [1, 2, 3]
    assert mx.check_repeats(3) == [] and mx.check_repeats("2") == []
    for bad in (0, 21, "x", None, 1.5):
        assert mx.check_repeats(bad, "ct200") == [
            f"ct200: dflash_bench_repeats: {bad!r} is not a whole number from 1 to 20"], bad


def test_progress_line():
    assert mx.progress(1, 24, 3) == "cell 1 of 24, 3s elapsed"
    assert mx.progress(5, 24, 70) == "cell 5 of 24, 1m10s elapsed, about 5m50s left"
    assert mx.progress(6, 24, 70, done_cells=6) == "cell 6 of 24, 1m10s elapsed, about 3m30s left"
