"""Two gloo ranks of StreamingDiLoCo for tests/test_workloads.py (RANK, WORLD_SIZE, MASTER_* from the test):
fragment 0 made to differ per rank, synced once under no-overlap and once overlapped, with rank 1 joining
each all-reduce half a second late. Writes what each rank held to DIR/rank<r>.pt."""
import sys
import time

import torch
import torch.distributed as dist

from ccoverlap.bench.models import GPT
from ccoverlap.bench.workloads import StreamingDiLoCo

dist.init_process_group("gloo")
rank = dist.get_rank()
out = {}
for no_overlap in (True, False):
    torch.manual_seed(0)
    model = GPT(2, 16, 2, 32)
    sync = StreamingDiLoCo(model, dist.get_world_size(), no_overlap)
    frag = sync.fragments[0]
    torch.manual_seed(1 + rank)
    with torch.no_grad():
        for p in frag.params:
            p.add_(torch.randn_like(p) * 0.01)
    held = {"before": [p.clone() for p in frag.params], "anchor0": [a.detach().clone() for a in frag.anchor]}
    if rank == 1:
        time.sleep(0.5)  # rank 0's all-reduce cannot finish before rank 1 joins it
    sync.launch(0)
    held["done_at_launch"] = sync.in_flight[0].work.is_completed()
    sync.land(sync.window)
    out[no_overlap] = held | {"anchor": [a.detach().clone() for a in frag.anchor],
                              "after": [p.clone() for p in frag.params],
                              "counters": sync.counters(), "window": sync.window, "fragments": len(sync.fragments)}
    dist.barrier()
torch.save(out, f"{sys.argv[1]}/rank{rank}.pt")
dist.destroy_process_group()
