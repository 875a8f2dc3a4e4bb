"""Known answer (k), dispatch order in a CUDA graph: the dispatch program's kernels (a 0.1 ms kernel, a grid of 20
waves of two 100 KB blocks per SM, and beside it the collective, 16 CTAs x 256 threads, 8 KB, 1 ms, ready after
the first kernel on its own stream) captured once into a CUDA graph on two streams, as CUDA-graph trainers and
inference servers capture a step with its collective, then replayed every step. Truth by construction: at equal
priority the collective waits for the grid's last wave to be dispatched (about 1 ms to gain); whether priority
reaches it depends on the captured kernel node keeping its stream's priority (measured, not assumed). The doctor
sees the replay's kernels but not the graph's edges (a trace has no record of them): what it can say of the
collective's wait is what this program checks."""
import torch

import dispatch
from common import main


def body(ctx, grad):
    if not hasattr(ctx, "graph"):
        torch.cuda.synchronize()
        ctx.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(ctx.graph):  # grad's storage is the same every step (zero_grad keeps it)
            dispatch.body(ctx, grad)
    ctx.graph.replay()


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 256, "smem": 8 * 1024, "ms": 1.0}, body)
