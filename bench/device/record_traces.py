"""Record small real torch.profiler traces of compute overlapping an NCCL all-reduce, per strategy.

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 bench/device/record_traces.py --out DIR

For each strategy, every rank runs a few steps of bf16 matmuls on random data
while an async all-reduce of a large random tensor is in flight, and writes
one trace per rank: DIR/<strategy>/rank{r}_trace.json.gz (the layout
`ccoverlap analyze` reads, and `ccoverlap bench --trace` writes).

The strategies are the lever registry's (ccoverlap/control/levers.py, as the bench runs them), those this
one process can apply between its groups:

  no-overlap  the same work without overlap (all-reduce, then the matmuls): the baseline for
              `ccoverlap analyze DIR --baseline DIR/no-overlap` (slowdowns against kernels run alone)
  default     all-reduce on the default process group (NCCL's normal-priority stream)
  priority    all-reduce on a group created with ProcessGroupNCCL.Options(is_high_priority_stream=True),
              what the strategy's TORCH_NCCL_HIGH_PRIORITY=1 does to every group

The others change the environment of fresh processes (`ccoverlap bench --trace` runs them).
Only --active steps are profiled (HTA, and so ccoverlap, leave the last one
out), so a trace stays well under 2 MB. Works with --nproc-per-node 1 too
(NCCL then launches no collective kernel: the traces have compute only).
Needs torch with CUDA and NCCL, and ccoverlap installed.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist

from ccoverlap.control import levers
from ccoverlap.util import profiling

#: the strategy settings one process can apply to a group it makes: the high-priority stream
HIGH_PRIORITY = {"TORCH_NCCL_HIGH_PRIORITY": "1"}
IN_PROCESS = [s.name for s in levers.STRATEGIES
              if not (s.setting().policy or s.setting().startup) and s.setting().env.items() <= HIGH_PRIORITY.items()
              and not any("process" in levers.BY_NAME[name].not_in for name, _ in s.levers)]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="output folder (one subfolder per strategy)")
    ap.add_argument("--size", type=int, default=8192, help="matmul dimension N (N x N x N, bf16; default 8192)")
    ap.add_argument("--matmuls", type=int, default=4, help="matmuls per step (default 4)")
    ap.add_argument("--comm-mb", type=int, default=256, help="all-reduce size in MiB (bf16; default 256)")
    ap.add_argument("--warmup", type=int, default=3, help="unprofiled steps first (NCCL init, cuBLAS heuristics)")
    ap.add_argument("--active", type=int, default=3, help="profiled steps (default 3; the last is not analysed)")
    ap.add_argument("--strategies", default=",".join(IN_PROCESS),
                    help=f"comma-separated subset of {','.join(IN_PROCESS)} (default: all)")
    return ap.parse_args()


def strategies(names: str) -> list[levers.Strategy]:
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    if bad := [n for n in chosen if n not in IN_PROCESS]:
        raise SystemExit(f"--strategies {','.join(bad)}: valid {', '.join(IN_PROCESS)} (the others need fresh "
                         "processes: ccoverlap bench --trace)")
    return [levers.strategy(n) for n in chosen]


def make_group(strategy: levers.Strategy):
    """The process group the all-reduce runs on; every rank must create groups in the same order."""
    if dict(strategy.setting().env) != HIGH_PRIORITY:
        return dist.group.WORLD
    options = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)
    return dist.new_group(backend="nccl", pg_options=options)


def step(group, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, payload: torch.Tensor, matmuls: int,
         overlap: bool) -> None:
    """Launch the all-reduce first, then the matmuls beside it (or after it), then wait for both."""
    work = dist.all_reduce(payload, group=group, async_op=True)
    if not overlap:
        work.wait()
        torch.cuda.synchronize()
    for _ in range(matmuls):
        torch.matmul(a, b, out=c)
    work.wait()
    payload.mul_(0.5)  # keep values bounded across steps (sum of world_size copies)
    torch.cuda.synchronize()


def main() -> None:
    args = parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator(device=device).manual_seed(1234 + rank)
    n = args.size
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=gen)
    c = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    payload = torch.randn(args.comm_mb * 2**20 // 2, device=device, dtype=torch.bfloat16, generator=gen)

    for strategy in strategies(args.strategies):
        group = make_group(strategy)
        overlap = not strategy.no_overlap
        for _ in range(args.warmup):
            step(group, a, b, c, payload, args.matmuls, overlap)
        dist.barrier()
        path = args.out / strategy.name / f"rank{rank}_trace.json.gz"
        profiling.record(lambda: step(group, a, b, c, payload, args.matmuls, overlap), path, cuda=True,
                         warmup=1, active=args.active)  # CUDA sync events on: the doctor's dependencies
        dist.barrier()
        if rank == 0:
            print(f"{strategy.name}: {world} trace(s) in {path.parent} "
                  f"({path.stat().st_size / 1e6:.2f} MB for rank 0)", flush=True)

    if rank == 0:
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        (args.out / "README.txt").write_text(
            f"record_traces.py: torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl}, "
            f"{torch.cuda.get_device_name(device)} x {world}; size {n}, {args.matmuls} matmuls/step, "
            f"all-reduce {args.comm_mb} MiB bf16, {args.active} profiled steps; "
            f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE', '')}\n"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
