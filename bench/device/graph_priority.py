"""Does a CUDA graph's kernel node keep the priority of the stream it was captured on (issue 27: priority
realizes less through graph_dispatch's graph than through dispatch's plain launches)? Captures, through torch, a
kernel on a stream of the greatest priority beside one on the default stream, and reads each kernel node's
priority launch attribute from the driver (CU_LAUNCH_ATTRIBUTE_PRIORITY). Prints one JSON line."""
import ctypes
import json

import torch

PRIORITY = 8  # CU_LAUNCH_ATTRIBUTE_PRIORITY (cuda.h CUlaunchAttributeID)
lib = ctypes.CDLL("libcuda.so.1")
x = torch.randn(1 << 20, device="cuda")  # the context is current from here
least, greatest = ctypes.c_int(), ctypes.c_int()
assert lib.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)) == 0
low, high = least.value, greatest.value
hi = torch.cuda.Stream(priority=high)  # torch maps it into the range it allows
g = torch.cuda.CUDAGraph(keep_graph=True)
torch.cuda.synchronize()
with torch.cuda.graph(g):
    hi.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(hi):
        y = x * 2
    z = x + 1
    torch.cuda.current_stream().wait_stream(hi)
n = ctypes.c_size_t(0)
raw = ctypes.c_void_p(g.raw_cuda_graph())
assert lib.cuGraphGetNodes(raw, None, ctypes.byref(n)) == 0
nodes = (ctypes.c_void_p * n.value)()
assert lib.cuGraphGetNodes(raw, nodes, ctypes.byref(n)) == 0
out = []
for node in nodes:
    kind = ctypes.c_int(-1)
    lib.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind))
    if kind.value != 0:
        continue
    value = (ctypes.c_byte * 64)()
    rc = lib.cuGraphKernelNodeGetAttribute(ctypes.c_void_p(node), PRIORITY, value)
    out.append({"rc": rc, "priority": ctypes.cast(value, ctypes.POINTER(ctypes.c_int))[0]})
g.instantiate()
g.replay()
torch.cuda.synchronize()
print(json.dumps({"torch": torch.__version__, "stream_priorities": [low, high], "hi_stream_priority": hi.priority,
                  "kernel_nodes": out, "results_ok": bool(torch.equal(y, x * 2) and torch.equal(z, x + 1))}))
