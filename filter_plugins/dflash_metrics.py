"""Jinja filters of roles/dflash_metrics: the scrape targets with each host's release, the alert figures read
from the releases' smoke records, their checks and recording values. Thin wrappers over module_utils/dflash_metrics.py."""

from __future__ import annotations

import os

import ansible.module_utils

# The repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils import dflash_metrics as _metrics
from ansible.module_utils.dflash_common.jinja import plain as _plain


def dflash_metrics_file_sd(fleet, routers=None):
    return _metrics.file_sd(_plain(fleet), _plain(routers))


def dflash_metrics_release_labels(file_sd_text, release_ids):
    return _metrics.release_labels(str(file_sd_text), _plain(release_ids))


def dflash_metrics_alert_errors(figures, fleet, margins, for_, windows, limits):
    return _metrics.alert_errors(*(_plain(x) for x in (figures, fleet, margins, for_, windows, limits)))


def dflash_metrics_alert_rows(figures, margins):
    return _metrics.alert_rows(_plain(figures), _plain(margins))


def dflash_metrics_figure_sources(fleet):
    return _metrics.figure_sources(_plain(fleet))


def dflash_metrics_record_figures(records, currents=None):
    return _metrics.record_figures(_plain(records), _plain(currents))


def dflash_metrics_merge_figures(from_records, explicit):
    return _metrics.merge_figures(_plain(from_records), _plain(explicit))


def dflash_metrics_release_ids(currents):
    return _metrics.release_ids(_plain(currents))


class FilterModule:
    def filters(self):
        return {
            "dflash_metrics_file_sd": dflash_metrics_file_sd,
            "dflash_metrics_release_labels": dflash_metrics_release_labels,
            "dflash_metrics_alert_errors": dflash_metrics_alert_errors,
            "dflash_metrics_alert_rows": dflash_metrics_alert_rows,
            "dflash_metrics_figure_sources": dflash_metrics_figure_sources,
            "dflash_metrics_record_figures": dflash_metrics_record_figures,
            "dflash_metrics_merge_figures": dflash_metrics_merge_figures,
            "dflash_metrics_release_ids": dflash_metrics_release_ids,
        }
