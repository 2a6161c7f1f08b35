#!/usr/bin/env python3
"""Write the lab capture folders lab/captures/ct129/ and lab/captures/ct200/.

The lab hosts are podman containers; their stand-in nvidia-smi / nvcc replay these folders
(docs/design.md, "Lab contract"). The two hosts are the machines of the seed deployment:

* ct129: 2x NVIDIA RTX A6000 (SM 8.6, 49140 MiB, ECC off), idle, driver 580.82.09 (CUDA 13.0),
  nvcc 13.0, base venv torch 2.11.0+cu130.
* ct200 (hostname dflash-train): 8x NVIDIA RTX PRO 6000 Blackwell Server Edition (SM 12.0,
  97887 MiB), driver 580.95.05 (CUDA 13.0), nvcc 12.8 (why FlashInfer's JIT refused SM 12.0:
  SM 12.x needs CUDA >= 12.9), base training venv torch 2.11.0+cu128; GPU0 busy with the foreign
  /root/ddtree_openai_server.py (run by /root/venv/bin/python3), GPUs 1-7 idle.

The files are synthetic (no real capture of these hosts exists) but every line follows the layout
the 580-series tools print; the layouts were checked against real outputs quoted in public
repositories (see SOURCE.md). Re-run after editing: ``python3 lab/captures/make_captures.py``.
"""

from __future__ import annotations

import json
import pathlib
import uuid

HERE = pathlib.Path(__file__).resolve().parent
WIDTH = 89  # inner width of the nvidia-smi table


def _uuid(host: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host}.gpu{index}.dflash-lab"))


def _cell_name(name: str) -> str:
    return name if len(name) <= 27 else name[:24] + "..."


def _proc_name(name: str) -> str:
    return name if len(name) <= 32 else "..." + name[-29:]


def table(h: dict) -> str:
    bar = "+" + "-" * WIDTH + "+"
    grid = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    out = [h["date"] + "       ", bar]
    out.append("| NVIDIA-SMI {:<22} Driver Version: {:<15}CUDA Version: {:<9}|".format(
        h["driver"], h["driver"], h["cuda"]))
    out += [
        grid,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
    ]
    for g in h["gpus"]:
        out.append("|{:>4}  {:<31}{:<3} |   {} {:>3} | {:>20} |".format(
            g["index"], _cell_name(h["name"]), "On", g["bus"], "Off", h["ecc_cell"]))
        out.append("|{:>4}   {:>3}    {:<2}{:>16} / {:>5} |{:>11} / {:>9} |{:>8}{:>13} |".format(
            h["fan"], f'{g["temp"]}C', g["perf"], f'{g["power"]}W', f'{h["cap"]}W',
            f'{g["used"]}MiB', f'{h["total"]}MiB', f'{g["util"]}%', "Default"))
        out.append("|" + " " * 41 + "|" + " " * 24 + "|{:>21} |".format("N/A"))
        out.append(grid)
    out += [
        "",
        bar,
        "| Processes:" + " " * (WIDTH - 11) + "|",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * WIDTH + "|",
    ]
    procs = [(g["index"], p) for g in h["gpus"] for p in g["procs"]]
    if not procs:
        out.append("|  No running processes found" + " " * (WIDTH - 28) + "|")
    for index, p in procs:
        out.append("|{:>5}   N/A  N/A{:>16}{:>7}   {:<32}{:>14} |".format(
            index, p["pid"], "C", _proc_name(p["name"]), f'{p["mib"]}MiB'))
    out.append(bar)
    return "\n".join(out) + "\n"


def query_csv(h: dict) -> str:
    return "".join(
        f'{g["index"]}, {h["name"]}, {g["uuid"]}, {g["bus"]}, {h["sm"]}, {h["driver"]}, '
        f'{h["total"]}, {g["used"]}\n' for g in h["gpus"])


def apps_csv(h: dict) -> str:
    return "".join(f'{g["uuid"]}, {p["pid"]}, {p["name"]}, {p["mib"]}\n'
                   for g in h["gpus"] for p in g["procs"])


