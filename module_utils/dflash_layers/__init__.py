"""dflash_layers: the venv layers stage (roles/dflash_layers, library/dflash_layers.py, dflash_probe.py,
dflash_wheelhouse.py). Pure logic, no Ansible import; uv runs through an injected runner.

- ``build``: layer specs checked, content addressing, building with uv (in a temporary sibling, renamed), prune
- ``overlay``: the computed overlay (a layer's closure less what its parent provides); uv's options (``UV_OPTIONS``)
- ``wheelhouse``: the controller's offline wheelhouse (each layer resolved once, locked, downloaded)
- ``wheels``: wheel filename tags, the tags a host accepts, sha256
- ``pep440``, ``pep508``: versions, specifiers, requirements and markers (hosts may lack ``packaging``)
- ``consistency``: every requirement of every distribution of the layered environment met (``pip check``-like)
- ``probe``: the import/ABI probe of a layer's interpreter (torch, sgl_kernel, flashinfer, ..., sglang)

Add a layer field for uv: a row of ``overlay.UV_OPTIONS`` (CONTRIBUTING.md, "Where to change what").
"""
