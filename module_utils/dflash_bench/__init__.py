"""dflash_bench: the benchmark stage (roles/dflash_bench, playbooks/bench.yml, library/dflash_bench_*.py).

- ``matrix``: the configurations to run (algorithm x budget x top-k x backend x TP), checked
- ``flags``: a configuration's server command line from the release's own flags
- ``plan``: cells placed on free GPUs and ports, in waves, with their env files
- ``workloads``: the seeds' prompts, a fixed-length random set, an agentic multi-turn session
- ``client``: the load generator (concurrency levels, per-request records)
- ``stats``: percentiles, summaries, Prometheus text
- ``results``: the raw records of a run read back, compared with another run
- ``report``, ``markdown``, ``latex``, ``charts``: the report (report.md, report.tex/.pdf, PNG charts)

Pure logic, no Ansible import.
"""