def xml(h: dict) -> str:
    t = "\t"
    out = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">',
           "<nvidia_smi_log>",
           f"{t}<timestamp>{h['date']}</timestamp>",
           f"{t}<driver_version>{h['driver']}</driver_version>",
           f"{t}<cuda_version>{h['cuda']}</cuda_version>",
           f"{t}<attached_gpus>{len(h['gpus'])}</attached_gpus>"]
    for g in h["gpus"]:
        bus = g["bus"]
        dom, b, dev = bus.split(":")[0], bus.split(":")[1], bus.split(":")[2].split(".")[0]
        free = h["total"] - h["reserved"] - g["used"]
        e = [
            f"<product_name>{h['name']}</product_name>",
            f"<product_brand>{h['brand']}</product_brand>",
            f"<product_architecture>{h['arch']}</product_architecture>",
            "<display_mode>Requested functionality has been deprecated</display_mode>",
            "<display_attached>No</display_attached>",
            "<display_active>Disabled</display_active>",
            "<persistence_mode>Enabled</persistence_mode>",
            "<addressing_mode>None</addressing_mode>",
            "<mig_mode>", "\t<current_mig>N/A</current_mig>", "\t<pending_mig>N/A</pending_mig>", "</mig_mode>",
            "<mig_devices>", "\tNone", "</mig_devices>",
            "<accounting_mode>Disabled</accounting_mode>",
            "<accounting_mode_buffer_size>4000</accounting_mode_buffer_size>",
            "<driver_model>", "\t<current_dm>N/A</current_dm>", "\t<pending_dm>N/A</pending_dm>",
            "</driver_model>",
            f"<serial>{g['serial']}</serial>",
            f"<uuid>{g['uuid']}</uuid>",
            f"<pdi>0x{int(g['uuid'][4:].replace('-', ''), 16) % (1 << 64):016x}</pdi>",
            f"<minor_number>{g['index']}</minor_number>",
            f"<vbios_version>{h['vbios']}</vbios_version>",
            "<multigpu_board>No</multigpu_board>",
            f"<board_id>0x{int(b, 16) << 8:x}</board_id>",
            f"<board_part_number>{h['board_part']}</board_part_number>",
            f"<gpu_part_number>{h['gpu_part']}</gpu_part_number>",
            "<gpu_fru_part_number>N/A</gpu_fru_part_number>",
            "<gpu_operation_mode>", "\t<current_gom>N/A</current_gom>", "\t<pending_gom>N/A</pending_gom>",
            "</gpu_operation_mode>",
            "<c2c_mode>N/A</c2c_mode>",
            "<gpu_virtualization_mode>", "\t<virtualization_mode>None</virtualization_mode>",
            "\t<host_vgpu_mode>N/A</host_vgpu_mode>", "\t<vgpu_heterogeneous_mode>N/A</vgpu_heterogeneous_mode>",
            "</gpu_virtualization_mode>",
            "<gpu_recovery_action>None</gpu_recovery_action>",
            f"<gsp_firmware_version>{h['driver']}</gsp_firmware_version>",
            "<pci>",
            f"\t<pci_bus>{b}</pci_bus>",
            f"\t<pci_device>{dev}</pci_device>",
            f"\t<pci_domain>{dom[-4:]}</pci_domain>",
            "\t<pci_base_class>3</pci_base_class>",
            f"\t<pci_sub_class>{h['pci_sub_class']}</pci_sub_class>",
            f"\t<pci_device_id>{h['pci_device_id']}</pci_device_id>",
            f"\t<pci_bus_id>{bus}</pci_bus_id>",
            f"\t<pci_sub_system_id>{h['pci_sub_system_id']}</pci_sub_system_id>",
            "\t<pci_gpu_link_info>", "\t\t<pcie_gen>",
            f"\t\t\t<max_link_gen>{h['pcie_gen']}</max_link_gen>",
            "\t\t\t<current_link_gen>1</current_link_gen>",
            "\t\t\t<device_current_link_gen>1</device_current_link_gen>",
            f"\t\t\t<max_device_link_gen>{h['pcie_gen']}</max_device_link_gen>",
            f"\t\t\t<max_host_link_gen>{h['pcie_gen']}</max_host_link_gen>",
            "\t\t</pcie_gen>", "\t\t<link_widths>", "\t\t\t<max_link_width>16x</max_link_width>",
            "\t\t\t<current_link_width>16x</current_link_width>", "\t\t</link_widths>",
            "\t</pci_gpu_link_info>",
            "\t<pci_bridge_chip>", "\t\t<bridge_chip_type>N/A</bridge_chip_type>",
            "\t\t<bridge_chip_fw>N/A</bridge_chip_fw>", "\t</pci_bridge_chip>",
            "\t<replay_counter>0</replay_counter>", "\t<replay_rollover_counter>0</replay_rollover_counter>",
            "\t<tx_util>0 KB/s</tx_util>", "\t<rx_util>0 KB/s</rx_util>",
            "\t<atomic_caps_outbound>N/A</atomic_caps_outbound>",
            "\t<atomic_caps_inbound>N/A</atomic_caps_inbound>",
            "</pci>",
            f"<fan_speed>{h['fan'].replace('%', ' %')}</fan_speed>",
            f"<performance_state>{g['perf']}</performance_state>",
            "<fb_memory_usage>",
            f"\t<total>{h['total']} MiB</total>",
            f"\t<reserved>{h['reserved']} MiB</reserved>",
            f"\t<used>{g['used']} MiB</used>",
            f"\t<free>{free} MiB</free>",
            "</fb_memory_usage>",
            "<bar1_memory_usage>", f"\t<total>{h['bar1']} MiB</total>", "\t<used>1 MiB</used>",
            f"\t<free>{h['bar1'] - 1} MiB</free>", "</bar1_memory_usage>",
            "<cc_protected_memory_usage>", "\t<total>0 MiB</total>", "\t<used>0 MiB</used>",
            "\t<free>0 MiB</free>", "</cc_protected_memory_usage>",
            "<compute_mode>Default</compute_mode>",
            "<utilization>", f"\t<gpu_util>{g['util']} %</gpu_util>", "\t<memory_util>0 %</memory_util>",
            "\t<encoder_util>0 %</encoder_util>", "\t<decoder_util>0 %</decoder_util>",
            "\t<jpeg_util>0 %</jpeg_util>", "\t<ofa_util>0 %</ofa_util>", "</utilization>",
            "<ecc_mode>", f"\t<current_ecc>{h['ecc']}</current_ecc>", f"\t<pending_ecc>{h['ecc']}</pending_ecc>",
            "</ecc_mode>",
            "<retired_pages>", "\t<pending_blacklist>N/A</pending_blacklist>",
            "\t<pending_retirement>N/A</pending_retirement>", "</retired_pages>",
            "<remapped_rows>", "\t<remapped_row_corr>0</remapped_row_corr>", "\t<remapped_row_unc>0</remapped_row_unc>",
            "\t<remapped_row_pending>No</remapped_row_pending>", "\t<remapped_row_failure>No</remapped_row_failure>",
            "</remapped_rows>",
            "<temperature>", f"\t<gpu_temp>{g['temp']} C</gpu_temp>",
            f"\t<gpu_temp_max_threshold>{h['tmax']} C</gpu_temp_max_threshold>",
            f"\t<gpu_temp_slow_threshold>{h['tmax'] - 3} C</gpu_temp_slow_threshold>",
            "\t<gpu_temp_max_gpu_threshold>N/A</gpu_temp_max_gpu_threshold>",
            "\t<gpu_target_temperature>N/A</gpu_target_temperature>",
            "\t<memory_temp>N/A</memory_temp>",
            "\t<gpu_temp_max_mem_threshold>N/A</gpu_temp_max_mem_threshold>",
            "</temperature>",
            "<gpu_power_readings>", f"\t<power_state>{g['perf']}</power_state>",
            f"\t<average_power_draw>{g['power']}.00 W</average_power_draw>",
            f"\t<instant_power_draw>{g['power']}.41 W</instant_power_draw>",
            f"\t<current_power_limit>{h['cap']}.00 W</current_power_limit>",
            f"\t<requested_power_limit>{h['cap']}.00 W</requested_power_limit>",
            f"\t<default_power_limit>{h['cap']}.00 W</default_power_limit>",
            f"\t<min_power_limit>{h['cap_min']}.00 W</min_power_limit>",
            f"\t<max_power_limit>{h['cap']}.00 W</max_power_limit>",
            "</gpu_power_readings>",
            "<processes>",
        ]
        if not g["procs"]:
            e.pop()
            e.append("<processes>")
        for p in g["procs"]:
            e += ["\t<process_info>", "\t\t<gpu_instance_id>N/A</gpu_instance_id>",
                  "\t\t<compute_instance_id>N/A</compute_instance_id>",
                  f"\t\t<pid>{p['pid']}</pid>", "\t\t<type>C</type>",
                  f"\t\t<process_name>{p['name']}</process_name>",
                  f"\t\t<used_memory>{p['mib']} MiB</used_memory>", "\t</process_info>"]
        e += ["</processes>", "<accounted_processes>", "</accounted_processes>",
              "<capabilities>", "\t<egm>disabled</egm>", "</capabilities>"]
        out.append(f'{t}<gpu id="{bus}">')
        out += [t * 2 + line for line in e]
        out.append(f"{t}</gpu>")
    out.append("</nvidia_smi_log>")
    return "\n".join(out) + "\n"


