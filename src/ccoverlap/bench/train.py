"""`python -m ccoverlap.bench.train WORKLOAD [options]`: one of the bench's workloads as a plain training script,
built by the same builders with the same seeds, so `ccoverlap doctor -- CMD` and `ccoverlap tune -- CMD` can be
shown on it exactly as on a user's program. One process (`python`: --comm auto emulates with one GPU, runs
gloo on the CPU) or one per rank under `torchrun --nproc-per-node N` (nccl or gloo). It calls the workload's
step, which calls its optimizer's step, so the doctor's and the tuner's optimizer-step hooks see every step."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ccoverlap.bench import catalog
from ccoverlap.bench.config import TINY_PRESET, BenchConfig, ModelSize
from ccoverlap.util.options import Parser
from ccoverlap.util.options import add_options, add_preset, from_args
from ccoverlap.util.errors import UsageError, check_range

#: the workloads with a training step (an optimizer to step): the `steps` rows
TRAINABLE = tuple(w.name for w in catalog.WORKLOADS if w.rows is catalog.STEPS)


def _bench(name: str, **meta):
    """BenchConfig's field `name` (its default and help: one source), with `meta` added."""
    f = BenchConfig.__dataclass_fields__[name]
    return field(default=f.default, metadata={**f.metadata, **meta})


@dataclass(frozen=True)
class TrainConfig:
    """What the train script runs: the bench's fields that make a workload, and how long to train."""

    device: str = _bench("device")
    comm: str = _bench("comm")
    emulate_world: int = _bench("emulate_world")
    busbw_gbps: float = _bench("busbw_gbps")
    size: ModelSize = _bench("size")
    seed: int = _bench("seed", help="initial weights and data, as the bench seeds them")
    steps: int = field(default=50, metadata={"help": "optimizer steps to run"})
    log_every: int = field(default=10, metadata={"help": "print rank 0's loss every K steps"})

    def bench(self, workload: str, world: int, gpus: int) -> BenchConfig:
        """The bench's config for one rank of `world` (validated as the bench validates it)."""
        if workload not in TRAINABLE:
            raise UsageError(f"workload {workload}: valid {', '.join(TRAINABLE)} "
                             "(the workloads with an optimizer step)")
        check_range("--steps", self.steps, 1, 10**7)
        check_range("--log-every", self.log_every, 1, 10**7)
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name in BenchConfig.__dataclass_fields__}
        cfg = BenchConfig(workloads=(workload,), nproc=world, **shared)
        return cfg.resolved(gpus).validate()


#: the tiny model, with --tiny and on the CPU (as the bench's presets give it)
TINY = {k: v for k, v in TINY_PRESET.items() if k in TrainConfig.__dataclass_fields__}
PRESETS = {"--tiny": TINY, "on the CPU": TINY}


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m ccoverlap.bench.train", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", metavar="WORKLOAD", help=f"one of {', '.join(TRAINABLE)}")
    add_preset(p, "--tiny", TrainConfig, TINY, "a tiny model (the default on the CPU)")
    add_options(p, TrainConfig, PRESETS)
    return p


def config(args: argparse.Namespace, gpus: int) -> TrainConfig:
    on_cpu = (args.device if args.device != "auto" else "cuda" if gpus else "cpu") == "cpu"
    return from_args(TrainConfig, args,
                     *[PRESETS[k] for k, on in (("on the CPU", on_cpu), ("--tiny", args.tiny)) if on])


def single_process_env(env: Mapping[str, str]) -> dict[str, str]:
    """What torch.distributed's env:// needs, where no launcher set it: rank 0 of 1 on a free local port."""
    if "WORLD_SIZE" in env:
        return {}
    from ccoverlap.bench.launcher import _free_port  # on use: the launcher imports torch; the parser answers without it

    return {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port())}


def train(cfg: BenchConfig, steps: int, log_every: int, say=print) -> None:
    """Build the workload as a bench rank does, run `steps` steps, print rank 0's loss every `log_every`."""
    import torch.distributed as dist

    from ccoverlap.bench import workloads  # on use: torch's models; the parser answers without them

    device, rank, world = cfg.comm_backend.init(cfg)
    name = cfg.workloads[0]
    if rank == 0 and (note := cfg.comm_backend.note(cfg)):
        say(note)
    w = workloads.build(name, cfg, rank, world, device, False)
    started = time.perf_counter()
    for i in range(1, steps + 1):
        loss = w.step()
        if rank == 0 and i % log_every == 0:
            say(f"step {i} loss {float(loss):.6f}", flush=True)
    final = float(loss)
    dist.barrier()  # every rank done, collectives left in flight (diloco) included
    if rank == 0:
        say(f"{name}: {steps} steps in {time.perf_counter() - started:.1f} s, final loss {final:.6f} "
            f"(world {world}, {cfg.comm})", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import torch

        gpus = torch.cuda.device_count()
        env = single_process_env(os.environ)
        run = config(args, gpus)
        cfg = run.bench(args.workload, int((os.environ | env)["WORLD_SIZE"]), gpus)
    except UsageError as exc:
        print(f"python -m ccoverlap.bench.train: error: {exc}", file=sys.stderr)
        return 2
    os.environ.update(env)
    train(cfg, run.steps, run.log_every)
    import torch.distributed as dist

    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
