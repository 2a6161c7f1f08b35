"""dflash_fingerprint: the fingerprint stage (roles/dflash_fingerprint, library/dflash_fingerprint.py).

What a GPU host is (GPUs, driver, CUDA, toolkits, torch, OS) from the outputs of nvidia-smi, nvcc,
/proc and a torch probe, and whether the requested layers and GPUs can work on it. Pure logic, no Ansible
import; ``collect`` runs the tools (on the host or the controller), everything else reads text.

- ``tables``: reference tables (minimum drivers, SM -> CUDA, names -> SM, nvidia-smi fields)
- ``values``: small value readers (versions, placeholders, bus ids, SM and arch)
- ``smi_errors``: nvidia-smi's failure texts and unreachable GPUs
- ``parse``: the parsers (query CSV, apps CSV, -q -x XML, the table, /proc, nvcc, os-release, glibc, torch)
- ``merge``: one fingerprint from every source, with where each field came from
- ``collect``: running the tools, capture folders (write, replay)
- ``gate``: requested GPUs and the layers' CUDA against the fingerprint
- ``report``: the verdict of a host and the fleet report
- ``cli``: ``scripts/fingerprint.py --capture-dir DIR | --replay-dir DIR``
"""
