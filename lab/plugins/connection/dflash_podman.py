"""Lab only: containers.podman's podman connection with pipelining (a module goes to the container on
podman exec's stdin) and the container's file system mounted only when a file is copied.

Without it every module task is six podman calls (mount, `echo ~`, mkdir, chmod, python, rm); with it,
one `podman exec --interactive` (tasks that copy files, async tasks and `raw` run as before). The lab's
inventories and Molecule scenarios use it (`ansible_connection: dflash_podman`; ansible.cfg
connection_plugins), real hosts never do.
"""

from __future__ import annotations

import shlex

DOCUMENTATION = """
name: dflash_podman
short_description: The podman connection with pipelining, for the lab's containers
description:
  - C(containers.podman.podman) with pipelining and a lazy mount (lab/plugins/connection/dflash_podman.py).
options:
  remote_addr:
    description: The container's name or ID.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  remote_user:
    description: User that runs the commands inside the container.
    ini:
      - section: defaults
        key: remote_user
    env:
      - name: ANSIBLE_REMOTE_USER
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Extra arguments of the podman command line.
    default: ''
    ini:
      - section: defaults
        key: podman_extra_args
    vars:
      - name: ansible_podman_extra_args
    env:
      - name: ANSIBLE_PODMAN_EXTRA_ARGS
  podman_executable:
    description: The podman executable.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
  pipelining:
    description: Send modules on stdin instead of copying them to a temporary directory first.
    type: boolean
    default: true
    env:
      - name: ANSIBLE_PIPELINING
    vars:
      - name: ansible_pipelining
"""

from ansible.plugins.connection import ConnectionBase
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection


class Connection(PodmanConnection):
    transport = "dflash_podman"
    has_pipelining = True

    def _connect(self):
        # no mount yet: only copying a file needs the container's file system (_mounted)
        ConnectionBase._connect(self)
        self._connected = True
        self._mount_tried = False

    def _mounted(self):
        if not getattr(self, "_mount_tried", False):
            self._mount_tried = True
            PodmanConnection._connect(self)

    def exec_command(self, cmd, in_data=None, sudoable=False):
        if in_data is None:
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        # podman exec forwards stdin only with --interactive
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        if not self._connected:
            self._connect()
        args = ["exec", "--interactive"] + (["--user", self.user] if self.user else [])
        return self._podman(args, shlex.split(cmd), in_data)

    def put_file(self, in_path, out_path):
        self._mounted()
        return super().put_file(in_path, out_path)

    def fetch_file(self, in_path, out_path):
        self._mounted()
        return super().fetch_file(in_path, out_path)
