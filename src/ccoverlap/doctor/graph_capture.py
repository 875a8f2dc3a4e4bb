"""Inside the program: the topology of every CUDA graph it captures through torch.cuda.CUDAGraph (torch.cuda.graph,
make_graphed_callables, torch.compile's CUDA graphs), read from the driver as the capture ends, for the analysis
(analysis/graphs.py): a trace holds a replay's kernels, not the graph's edges.

To read a graph after capture_end torch must keep it, so the patched class is built with keep_graph=True and, where
the program did not ask for that, instantiated at once, as capture_end would have done (the first replay costs what
it did). The graph's template then lives beside its executable: host memory, nothing on the GPU. A graph with a
child graph or a conditional node is not written (its edges are not all at one level): its replays stay unknown.
Any failure here leaves the program's graph as it was and the topology unwritten.

A graph replayed on several streams runs its branches at once even in the alone window, where each kernel must run
alone. For each such graph this process instantiated, a serial twin is made too: a clone of the graph with its
edges replaced by one chain in util.graph_order's order, instantiated and registered with the launch interposer
(ccoverlap_graph_twin), which replays it in place of the graph in the alone window only and destroys it with the
graph's executable. The topology line then says the twin's order of the work nodes ("serial"), by which the
analysis matches the alone window's kernels to the window's (analysis/alone.py); where no twin could be made it
says why ("no_twin"). A twin holds no memory of its own on the GPU: a graph with memory nodes gets none."""
from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ccoverlap.util.graph_order import topological

#: CUgraphNodeType values (cuda.h): the work the trace shows; nodes whose edges cannot be followed at one level
KERNEL, MEMCPY, MEMSET = 0, 1, 2
OPAQUE = {4: "a child graph", 13: "a conditional node"}
#: nodes a serial twin cannot copy: graph memory (a clone's allocations are its own, not the graph's)
NO_TWIN = {10: "graph memory nodes", 11: "graph memory nodes"}
#: registers a twin executable for a graph's (the interposer's ccoverlap_graph_twin): True registered, False
#: refused, None where the interposer is not loaded
Register = Callable[[int, int], "bool | None"]
MAX_GRAPHS = 64  # a program that captures more (one graph per shape) has the first ones written
MAX_NODES = 20000


