"""A DDP training program for the doctor's GPU check (bench/device/doctor_check.py): it knows nothing of ccoverlap.

    torchrun --nproc-per-node 2 bench/device/doctor_train.py --steps 60

Every rank trains the same stack of bf16 linear layers on its own random batch (DDP all-reduces the
gradients in buckets during the backward pass, so NCCL runs beside the matmuls), and prints per step
its loss, exactly (float.hex), and the step's time on its own clock (host, after the loss is read back,
which waits for the step): `rank R step S loss HEX ms T`. The same seed gives the same losses on every run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--width", type=int, default=4096)
parser.add_argument("--layers", type=int, default=8)
parser.add_argument("--tokens", type=int, default=8192, help="rows of a rank's batch")
args = parser.parse_args()

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
torch.use_deterministic_algorithms(True)
local = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local)
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.manual_seed(0)
layers = []
for _ in range(args.layers):
    layers += [torch.nn.Linear(args.width, args.width), torch.nn.GELU()]
model = DistributedDataParallel(torch.nn.Sequential(*layers).to("cuda", torch.bfloat16), device_ids=[local])
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
generator = torch.Generator(device="cuda").manual_seed(1 + rank)
data = torch.randn(args.tokens, args.width, device="cuda", dtype=torch.bfloat16, generator=generator)
target = torch.randn(args.tokens, args.width, device="cuda", dtype=torch.bfloat16, generator=generator)
start = time.perf_counter()
for step in range(1, args.steps + 1):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(data).float(), target.float())
    loss.backward()
    opt.step()
    value = loss.item()
    now = time.perf_counter()
    sys.stdout.write(f"rank {rank} step {step} loss {value.hex()} ms {(now - start) * 1e3:.4f}\n")
    sys.stdout.flush()
    start = time.perf_counter()
dist.destroy_process_group()
