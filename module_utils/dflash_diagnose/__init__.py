"""dflash_diagnose: why an SGLang (or vLLM / PyTorch) server failed, from its log (library/dflash_diagnose.py; the
release stage's wait and smoke test call it on the host). Pure functions, no Ansible import.

``engine.diagnose_text(text)`` / ``engine.diagnose_file(path)`` return ``{cause, summary, remedy, evidence, ...}``
where cause is one of ``rules.CAUSES``.

- ``rules``: the causes and the rule table (data: pattern, cause, priority, summary and remedy templates),
  with the pre-filter's keywords; ``rules_startup``: the start-up rows (options, hybrid targets, graph capture)
- ``rule``: what one row is
- ``scan``: the log read, normalised and split into starts; matching lines against the table
- ``facts``: facts from the whole log (SM, GPU, versions, server args) that fill the templates
- ``fill``: the templates filled, evidence lines chosen
- ``unknown``: a verdict for a failure no rule knows (the first fatal error, a kill, a traceback)
- ``engine``: the verdict

Add a cause: a row in ``rules.py`` (its keyword in ``RULE_KEYWORDS`` when the pattern's words are new), the cause
in ``CAUSES``, a real log under ``tests/fixtures/logs/<cause>/`` listed in its ``index.yml``.
"""