UBUNTU_2404 = """PRETTY_NAME="Ubuntu 24.04.3 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.3 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=noble
LOGO=ubuntu-logo
"""

NVCC = {
    "13.0": ("Built on Wed_Aug_20_01:58:59_PM_PDT_2025\nCuda compilation tools, release 13.0, V13.0.88\n"
             "Build cuda_13.0.r13.0/compiler.36424714_0\n"),
    "12.8": ("Built on Fri_Feb_21_20:23:50_PST_2025\nCuda compilation tools, release 12.8, V12.8.93\n"
             "Build cuda_12.8.r12.8/compiler.35583870_0\n"),
}

PROC_VERSION = {
    "580.82.09": "Fri Aug 29 17:17:24 UTC 2025",
    "580.95.05": "Tue Sep 23 09:55:41 UTC 2025",
}

TOPO_LEGEND = (
    "Legend:\n\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n")
P2P_LEGEND = (
    "Legend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
    "  GNS  = GPU not supported\n  TNS  = Topology not supported\n  NS   = Not supported\n"
    "  DR   = Disabled by regkey\n  U    = Unknown\n")


def topo_matrix(h: dict) -> str:
    """`nvidia-smi topo -m` in the 580 layout (tabs, NUMA columns; tests/fixtures/topo/ has real ones):
    GPUs on the same socket are NODE, across sockets SYS."""
    gpus = h["gpus"]
    head = "\t" + "\t".join(f"GPU{g['index']}" for g in gpus) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    rows = []
    for g in gpus:
        cells = [" X " if o is g else ("NODE" if o["numa"] == g["numa"] else "SYS") for o in gpus]
        rows.append(f"GPU{g['index']}\t" + "\t".join(cells) + f"\t{h['cpus'][g['numa']]}\t{g['numa']}\t\tN/A\n")
    return head + "".join(rows) + "\n" + TOPO_LEGEND


