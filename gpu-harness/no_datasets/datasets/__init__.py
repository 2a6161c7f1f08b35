"""NOT the Hugging Face `datasets` package: a stand-in for gpu-harness/bench_matrix.sh's cross-check only.

sglang 0.5.11's `sglang.bench_serving` imports `datasets.load_dataset` at import time (for its MMMU dataset),
and inventory/gpu's overlay leaves `datasets` out on purpose (layers.yml says why). The cross-check uses the
`random-ids` dataset, which never calls it; any call fails loudly.
"""


def load_dataset(*args, **kwargs):
    raise RuntimeError("gpu-harness/no_datasets: the real `datasets` package is not installed in this venv "
                       "(inventory/gpu excludes it); only bench_serving's random-ids dataset can run")
