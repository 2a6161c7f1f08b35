"""The boot guard as roles/dflash_instances/tasks/guard.yml installs it: journal.py and the systemd backend under
<prefix>/libexec/guard/ansible/module_utils/, run by the host's python3 without Ansible (python -S: no site-packages,
so no ansible-core to import)."""

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
GUARD_TASKS = yaml.safe_load((ROOT / "roles" / "dflash_instances" / "tasks" / "guard.yml").read_text())


def _loop(name_start):
    return next(t["loop"] for t in GUARD_TASKS if t["name"].startswith(name_start))


def install_guard(libexec: Path) -> Path:
    """What guard.yml's tasks install, done here with the same lists."""
    guard = libexec / "guard"
    for d in _loop("Create the boot guard's directories"):
        (guard / d).mkdir(parents=True, exist_ok=True)
    for d in _loop("Install the boot guard's package files"):
        (guard / d / "__init__.py").write_text("")
    for f in _loop("Install the boot guard's code"):
        shutil.copy(ROOT / "module_utils" / f, guard / "ansible" / "module_utils" / f)
    shutil.copy(ROOT / "roles" / "dflash_instances" / "files" / "dflash-guard.py", guard / "dflash-guard")
    return guard / "dflash-guard"


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
    for f in _loop("Install the boot guard's code"):
        text = (ROOT / "module_utils" / f).read_text()
        others = [ln for ln in text.splitlines() if ln.startswith(("from ansible", "import ansible"))
                  and not any(ln.startswith(f"from ansible.module_utils.{g[:-3].replace('/', '.')} import")
                              for g in _loop("Install the boot guard's code"))]
        assert others == [], (f, others)
