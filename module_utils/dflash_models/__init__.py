"""dflash_models: models and drafts from a source, stored content-addressed on the host (roles/dflash_models,
library/dflash_models.py, action_plugins/dflash_models.py). Pure logic, no Ansible import.

- ``sources``: the model_source / draft_source fields (hub at a pinned commit, archive URL + sha256, controller
  directory), their errors in words, and the instances rewritten to the stored copies
- ``pair``: a draft and its target checked as a pair from their config.json
- ``store``: manifests, digests, the host's store (marker, check, commit); stdlib only
- ``fetch``: the controller side (huggingface_hub, urllib) into the controller's cache
"""