class _KernelParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA 12+); v1 is its prefix up to `extra`."""

    _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared", ctypes.c_uint), ("params", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


def work_edges(kinds: Sequence[int], edges: Sequence[tuple[int, int]]) -> tuple[list[int], list[tuple[int, int]]]:
    """The GPU-work nodes (kernels, memcpys, memsets) and the edges between them, each through any chain of other
    nodes (event records, waits, empty nodes), as positions in the list of work nodes."""
    succs: dict[int, list[int]] = {}
    for a, b in edges:
        succs.setdefault(a, []).append(b)
    work = [i for i, k in enumerate(kinds) if k in (KERNEL, MEMCPY, MEMSET)]
    where = {node: n for n, node in enumerate(work)}
    out = set()
    for a in work:
        seen, todo = set(), list(succs.get(a, ()))
        while todo:
            b = todo.pop()
            if b in seen:
                continue
            seen.add(b)
            if b in where:
                out.add((where[a], where[b]))
            else:
                todo.extend(succs.get(b, ()))
    return work, sorted(out)


class Driver:
    """The few driver calls that read a graph (libcuda, which torch has loaded already)."""

    def __init__(self, lib: ctypes.CDLL | None = None):
        self.lib = lib or ctypes.CDLL("libcuda.so.1")

    def _call(self, name: str, *args) -> None:
        if (rc := getattr(self.lib, name)(*args)) != 0:
            raise OSError(f"{name}: CUresult {rc}")

    def _array(self, name: str, graph: int, count: int) -> list[int]:
        nodes = (ctypes.c_void_p * max(count, 1))()
        n = ctypes.c_size_t(count)
        self._call(name, ctypes.c_void_p(graph), nodes, ctypes.byref(n))
        return [nodes[i] or 0 for i in range(n.value)]

    def topology(self, graph: int, executable: int | None = None, register: Register | None = None) -> dict:
        """{nodes: [{name, grid, block}], edges: [[a, b]]} of the graph's work nodes; ValueError where the graph
        cannot be written (an opaque node, too many nodes). With `executable` (the graph's, instantiated) and
        `register`, a graph that is not one chain gets a serial twin (the module's doc): "serial" or "no_twin"."""
        nodes, kinds, edges = self._read(graph)
        work, work_pairs = work_edges(kinds, edges)
        doc = {"nodes": [self._node(nodes[i], kinds[i]) for i in work], "edges": [list(e) for e in work_pairs]}
        if executable and register:
            try:
                doc |= self._twin(graph, nodes, kinds, edges, executable, register, work)
            except (OSError, ValueError) as exc:
                doc["no_twin"] = str(exc)
        return doc

    def _read(self, graph: int) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """The graph's nodes, their types and its edges (as positions in the node list)."""
        n = ctypes.c_size_t(0)
        self._call("cuGraphGetNodes", ctypes.c_void_p(graph), None, ctypes.byref(n))
        if n.value > MAX_NODES:
            raise ValueError(f"{n.value} nodes (more than {MAX_NODES})")
        nodes = self._array("cuGraphGetNodes", graph, n.value)
        index = {node: i for i, node in enumerate(nodes)}
        kinds = []
        for node in nodes:
            kind = ctypes.c_int(-1)
            self._call("cuGraphNodeGetType", ctypes.c_void_p(node), ctypes.byref(kind))
            if kind.value in OPAQUE:
                raise ValueError(f"it holds {OPAQUE[kind.value]}")
            kinds.append(kind.value)
        src, dst, _ = self._edges(graph)
        return nodes, kinds, [(index[a], index[b]) for a, b in zip(src, dst, strict=True)]

    def _edges(self, graph: int, data: bool = False) -> tuple[list[int], list[int], ctypes.Array | None]:
        """The graph's edges (from, to) and, with `data` where the driver has them, their CUgraphEdgeData."""
        v2 = hasattr(self.lib, "cuGraphGetEdges_v2")
        name = "cuGraphGetEdges_v2" if v2 else "cuGraphGetEdges"
        n = ctypes.c_size_t(0)
        self._call(name, ctypes.c_void_p(graph), None, None, *((None,) if v2 else ()), ctypes.byref(n))
        if not n.value:
            return [], [], None
        src, dst = (ctypes.c_void_p * n.value)(), (ctypes.c_void_p * n.value)()
        edge_data = (ctypes.c_uint64 * n.value)() if v2 and data else None  # CUgraphEdgeData: 8 bytes
        self._call(name, ctypes.c_void_p(graph), src, dst, *((edge_data,) if v2 else ()), ctypes.byref(n))
        return [src[i] or 0 for i in range(n.value)], [dst[i] or 0 for i in range(n.value)], edge_data

    def _dependencies(self, call: str, graph: int, src: Sequence[int], dst: Sequence[int],
                      edge_data: ctypes.Array | None = None) -> None:
        """cuGraphAddDependencies or cuGraphRemoveDependencies (`call`), the _v2 where the driver has it."""
        if not src:
            return
        n = len(src)
        a, b = (ctypes.c_void_p * n)(*src), (ctypes.c_void_p * n)(*dst)
        if hasattr(self.lib, call + "_v2"):
            self._call(call + "_v2", ctypes.c_void_p(graph), a, b, edge_data, ctypes.c_size_t(n))
        else:
            self._call(call, ctypes.c_void_p(graph), a, b, ctypes.c_size_t(n))

    def _twin(self, graph: int, nodes: list[int], kinds: list[int], edges: list[tuple[int, int]], executable: int,
              register: Register, work: list[int]) -> dict:
        """{"serial": the work nodes (positions in `work`) in the twin's order}, the twin registered; {} where the
        graph is one chain already (its replay is serial); ValueError or OSError where no twin is made."""
        preds: list[list[int]] = [[] for _ in nodes]
        for a, b in edges:
            preds[b].append(a)
        order = topological(preds)
        pairs = set(edges)
        if all((a, b) in pairs for a, b in zip(order, order[1:])):
            return {}
        if why := next((NO_TWIN[k] for k in kinds if k in NO_TWIN), None):
            raise ValueError(f"it holds {why}")
        clone = ctypes.c_void_p()
        self._call("cuGraphClone", ctypes.byref(clone), ctypes.c_void_p(graph))
        twin = ctypes.c_void_p()
        try:
            mine = []
            for node in nodes:
                found = ctypes.c_void_p()
                self._call("cuGraphNodeFindInClone", ctypes.byref(found), ctypes.c_void_p(node), clone)
                mine.append(found.value or 0)
            src, dst, edge_data = self._edges(clone.value, data=True)
            self._dependencies("cuGraphRemoveDependencies", clone.value, src, dst, edge_data)
            self._dependencies("cuGraphAddDependencies", clone.value, [mine[i] for i in order[:-1]],
                               [mine[i] for i in order[1:]])
            self._call("cuGraphInstantiateWithFlags", ctypes.byref(twin), clone, ctypes.c_ulonglong(0))
        finally:
            self.lib.cuGraphDestroy(clone)  # the executable does not need its graph
        if not register(executable, twin.value):
            self.lib.cuGraphExecDestroy(twin)
            raise ValueError("the launch interposer did not take the twin (not loaded, or its table is full)")
        where = {node: n for n, node in enumerate(work)}
        return {"serial": [where[i] for i in order if i in where]}

    def _node(self, node: int, kind: int) -> dict:
        if kind != KERNEL:
            return {"name": "", "grid": 0, "block": 0}
        p = _KernelParams()
        name = "cuGraphKernelNodeGetParams_v2" if hasattr(self.lib, "cuGraphKernelNodeGetParams_v2") else \
            "cuGraphKernelNodeGetParams"
        self._call(name, ctypes.c_void_p(node), ctypes.byref(p))
        return {"name": self._name(p), "grid": p.grid[0] * p.grid[1] * p.grid[2],
                "block": p.block[0] * p.block[1] * p.block[2]}

    def _name(self, p: _KernelParams) -> str:
        """The kernel's name (mangled for C++), or "" where the driver gives none."""
        out = ctypes.c_char_p()
        for call, handle in (("cuFuncGetName", p.func), ("cuKernelGetName", p.kern)):
            if handle and hasattr(self.lib, call) and getattr(self.lib, call)(ctypes.byref(out),
                                                                              ctypes.c_void_p(handle)) == 0:
                return (out.value or b"").decode(errors="replace")
        return ""


@dataclass
class Sink:
    """The topologies read so far, and what could not be read (the record says how many and why)."""

    graphs: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def add(self, read: Callable[[], dict]) -> None:
        if len(self.graphs) >= MAX_GRAPHS:
            self.skipped.append(f"more than {MAX_GRAPHS} graphs")
            return
        try:
            self.graphs.append(read())
        except Exception as exc:  # noqa: BLE001 - the program's graph is untouched; its topology is unwritten
            self.skipped.append(f"{type(exc).__name__}: {exc}")


def install(cls: type, sink: Sink, driver: Callable[[], Driver] = Driver, register: Register | None = None) -> None:
    """Patch `cls` (torch.cuda.CUDAGraph) to keep its graph and hand each captured graph's topology to `sink`; a
    torch without keep_graph (before 2.7: no raw_cuda_graph, no instantiate) is left as it is, its graphs unread.
    `register`: where given, each graph this patch instantiates gets its serial twin (the module's doc)."""
    if not all(hasattr(cls, name) for name in ("raw_cuda_graph", "instantiate", "capture_end")):
        sink.skipped.append("this torch cannot keep a captured graph (torch.cuda.CUDAGraph has no raw_cuda_graph)")
        return
    init, end = cls.__init__, cls.capture_end
    drivers: list[Driver] = []

    def __init__(self, keep_graph: bool = False, *args, **kwargs) -> None:
        init(self, True, *args, **kwargs)
        self._ccoverlap_instantiate = not keep_graph

    def capture_end(self) -> None:
        end(self)
        if not drivers:
            try:
                drivers.append(driver())
            except OSError as exc:
                sink.skipped.append(f"no driver: {exc}")
        ours = getattr(self, "_ccoverlap_instantiate", False)
        if ours:
            self.instantiate()
        if drivers:
            executable = self.raw_cuda_graph_exec() if ours and hasattr(self, "raw_cuda_graph_exec") else None
            sink.add(lambda: drivers[0].topology(self.raw_cuda_graph(), executable, register))

    cls.__init__, cls.capture_end = __init__, capture_end
