"""Reference tables of the fingerprint stage: nvidia-smi fields, minimum drivers per CUDA, SM -> CUDA, GPU names -> SM."""

from __future__ import annotations

from ansible.module_utils.dflash_fingerprint.topo import TOPO_FILES

QUERY_FIELDS = "index,name,uuid,pci.bus_id,compute_cap,driver_version,memory.total,memory.used"


QUERY_FIELDS_OLD = "index,name,uuid,pci.bus_id,driver_version,memory.total,memory.used"


APPS_FIELDS = "gpu_uuid,pid,process_name,used_memory"


FILES = (
    "nvidia-smi.txt", "nvidia-smi-query.csv", "nvidia-smi-apps.csv", "nvidia-smi-q.xml",
    "proc-driver-nvidia-version.txt", "nvcc-version.txt", "torch.json", "os-release",
    "glibc-version.txt", "cuda-toolkits.json", "capture-meta.json",
) + tuple(TOPO_FILES)


# NVIDIA, "CUDA Toolkit and Corresponding Driver Versions" (CUDA Toolkit release notes, Table 3,
# https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html): minimum Linux x86_64
# driver of each CUDA minor release (GA).
MIN_DRIVER = {
    "13.2": "595.45.04", "13.1": "590.44.01", "13.0": "580.65.06",
    "12.9": "575.51.03", "12.8": "570.26", "12.6": "560.28.03", "12.5": "555.42.02",
    "12.4": "550.54.14", "12.3": "545.23.06", "12.2": "535.54.03", "12.1": "530.30.02",
    "12.0": "525.60.13", "11.8": "520.61.05", "11.7": "515.43.04", "11.6": "510.39.01",
    "11.5": "495.29.05", "11.4": "470.42.01", "11.3": "465.19.01", "11.2": "460.27.03",
    "11.1": "455.23", "11.0": "450.36.06", "10.2": "440.33", "10.1": "418.39", "10.0": "410.48",
    "9.2": "396.26", "9.1": "390.46", "9.0": "384.81", "8.0": "375.26",
}


# Minor version compatibility (NVIDIA CUDA Compatibility guide): a binary built with any 12.x
# runs on a driver >= the 12.0 GA floor, 13.x on >= 580, 11.x on >= 450.80.02 (with limits:
# no PTX JIT of newer PTX). Only used when the gate is told to allow it.
MINOR_COMPAT_DRIVER = {"11": "450.80.02", "12": "525.60.13", "13": "580.65.06"}


# Lowest CUDA release that can build for / run on an SM (native SASS), and the highest CUDA
# major that still supports it (CUDA 13.0 dropped Maxwell, Pascal and Volta).
SM_MIN_CUDA = {
    "3.5": "5.0", "3.7": "6.5", "5.0": "6.0", "5.2": "6.5", "5.3": "6.5", "6.0": "8.0",
    "6.1": "8.0", "6.2": "8.0", "7.0": "9.0", "7.2": "9.2", "7.5": "10.0", "8.0": "11.0",
    "8.6": "11.1", "8.7": "11.4", "8.9": "11.8", "9.0": "11.8", "10.0": "12.8", "10.1": "12.8",
    "10.3": "12.9", "11.0": "13.0", "12.0": "12.8", "12.1": "12.9",
}


SM_MAX_CUDA_MAJOR = {"3": 11, "5": 12, "6": 12, "7.0": 12, "7.2": 12}


ARCH_BY_SM = {
    "3": "kepler", "5": "maxwell", "6": "pascal", "7.0": "volta", "7.2": "volta", "7.5": "turing",
    "8.0": "ampere", "8.6": "ampere", "8.7": "ampere", "8.9": "ada", "9": "hopper",
    "10": "blackwell", "11": "blackwell", "12": "blackwell",
}


ARCH_NAMES = {  # nvidia-smi -q product_architecture -> family
    "kepler": "kepler", "maxwell": "maxwell", "pascal": "pascal", "volta": "volta",
    "turing": "turing", "ampere": "ampere", "ada lovelace": "ada", "ada": "ada",
    "hopper": "hopper", "blackwell": "blackwell",
}


