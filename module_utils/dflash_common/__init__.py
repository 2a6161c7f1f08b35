"""dflash_common: what several stages truly share. Pure functions, no Ansible import.

- ``argv``: the one reader of a server command line (a flag's value, whether a flag is given)
- ``secrets``: API keys and credential variables (env files only; digests salted; masking)
- ``disk``: free space, and OS errors (a full disk above all) said in words
- ``trash``: removing a stage's directories without leaving a half-deleted one under a name that counts
- ``jinja``: what the filter plugins share (plain Python values out of Ansible's lazy containers)
"""
