"""dflash_service: the service backends, one interface over systemd and the minimal runner of hosts without
systemd (library/dflash_service.py; the activation, the wait, the router and the diagnosis use it).
No Ansible import: commands run through an injected ``run(argv) -> (rc, stdout, stderr)``.

- ``runner``: rendered units run without systemd (EnvironmentFile=, Environment=, ExecStart= expanded as systemd
  does; own session, log file, pidfile); which unit a process runs in (cgroup, or the runner's process group)
"""
