"""Known answer (c), cluster: compute confined to a green context of 116 SMs (one wave of 256-thread blocks, eight
per SM: every thread slot, 2 ms), launched first, so it holds its SMs before anything else is ready; the rest of the
SMs are left free. The collective (16 CTAs x 640 threads, 82 KB, 1 ms, in NCCL's clusters of 4 on sm_90), ready
after a small kernel on the free SMs, fits on the free SMs but not as clusters of 4 (H200: the SMs a green context
leaves took no cluster of 4, docs/results.md). Truth: clusters of 4 wait for the compute to end; clusters of 1
(nccl-cluster=1) start at once (about 1 ms to gain)."""
from common import main

SMS = 116


def setup(ctx):
    import torch
    from torch.cuda.green_contexts import GreenContext

    ctx.green = GreenContext.create(num_sms=SMS, device_id=0)  # kept: a collected context destroys its streams
    if hasattr(ctx.green, "Stream"):
        ctx.green_stream = ctx.green.Stream()
    else:  # torch without GreenContext.Stream: a stream made while the context is current is its own
        ctx.green.set_context()
        try:
            ctx.green_stream = torch.cuda.Stream()
        finally:
            ctx.green.pop_context()


def body(ctx, grad):
    ctx.green_stream.wait_event(ctx.mark())  # after the backward (record, then wait at once)
    ctx.compute("known_green", SMS * 8, 256, 2000, stream=ctx.green_stream)
    ctx.compute("known_compute", 8, 128, 100)  # on the free SMs
    ctx.comm.all_reduce(grad, ctx.mark())
    ctx.join(ctx.green_stream)
    ctx.join(ctx.comm.stream)


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 640, "smem": 82 * 1024, "ms": 1.0}, body, setup)
