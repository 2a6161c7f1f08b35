"""Run a play (a list of plays as Python data) on localhost with the repository's ansible.cfg and
this interpreter; the tests that need a real Ansible run use it."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_play(play, tmp_path, timeout=300):
    """-> the finished ansible-playbook process (returncode, stdout, stderr)."""
    pb = pathlib.Path(tmp_path) / "pb.yml"
    pb.write_text(json.dumps(play))
    return subprocess.run([str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(pb)],
                          cwd=ROOT, capture_output=True, text=True, check=False, timeout=timeout)