def p2p_matrix(h: dict) -> str:
    """`nvidia-smi topo -p2p r`: OK on one socket, CNS across sockets."""
    gpus = h["gpus"]
    head = " \t" + "\t".join(f"GPU{g['index']}" for g in gpus) + "\t\n"
    rows = [f" GPU{g['index']}\t" + "\t".join("X" if o is g else ("OK" if o["numa"] == g["numa"] else "CNS")
                                               for o in gpus) + "\t\n" for g in gpus]
    return head + "".join(rows) + "\n" + P2P_LEGEND


HOSTS = {
    "ct129": {
        "date": "Mon Nov 30 04:58:12 2026", "driver": "580.82.09", "cuda": "13.0", "name": "NVIDIA RTX A6000",
        "brand": "NVIDIA RTX", "arch": "Ampere", "sm": "8.6", "total": 49140, "reserved": 486, "ecc": "Disabled",
        "ecc_cell": "Off", "fan": "30%", "cap": 300, "cap_min": 100, "tmax": 98, "bar1": 65536, "vbios": "94.02.5C.00.01",
        "board_part": "900-5G133-2200-000", "gpu_part": "2230-880-A1", "pci_device_id": "223010DE",
        "pci_sub_system_id": "145910DE", "pci_sub_class": 0, "pcie_gen": 4, "nvcc": "13.0",
        "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "available": True, "device_count": 2,
               "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120"]},
        "toolkits": [{"path": "/usr/local/cuda-13.0", "version": "13.0"}], "glibc": "2.39",
        "cpus": {0: "0-15,32-47", 1: "16-31,48-63"},
        "gpus": [
            {"index": 0, "numa": 0, "bus": "00000000:01:00.0", "temp": 33, "perf": "P8", "power": 21, "used": 1, "util": 0, "procs": []},
            {"index": 1, "numa": 1, "bus": "00000000:81:00.0", "temp": 30, "perf": "P8", "power": 17, "used": 1, "util": 0, "procs": []},
        ]},
    "ct200": {
        "date": "Mon Nov 30 04:58:31 2026", "driver": "580.95.05", "cuda": "13.0",
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "brand": "NVIDIA RTX", "arch": "Blackwell",
        "sm": "12.0", "total": 97887, "reserved": 653, "ecc": "Enabled", "ecc_cell": "0", "fan": "N/A", "cap": 600,
        "cap_min": 150, "tmax": 95, "bar1": 131072, "vbios": "98.02.52.00.02", "board_part": "900-2G153-0000-000",
        "gpu_part": "2BB5-895-A1", "pci_device_id": "2BB510DE", "pci_sub_system_id": "204E10DE", "pci_sub_class": 2,
        "pcie_gen": 5, "nvcc": "12.8",
        "torch": {"version": "2.11.0+cu128", "cuda": "12.8", "available": True, "device_count": 8,
               "arch_list": ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]},
        "toolkits": [{"path": "/usr/local/cuda-12.8", "version": "12.8"}], "glibc": "2.39",
        "cpus": {0: "0-47,96-143", 1: "48-95,144-191"},
        "gpus": [
            {"index": 0, "numa": 0, "bus": "00000000:18:00.0", "temp": 44, "perf": "P1", "power": 97, "used": 60627, "util": 0,
                 "procs": [{"pid": 2381466, "name": "/root/venv/bin/python3", "mib": 60616}]},
            {"index": 1, "numa": 0, "bus": "00000000:2A:00.0", "temp": 29, "perf": "P8", "power": 31, "used": 0, "util": 0, "procs": []},
            {"index": 2, "numa": 0, "bus": "00000000:3A:00.0", "temp": 30, "perf": "P8", "power": 30, "used": 0, "util": 0, "procs": []},
            {"index": 3, "numa": 0, "bus": "00000000:5D:00.0", "temp": 28, "perf": "P8", "power": 29, "used": 0, "util": 0, "procs": []},
            {"index": 4, "numa": 1, "bus": "00000000:9A:00.0", "temp": 31, "perf": "P8", "power": 32, "used": 0, "util": 0, "procs": []},
            {"index": 5, "numa": 1, "bus": "00000000:AB:00.0", "temp": 29, "perf": "P8", "power": 30, "used": 0, "util": 0, "procs": []},
            {"index": 6, "numa": 1, "bus": "00000000:BA:00.0", "temp": 30, "perf": "P8", "power": 31, "used": 0, "util": 0, "procs": []},
            {"index": 7, "numa": 1, "bus": "00000000:DB:00.0", "temp": 28, "perf": "P8", "power": 29, "used": 0, "util": 0, "procs": []},
        ]},
}


