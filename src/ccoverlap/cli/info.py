"""`ccoverlap info`: what one SM of a GPU offers, and the installed NCCL's CTA footprint."""
from __future__ import annotations

import argparse

from ccoverlap.model.config import InfoConfig
from ccoverlap.model.limits import PRESETS, DeviceLimits, get_device

from ccoverlap.util.options import Outputs, add_options, add_subcommand, from_args
from ccoverlap.util.output import check_outputs, write_json, print_table, print_text
from ccoverlap.gpu import cuda_driver
from ccoverlap.model.nccl import nccl_footprint

FIELDS = [
    ("sm_count", "SMs"), ("compute_capability", "compute capability"), ("warp_size", "warp size"),
    ("max_threads_per_block", "threads/block max"), ("max_threads_per_sm", "threads/SM"),
    ("max_warps_per_sm", "warps/SM"), ("max_blocks_per_sm", "blocks/SM"), ("regs_per_sm", "registers/SM"),
    ("regs_per_block", "registers/block max"), ("reg_alloc_unit", "register unit (per warp)"),
    ("max_regs_per_thread", "registers/thread max"), ("reg_subpartitions", "register sub-partitions"),
    ("smem_per_sm", "shared memory/SM (B)"), ("smem_per_block_optin", "shared memory/block opt-in (B)"),
    ("smem_reserved_per_block", "shared memory reserved/block (B)"), ("smem_alloc_unit", "shared memory unit (B)"),
    ("smem_configs_kb", "shared memory configurations (KB)"),
    ("max_cluster_size", "cluster size max"), ("stream_priority_range", "stream priorities (least, greatest)"),
    ("source", "source"),
]


def register(sub) -> None:
    p = add_subcommand(
        sub, "info", run,
        help="show per-SM hardware limits (live GPU or preset) and the NCCL CTA footprint",
        description="Show the per-SM limits that decide what fits beside a communication kernel. "
        "Without --device it reads the live GPU, or lists every preset when there is none.",
    )
    add_options(p, InfoConfig)
    add_options(p, Outputs)


def _devices(name: str | None) -> list[DeviceLimits]:
    if name:
        return [get_device(name)]
    return [get_device("cuda")] if cuda_driver.driver() else list(PRESETS.values())


def run(args: argparse.Namespace) -> int:
    cfg = from_args(InfoConfig, args)
    check_outputs({"--json": cfg.json}, force=args.force)
    devices = _devices(cfg.device)
    nccl = {}
    if cfg.nccl:  # per device: its arch decides the cluster (4 from sm_90 on) and which kernels cuobjdump reads
        nccl = {d.name: nccl_footprint(arch=d.arch) for d in devices if d.vendor == "nvidia"}
    if cfg.json:
        out = {"devices": [{**d.to_dict(), "max_warps_per_sm": d.max_warps_per_sm} for d in devices]}
        if cfg.nccl:
            out["nccl"] = {name: fp.to_dict() for name, fp in nccl.items()}
        write_json(cfg.json, out, schema=True)
        return 0
    caption = None if cfg.device or len(devices) == 1 else "no CUDA GPU visible: showing the presets"
    print_table(
        "Per-SM limits",
        ["limit"] + [d.name for d in devices],
        [[label] + [getattr(d, key) for d in devices] for key, label in FIELDS],
        caption,
    )
    if nccl:
        library = next(iter(nccl.values())).library
        rows = []
        for k in NCCL_FIELDS:
            sources = {fp.sources.get(k, "") for fp in nccl.values()}
            rows.append([k, *(fp.to_dict()[k] for fp in nccl.values()), " / ".join(sorted(sources))])
        print_table(f"NCCL CTA footprint on each device ({library or 'libnccl not found'})",
                    ["field", *nccl, "source"], rows)
    elif cfg.nccl:
        print_text("no NCCL footprint: none of these devices is an NVIDIA GPU (give RCCL's footprint as a spec)")
    return 0


NCCL_FIELDS = ("threads", "regs", "static_smem", "dynamic_smem", "ctas", "cluster")
