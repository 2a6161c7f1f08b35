"""dflash_tree: the patched SGLang tree stage (roles/dflash_tree, library/dflash_tree.py). Pure logic, no Ansible import.

A tree is a content-addressed directory ``<trees_dir>/sglang-<version>-<hash12>/`` that holds the
``sglang`` package, extracted from a pinned wheel (a zip, so no pip and no particular host Python is
needed) with a patch series applied, or copied from a user's own checkout (``dflash_tree_src``), plus
``manifest.json`` (what went in) and ``FILES.sha256`` (every file, ``sha256sum -c`` format).

- ``common``: names of the tree's files, errors, hashing
- ``series``: the ``series`` file of a patch folder
- ``diff``: unified diffs applied in Python with exact context and a nearest-first offset search like
  ``patch`` (no fuzz), so hosts need no ``patch`` binary; a failure names the patch, the file and the hunk
- ``wheel``: the pinned wheel as the tree's source, its plan (the series applied in memory)
- ``source``: a user's own checkout as the tree's source
- ``disk``: the tree on the host: built in a temporary sibling and renamed into place, verified, reused

Code here must run on the hosts' system Python (3.8+) as well as on the controller.
"""
