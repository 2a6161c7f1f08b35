"""Per-GPU CUDA probe: each requested GPU opened in its own process that sees only it, a GPU that
CUDA cannot use refused with its index and the CUDA error.

The processes are real; the torch they import is a small fake package written here (this machine
has no GPU) that behaves like torch on the seeds' CT129: GPU 1 listed by nvidia-smi but CUDA says
"CUDA-capable device(s) is/are busy or unavailable" (cudaErrorDevicesUnavailable). The real run is
gpu-harness/e2e.sh's probe stage on the H200."""

from __future__ import annotations

import sys
import textwrap

from ansible.module_utils.dflash_layers import probe as p

FAKE_TORCH = textwrap.dedent('''
    import os
    __version__ = "2.11.0+cu130"
    class version:
        cuda = "13.0"
    class _T:
        def __init__(self, v): self.v = v
        def __mul__(self, k): return _T([x * k for x in self.v])
        def sum(self): return _T(sum(self.v))
        def item(self): return self.v
    def arange(n, device=None, dtype=None): return _T(list(range(n)))
    float32 = "float32"
    class cuda:
        @staticmethod
        def init():
            idx = os.environ.get("CUDA_VISIBLE_DEVICES")
            if os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
                raise RuntimeError("CUDA_DEVICE_ORDER is not PCI_BUS_ID")
            if idx == "1":
                raise RuntimeError("CUDA error: CUDA-capable device(s) is/are busy or unavailable\\n"
                                   "CUDA kernel errors might be asynchronously reported at some other API call")
            if idx == "3":
                raise RuntimeError("CUDA error: out of memory")
        @staticmethod
        def get_device_properties(i):
            class P: name = "NVIDIA H200"; major = 9; minor = 0
            return P
        @staticmethod
        def synchronize(): pass
        @staticmethod
        def mem_get_info(i): return (140 * 2**30, 143 * 2**30)
''')


def test_each_gpu_in_its_own_process_and_the_unusable_one_refused(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    res = p.run_gpu_probe(sys.executable, [2, 1, 0, 3, 1], pythonpath=[str(tmp_path)], timeout=30)
    assert list(res) == ["0", "1", "2", "3"]
    assert res["0"]["ok"] and res["0"]["visible"] == "0" and res["0"]["checksum"] == 1047552.0
    assert res["2"]["visible"] == "2" and res["2"]["name"] == "NVIDIA H200"
    assert not res["1"]["ok"] and res["1"]["cuda_error"] == "cudaErrorDevicesUnavailable"
    problems, warnings = p.gpu_gate(res, host="ct129")
    assert len(problems) == 1
    assert problems[0].startswith(
        "ct129: GPU 1: nvidia-smi lists it but CUDA cannot use it: RuntimeError: CUDA error: CUDA-capable "
        "device(s) is/are busy or unavailable (cudaErrorDevicesUnavailable)")
    assert "nvidia-smi -r -i 1" in problems[0]
    assert warnings == [("ct129: GPU 3: CUDA opened it but could not allocate (RuntimeError: CUDA error: out of "
                        "memory (cudaErrorMemoryAllocation)): its memory is in use")]
    lines = p.gpu_summary(res)
    assert lines[0].startswith("GPU 0: ok (NVIDIA H200, SM 9.0, 143360 of 146432 MiB free")
    assert lines[1].startswith("GPU 1: FAILED RuntimeError: CUDA error: CUDA-capable device(s)")

