"""`ccoverlap.enable` of a priority policy on a GPU: the NCCL process groups created afterwards put their
communication on a high-priority stream.

ProcessGroupNCCL keeps its stream to itself (no Python accessor; the group's options keep
is_high_priority_stream False, as distributed_c10d.py sets it), so the test watches where the stream comes
from: ProcessGroupNCCL::initNCCLComm takes it from PyTorch's stream pool, from the highest-priority pool when
TORCH_NCCL_HIGH_PRIORITY is set as the communicator is created, and each pool hands its streams out round
robin. Counting the streams `torch.cuda.Stream(priority=...)` must draw before the pool comes back to a
stream drawn before shows how many streams others took from that pool in between."""
import json
import os
import socket
import subprocess
import sys

import pytest

PROGRAM = r"""
import json, os, torch, torch.distributed as dist
import ccoverlap

HIGH, NORMAL = -100, 0  # a priority beyond the device's range is its greatest

def drawn_until(first, priority):
    # streams drawn from `first`'s pool until it hands out `first` again: its size less what others took
    n = 1
    while torch.cuda.Stream(device=0, priority=priority).stream_id != first.stream_id:
        n += 1
        assert n <= 1024, "the pool never came back"
    return n

torch.cuda.set_device(0)
marks = {p: torch.cuda.Stream(device=0, priority=p) for p in (HIGH, NORMAL)}
size = {p: drawn_until(s, p) for p, s in marks.items()}  # nothing in between: the pools' sizes

def taken(group=None):
    # streams taken from each pool by the first collective of `group` (which creates its communicator)
    dist.all_reduce(torch.ones(4, device="cuda"), group=group)
    torch.cuda.synchronize()
    return {name: size[p] - drawn_until(marks[p], p) for name, p in (("high", HIGH), ("normal", NORMAL))}

policy = ccoverlap.enable({"format": "ccoverlap-policy/1", "levers": {"priority": "on"}})
dist.init_process_group("nccl", rank=0, world_size=1)
enabled = taken()
os.environ.pop("TORCH_NCCL_HIGH_PRIORITY")  # a group created without it: the control
control = taken(dist.new_group([0]))
dist.destroy_process_group()
print(json.dumps({"policy": policy.name, "high_priority": marks[HIGH].priority, "enabled": enabled,
                  "control": control}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.gpu
def test_groups_created_after_enable_communicate_on_a_high_priority_stream():
    pytest.importorskip("torch")
    # NVLink multicast as the environment has it: the device scripts switch it off (bench/device/prologue.sh)
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_NCCL_HIGH_PRIORITY", "LD_PRELOAD")} | {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0")}
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["policy"] == "priority" and seen["high_priority"] < 0  # the pool drawn from is high priority
    assert seen["enabled"]["high"] == 1  # the communicator's stream came from the high-priority pool
    assert seen["control"]["high"] == 0 and seen["control"]["normal"] >= 1  # without the variable: the normal pool
