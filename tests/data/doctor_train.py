"""A tiny program for `ccoverlap doctor`'s tests: SGD steps on a small MLP, the loss of each step printed.
Under torchrun (RANK set) it joins a gloo group (nccl with --cuda) and all-reduces its gradients, as DDP would.

  --steps N       optimizer steps (default 6)
  --exit CODE     exit with CODE after the steps
  --kill SIG@S    send itself signal SIG (a number) right after optimizer step S
  --seconds S     no optimizer: matmuls for S seconds
  --group         join a gloo group of one first (without torchrun)
  --cuda          on the GPU of its local rank
  --until-trace   with --seconds: and on until the doctor's rank0_trace.json.gz is written (at most a minute)

For the tuner's tests, environment knobs: DOCTOR_TRAIN_SLEEP_MS (host milliseconds slept in every step,
default 0: a knob that changes speed, not the result), DOCTOR_TRAIN_LR (the learning rate, default 0.05: a
knob that changes the result) and DOCTOR_TRAIN_LOCAL_LR (the learning rate of each rank's own parameter, one
that is stepped but never all-reduced, as rank-local state is, on the ranks of node 1 alone (GROUP_RANK=1):
default 0.05, a knob that changes the result on one node and nowhere else). DOCTOR_TRAIN_SYNC=1: the host waits
for the GPU inside every step, before its optimizer step (as a gradient scaler's check for infs does).
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--kill", default=None)
parser.add_argument("--seconds", type=float, default=0.0)
parser.add_argument("--group", action="store_true")
parser.add_argument("--until-trace", action="store_true")
parser.add_argument("--cuda", action="store_true")
args = parser.parse_args()

device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if args.cuda else torch.device("cpu")
if args.cuda:
    torch.cuda.set_device(device)
if "RANK" in os.environ or args.group:
    if args.group:  # a group of one, rendezvous through a file: no port to collide with a test beside it
        dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/rendezvous", rank=0, world_size=1)
    else:
        dist.init_process_group("nccl" if args.cuda else "gloo")

if args.seconds:
    x = torch.randn(64, 64, device=device)
    end = time.monotonic() + args.seconds
    trace = os.path.join(json.loads(os.environ.get("CCOVERLAP_DOCTOR", '{"out": "."}'))["out"], "rank0_trace.json.gz")
    while time.monotonic() < end or args.until_trace and not os.path.exists(trace) and time.monotonic() < end + 60:
        x = torch.tanh(x @ x)
    print("done", flush=True)
    sys.exit(args.exit)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
lr = float(os.environ.get("DOCTOR_TRAIN_LR", "0.05"))
own = torch.nn.Parameter(torch.ones(1, device=device))  # this rank's own: its gradient is never all-reduced
own_lr = float(os.environ.get("DOCTOR_TRAIN_LOCAL_LR", "0.05")) if os.environ.get("GROUP_RANK") == "1" else 0.05
opt = torch.optim.SGD([{"params": model.parameters()}, {"params": [own], "lr": own_lr}], lr=lr)
sleep_s = float(os.environ.get("DOCTOR_TRAIN_SLEEP_MS", "0")) / 1000
sync_in_step = os.environ.get("DOCTOR_TRAIN_SYNC") == "1"
data, target = torch.randn(128, 32).to(device), torch.randn(128, 1).to(device)
kill_sig, kill_at = map(int, args.kill.split("@")) if args.kill else (0, 0)
for step in range(1, args.steps + 1):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(data), target)
    (loss + (own - 2).pow(2).sum()).backward()
    if dist.is_initialized():
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
    time.sleep(sleep_s)
    if sync_in_step:
        torch.isfinite(loss).item()
    opt.step()
    sys.stdout.write(f"step {step} loss {loss.item():.6f}\n")  # one write: ranks' lines never interleave
    sys.stdout.flush()
    if step == kill_at:
        os.kill(os.getpid(), kill_sig)
        time.sleep(5)  # a handled signal ends the process from its handler
if dist.is_initialized():
    dist.destroy_process_group()
sys.exit(args.exit)