def main() -> None:
    for host, h in HOSTS.items():
        for g in h["gpus"]:
            g["uuid"] = _uuid(host, g["index"])
            g["serial"] = str(1320000000000 + int(uuid.UUID(g["uuid"][4:])) % 10**9)
        d = HERE / host
        d.mkdir(exist_ok=True)
        files = {
            "nvidia-smi.txt": table(h),
            "nvidia-smi-query.csv": query_csv(h),
            "nvidia-smi-apps.csv": apps_csv(h),
            "nvidia-smi-q.xml": xml(h),
            "proc-driver-nvidia-version.txt": (
                f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {h['driver']}  Release Build  "
                f"(dvs-builder@U22-I3-AF03-09-1)  {PROC_VERSION[h['driver']]}\n"
                "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04) \n"),
            "nvcc-version.txt": ("nvcc: NVIDIA (R) Cuda compiler driver\n"
                                 "Copyright (c) 2005-2025 NVIDIA Corporation\n" + NVCC[h["nvcc"]]),
            "torch.json": json.dumps(h["torch"], indent=2) + "\n",
            "os-release": UBUNTU_2404,
            "glibc-version.txt": f"glibc {h['glibc']}\n",
            "nvidia-smi-topo.txt": topo_matrix(h),
            "nvidia-smi-topo-p2p.txt": p2p_matrix(h),
            "cuda-toolkits.json": json.dumps(
                [dict(t, nvcc=t["path"] + "/bin/nvcc") for t in h["toolkits"]], indent=2) + "\n",
        }
        for name, text in files.items():
            (d / name).write_text(text)


if __name__ == "__main__":
    main()