# GPU name -> SM, for drivers too old for the compute_cap query (< 510) and for sources that
# have no SM (the -q XML, the plain table). Patterns also match the plain table's truncated
# names ("NVIDIA RTX PRO 6000 Blac...", "Tesla V100-SXM2...", "NVIDIA GeForce RTX 5090 ...").
# First match wins; the more specific patterns come first.
NAME_SM = [
    (r"Quadro RTX|TITAN RTX", "7.5"),  # before the GeForce number patterns ("Quadro RTX 5000" is Turing)
    (r"RTX \d+ (?:SFF )?Ada", "8.9"),  # before "RTX 50x0" ("RTX 5000 Ada Generation" is Ada)
    (r"\bGB10\b", "12.1"),
    (r"RTX PRO \d+", "12.0"),
    (r"RTX 50\d0", "12.0"),
    (r"\bG?B300\b", "10.3"),
    (r"\bG?B[12]00\b", "10.0"),
    (r"\bThor\b", "11.0"),
    (r"\bG?H(100|200|800|20)\b|\bH20[ -]|\bGH200\b", "9.0"),
    (r"RTX \d+ Ada|RTX \d+ SFF Ada|\bL40S?\b|\bL4\b|\bL20\b|\bL2\b|RTX 40\d0|RTX 2000E? Ada", "8.9"),
    (r"\bA100\b|\bA800\b|\bA30\b|A100-|A800-|\bA100X\b", "8.0"),
    (r"\bOrin\b", "8.7"),
    (r"RTX A\d+|\bA40\b|\bA10G?\b|\bA16\b|\bA2\b|\bA10M\b|RTX 30\d0|\bA6000\b", "8.6"),
    (r"Quadro RTX|TITAN RTX|RTX 20\d0|GTX 16\d0|\bT4\b|\bT4G\b|\bT1000\b|\bT400\b|\bT600\b|\bT[1-2]200\b", "7.5"),
    (r"V100|TITAN V\b|Quadro GV100", "7.0"),
    (r"P100", "6.0"),
    (r"\bP40\b|\bP4\b|\bP6\b|GTX 10\d0|TITAN Xp|TITAN X \(Pascal\)|Quadro P\d+", "6.1"),
    (r"\bM60\b|\bM40\b|GTX 9\d0|TITAN X\b|Quadro M\d+", "5.2"),
    (r"\bK80\b", "3.7"),
    (r"\bK40\b|\bK20X?\b", "3.5"),
]


# Driver branch -> highest CUDA it supports (used when nvidia-smi prints "CUDA Version: N/A").
BRANCH_CUDA = [
    (595, "13.2"), (590, "13.1"), (580, "13.0"), (575, "12.9"), (570, "12.8"), (560, "12.6"),
    (555, "12.5"), (550, "12.4"), (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"),
    (520, "11.8"), (515, "11.7"), (510, "11.6"), (495, "11.5"), (470, "11.4"), (465, "11.3"),
    (460, "11.2"), (455, "11.1"), (450, "11.0"), (440, "10.2"), (418, "10.1"), (410, "10.0"),
    # drivers before 410 print no "CUDA Version" in the table header at all: the branch is all there is
    (396, "9.2"), (390, "9.1"), (384, "9.0"), (375, "8.0"), (367, "8.0"),
]


BUSY_THRESHOLD_MIB = 1024


# Memory that means another CUDA context exists (a bare context takes ~300-500 MiB): on an exclusive-process
# GPU that context blocks ours.
EXCLUSIVE_CONTEXT_MIB = 256


# Where nvidia-smi lives when it is not on PATH (containers put it in /usr/local/nvidia/bin).
SMI_FALLBACKS = ("/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi", "/usr/local/bin/nvidia-smi",
                 "/usr/lib/wsl/lib/nvidia-smi")
