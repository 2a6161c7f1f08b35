"""dflash_status: what runs where, whether it is healthy, whether speculation still pays, what drifted since the
deploy (playbooks/status.yml, roles/dflash_status, library/dflash_status.py); and the guard that moves an
instance whose acceptance collapsed to its fallback (playbooks/guard.yml, scripts/guard_alert.py).

Read-only everywhere. On the host (the module): ``collect`` (the release, units, health, /metrics text, figures),
``drift`` (unit files, env files, tree against the release), ``host`` (the fingerprint now against the release's),
``disk`` (layers, trees, releases, models). On the controller (filters, the alert script): ``figures`` (the
/metrics text read with prometheus_client), ``report`` (verdicts, the table, the JSON), ``guard`` (the fallback
and why), ``alerts`` (firing alerts from Alertmanager's webhook or Prometheus's API -> guard commands). No Ansible
import.
"""
