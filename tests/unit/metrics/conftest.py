"""The role rendered once for the metrics tests: targets, rules (checked by promtool when found) and the
dashboard copy, with metrics_role.FIGURES."""

import pytest
from metrics_role import FIGURES, promtool, run_role


@pytest.fixture(scope="session")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics-role")
    paths = {"file_sd": tmp / "file_sd" / "dflash.json", "rules": tmp / "rules" / "dflash.rules.yml",
             "dashboards": tmp / "dashboards"}
    run = run_role(tmp, {
        "dflash_metrics_file_sd_path": str(paths["file_sd"]),
        "dflash_metrics_rules_path": str(paths["rules"]),
        "dflash_metrics_dashboard_dir": str(paths["dashboards"]),
        "dflash_metrics_prometheus_service": "",
        "dflash_metrics_promtool": promtool() or "",
        "dflash_metrics_alert_figures": FIGURES,
        "dflash_metrics_release_ids": {"gpu-b": "r1"},
    })
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return dict(paths, tmp=tmp, run=run)
