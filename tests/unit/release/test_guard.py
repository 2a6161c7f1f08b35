"""The boot guard as the instances stage installs it (roles/dflash_instances/tasks/units.yml, the file list of
module_utils/dflash_instances/host.toolkit_files): journal.py and the systemd backend under
<prefix>/libexec/guard/ansible/module_utils/, run by the host's python3 without Ansible (python -S: no site-packages,
so no ansible-core to import)."""

import grp
import os
import pwd
import subprocess
import sys
from pathlib import Path

from ansible.module_utils.dflash_common.files import install
from ansible.module_utils.dflash_instances.host import GUARD_CODE, toolkit_files

ROOT = Path(__file__).resolve().parents[3]


def install_guard(libexec: Path) -> Path:
    """What the instances stage installs under libexec/guard/ (its file list, the role's sources), put in place by
    the dflash_files logic it runs on the host."""
    me, my_group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    want = toolkit_files(libexec.parent, libexec.parent / "systemd", True, [], [], ROOT / "module_utils", "[Unit]\n")
    files = []
    for f in want["files"]:
        if "/guard/" in f["dest"]:
            src = f.get("src")
            data = (Path(src) if src and Path(src).is_absolute()
                    else ROOT / "roles" / "dflash_instances" / "files" / str(src)).read_bytes() if src else b""
            files.append(dict(f, content=data, owner=me, group=my_group))
    install([dict(d, owner=me, group=my_group) for d in want["directories"] if "/guard" in d["path"]], files)
    return libexec / "guard" / "dflash-guard"


def test_the_installed_guard_runs_without_ansible(tmp_path):
    entry = install_guard(tmp_path / "libexec")
    prefix = tmp_path / "opt"
    prefix.mkdir()
    proc = subprocess.run([sys.executable, "-S", str(entry), "boot-guard", "--prefix", str(prefix)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "dflash-guard: no unfinished activation"
    (prefix / "activation.json").write_text("{not json")
    proc = subprocess.run([sys.executable, "-S", str(entry), "show", "--prefix", str(prefix)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "is not readable JSON" in proc.stderr


def test_the_guard_code_imports_nothing_else_of_the_toolkit():
    """journal.py and systemd.py are all the guard ships: neither may import another file of the toolkit."""
    for f in GUARD_CODE:
        text = (ROOT / "module_utils" / f).read_text()
        others = [ln for ln in text.splitlines() if ln.startswith(("from ansible", "import ansible"))
                  and not any(ln.startswith(f"from ansible.module_utils.{g[:-3].replace('/', '.')} import")
                              for g in GUARD_CODE)]
        assert others == [], (f, others)
