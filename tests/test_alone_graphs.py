"""CUDA graphs in the alone window (issue 27.2, the analysis's part): a graph replay's kernels share its
correlation; each is matched by its place in the replay (the graph's node order) and keyed apart, and trusted
where it ran with nothing beside it; a graph's parallel branches that overlapped stay unknown, counted, named."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import kineto_synth as ks
from ccoverlap.analysis.alone import key_of, with_alone
from ccoverlap.analysis.contention import diagnose
from ccoverlap.analysis.reader import read_trace


def graph_trace(path: Path, kernels: list[ks.K], graph: list[int], t0: float) -> Path:
    """A trace of `kernels` where those at indices `graph` were replayed by one cudaGraphLaunch (their launches
    become one call, its correlation theirs)."""
    events = list(ks.events(kernels, [(t0, 5000.0), (t0 + 5000, 100.0)]))
    corr = 100 + graph[0]
    mine = {100 + i for i in graph}
    out = []
    for ev in events:
        c = (ev.get("args") or {}).get("correlation", ev.get("id"))
        if c in mine:
            if ev.get("cat") in ("cuda_runtime", "cuda_driver"):
                if c != corr:
                    continue
                ev = ev | {"name": "cudaGraphLaunch"}
            elif ev.get("ph") in ("s", "f"):
                if c != corr and ev["ph"] == "s":
                    continue
                ev = ev | {"id": corr}
            else:
                ev = ev | {"args": ev["args"] | {"correlation": corr, "External id": corr}}
        out.append(ev)
    doc = ks.header(0, 1) | {"traceEvents": out}
    path.write_text(json.dumps(doc))
    return path


def window(t0: float, durs: tuple[float, float, float], overlap: bool = False) -> list[ks.K]:
    """A plain kernel, then a graph of three kernels on one stream (the third on its own stream when `overlap`)."""
    a, b, c = durs
    return [ks.K("plain", t0 + 100, 100, launch_ts=t0 + 10),
            ks.K("g_one", t0 + 300, a, launch_ts=t0 + 250),
            ks.K("g_two", t0 + 300 + a, b, grid=64, launch_ts=t0 + 250),
            ks.K("g_three", t0 + 300 + (0 if overlap else a + b), c, stream=9 if overlap else 7, launch_ts=t0 + 250)]


def test_graph_kernels_are_matched_by_their_place_in_the_replay(tmp_path):
    trace = read_trace(graph_trace(tmp_path / "rank0_trace.json", window(0, (400, 300, 200)), [1, 2, 3], 0))
    alone = read_trace(graph_trace(tmp_path / "a.json", window(20_000, (250, 150, 100)), [1, 2, 3], 20_000))
    assert len({trace.kernels[i].correlation for i in (1, 2, 3)}) == 1  # one replay, one correlation
    trace, m = with_alone(trace, alone)
    assert (m.launches, m.matched, m.unmatched) == (4, 4, 0)
    key = key_of(trace)
    assert [trace.alone_us[key(k)] for k in trace.kernels] == [100, 250, 150, 100]
    d = diagnose({0: trace})[0]
    assert d.alone_measured


def test_a_graphs_branches_that_overlapped_alone_stay_unknown(tmp_path):
    trace = read_trace(graph_trace(tmp_path / "rank0_trace.json", window(0, (400, 300, 200), True), [1, 2, 3], 0))
    alone = read_trace(graph_trace(tmp_path / "a.json", window(20_000, (250, 150, 100), True), [1, 2, 3], 20_000))
    trace, m = with_alone(trace, alone)
    assert m.unmatched == 2 and "g_one did not run alone (it overlapped another kernel: a CUDA graph's parallel" \
        in m.first
    key = key_of(trace)
    assert trace.alone_us.get(key(trace.kernels[0])) == 100 and key(trace.kernels[1]) not in trace.alone_us


def test_a_graph_replayed_on_several_streams_leaves_its_kernels_waits_unknown(tmp_path):
    """The trace holds a replay's kernels on the executor's streams, not the graph's edges: a collective on a
    branch of its own may have waited for a kernel of another branch, so every kernel of such a replay after its
    first has an unknown dependency (its wait is not diagnosed); a replay on one stream is a chain: nothing unknown."""
    from ccoverlap.analysis.deps import graph

    chain = graph(read_trace(graph_trace(tmp_path / "chain.json", window(0, (400, 300, 200)), [1, 2, 3], 0)))
    assert not chain.unresolved and not any("CUDA graph" in n for n in chain.notes)
    trace = read_trace(graph_trace(tmp_path / "branch.json", window(0, (400, 300, 200), True), [1, 2, 3], 0))
    branched = graph(trace)
    first = min((1, 2, 3), key=lambda i: (branched.kernels[i].ts, i))
    assert set(branched.unresolved) == {1, 2, 3} - {first}
    assert all("inside a CUDA graph replayed on 2 streams" in str(why[0]) for why in branched.unresolved.values())
    assert any(n.startswith("2 kernel(s) of 1 CUDA graph replay(s) that ran on several streams")
               for n in branched.notes)


def test_the_what_if_takes_a_graphs_kernels_with_their_times_alone(tmp_path):
    """The what-if's step keys the alone window as the doctor does: a replay's kernels each with its own time
    alone, none left out for sharing the replay's correlation."""
    from ccoverlap.model.limits import get_device
    from ccoverlap.whatif.step import from_trace

    trace = read_trace(graph_trace(tmp_path / "rank0_trace.json", window(0, (400, 300, 200)), [1, 2, 3], 0))
    alone = read_trace(graph_trace(tmp_path / "a.json", window(20_000, (250, 150, 100)), [1, 2, 3], 20_000))
    trace, _ = with_alone(trace, alone)
    step, left = from_trace(trace, get_device("h200"))
    assert not left and [(k.name, k.alone_us) for k in step.kernels] == [
        ("plain", 100), ("g_one", 250), ("g_two", 150), ("g_three", 100)]


def test_a_collective_waiting_inside_a_branched_graph_reads_cannot_tell_not_nothing_to_gain(tmp_path):
    """Its exposed time waited for what the trace does not show: the verdict says so, never "nothing to gain"."""
    from ccoverlap.analysis.recommend import verdict

    kernels = [ks.K("plain", 100, 100, launch_ts=10),
               ks.K("fat", 300, 2000, launch_ts=250),
               ks.K("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 2300, 1000, stream=9, grid=16, launch_ts=250)]
    trace = read_trace(graph_trace(tmp_path / "rank0_trace.json", kernels, [1, 2], 0))
    line = verdict([diagnose({0: trace})[0]]).line
    assert line.startswith("cannot tell") and "nothing to gain" not in line
    assert "inside a CUDA graph replayed on 2 streams" in line


# -- the graph's edges, from the topology the doctor's capture read (analysis/graphs.py, doctor/graph_capture.py) --

def dispatch_replay(tmp_path: Path, comm_start: float = 5400.0):
    """The dispatch program in a two-stream graph: a short kernel, then a 6-wave grid (2 blocks/SM by shared
    memory) on the capture stream and the collective on a branch of its own, both after the short kernel."""
    kernels = [ks.K("plain", 100, 100, launch_ts=10),
               ks.K("first", 300, 100, block=128, grid=132, launch_ts=250),
               ks.K("padded_kernel", 400, 6000, block=256, grid=6 * 2 * 132, regs=16, smem=100000, launch_ts=250),
               ks.K("ncclDevKernel_SendRecv", comm_start, 1500, stream=13, block=256, grid=16, smem=16384,
                    launch_ts=250)]
    return read_trace(graph_trace(tmp_path / "rank0_trace.json", kernels, [1, 2, 3], 0))


TOPOLOGY = {"nodes": [{"name": "first", "grid": 132, "block": 128},
                      {"name": "_Z13padded_kernelv", "grid": 6 * 2 * 132, "block": 256},
                      {"name": "ncclDevKernel_SendRecv", "grid": 16, "block": 256}],
            "edges": [[0, 1], [0, 2]]}


def test_work_edges_follow_event_and_empty_nodes_to_the_work_behind_them():
    from ccoverlap.doctor.graph_capture import KERNEL, MEMSET, work_edges

    event, empty = 7, 5  # CU_GRAPH_NODE_TYPE_EVENT_RECORD, _EMPTY
    kinds = [KERNEL, event, KERNEL, empty, MEMSET, KERNEL]
    work, edges = work_edges(kinds, [(0, 1), (1, 2), (1, 3), (3, 4), (4, 5), (0, 5)])
    assert work == [0, 2, 4, 5] and edges == [(0, 1), (0, 2), (0, 3), (2, 3)]


def test_topologies_are_put_in_order_and_malformed_ones_counted():
    from ccoverlap.analysis.graphs import parse

    backwards = {"nodes": TOPOLOGY["nodes"][::-1], "edges": [[2, 1], [2, 0]]}
    cycle = {"nodes": TOPOLOGY["nodes"][:2], "edges": [[0, 1], [1, 0]]}
    (topo,), bad = parse([backwards, cycle, {"nodes": []}, {"nodes": TOPOLOGY["nodes"], "edges": [[0, 9]]}])
    assert bad == 3 and topo.names[0] == "first" and topo.preds == ((), (0,), (0,))


def test_a_replay_matched_to_its_topology_is_diagnosed_and_its_lever_named(tmp_path):
    """With the graph's edges the collective was ready when the short kernel ended (400) and waited for the
    grid's dispatch (at 5400): priority, as in the same program without a graph, never "cannot tell"; released with
    the grid by one graph launch, its CTAs would land first on idle SMs and configure them against the grid's 100 KB
    blocks, so priority with the collective's own carveout hint comes first (compute_slowed.landing)."""
    import dataclasses

    from ccoverlap.analysis.deps import graph
    from ccoverlap.analysis.graphs import parse
    from ccoverlap.analysis.mechanisms.base import Cause
    from ccoverlap.analysis.recommend import verdict

    trace = dispatch_replay(tmp_path)
    hidden = diagnose({0: trace})[0]
    assert verdict([hidden]).line.startswith("cannot tell")
    trace = dataclasses.replace(trace, graphs=parse([TOPOLOGY])[0])
    g = graph(trace)
    assert not g.unresolved and g.events == {2: (1,), 3: (1,)} and g.prev[2] == 1  # the stream's order kept
    assert g.ready(3) == (400, "event")
    assert any("as the doctor's capture read the graph" in n for n in g.notes)
    d = diagnose({0: trace})[0]
    (c,) = d.comm
    assert c.ready_us == 400 and c.cause is Cause.DISPATCH_ORDER and c.blocked_by == ("padded_kernel",)
    assert [r.lever for r in verdict([d]).recommendations][:2] == ["priority+comm-carveout-hint", "priority"]


@pytest.mark.parametrize("change", ["shape", "c-name", "order"])
def test_a_topology_that_does_not_fit_the_replay_leaves_it_unknown(tmp_path, change):
    """Another shape, another C name, or a kernel that started before the node it waits for ended (the edge
    forbids it): no match, and the replay's waits stay unknown rather than guessed."""
    import copy
    import dataclasses

    from ccoverlap.analysis.deps import graph
    from ccoverlap.analysis.graphs import parse

    topo = copy.deepcopy(TOPOLOGY)
    if change == "shape":
        topo["nodes"][2]["grid"] = 24
    elif change == "c-name":
        topo["nodes"][0]["name"] = "second"
    else:
        topo["edges"].append([1, 2])  # the collective waits for the grid, which it started beside
    g = graph(dataclasses.replace(dispatch_replay(tmp_path), graphs=parse([topo])[0]))
    assert set(g.unresolved) == {2, 3}
    assert any("none of the captured graphs matches these replays" in n for n in g.notes)


def test_install_keeps_the_graph_reads_it_and_instantiates_as_capture_end_would():
    from ccoverlap.doctor.graph_capture import Sink, install

    calls = []

    class FakeGraph:
        def __init__(self, keep_graph=False):
            calls.append(("init", keep_graph))

        def capture_end(self):
            calls.append("end")

        def raw_cuda_graph(self):
            return 1234

        def instantiate(self):
            calls.append("instantiate")

    class FakeDriver:
        def topology(self, graph, executable=None, register=None):
            if graph != 1234:
                raise ValueError("wrong graph")
            return TOPOLOGY

    sink = Sink()
    install(FakeGraph, sink, FakeDriver)
    FakeGraph().capture_end()
    FakeGraph(keep_graph=True).capture_end()  # the program keeps its own: it instantiates when it wants
    assert calls == [("init", True), "end", "instantiate", ("init", True), "end"]
    assert sink.graphs == [TOPOLOGY, TOPOLOGY] and not sink.skipped


def test_a_graph_that_cannot_be_read_is_skipped_and_the_program_goes_on():
    from ccoverlap.doctor.graph_capture import Sink, install

    class FakeGraph:
        def __init__(self, keep_graph=False):
            self.instantiated = False

        def capture_end(self):
            pass

        def raw_cuda_graph(self):
            return 1

        def instantiate(self):
            self.instantiated = True

    class Opaque:
        def topology(self, graph, executable=None, register=None):
            raise ValueError("it holds a child graph")

    sink = Sink()
    install(FakeGraph, sink, Opaque)
    g = FakeGraph()
    g.capture_end()
    assert g.instantiated and not sink.graphs and sink.skipped == ["ValueError: it holds a child graph"]


def test_the_record_carries_the_graphs_to_the_analysis(tmp_path):
    from ccoverlap.doctor import record

    lines = [{"format": record.FORMAT, "rank": 0, "pid": 7},
             {"window": "open", "cuda": True, "trace": "rank0_trace.json.gz", "t": 1.0},
             {"window": "closed", "trace": "rank0_trace.json.gz", "recorded": 3, "complete": True, "t": 2.0},
             {"graphs": [TOPOLOGY], "graphs_skipped": ["ValueError: it holds a child graph"]}]
    path = tmp_path / ("rank0" + record.STEPS_SUFFIX)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    records, bad = record.read_all(tmp_path)
    assert not bad and records[0].graphs == (TOPOLOGY,)
    process = record.processes(tmp_path, records)[0]
    assert process.graphs == (TOPOLOGY,) and process.graphs_skipped == ("ValueError: it holds a child graph",)


@pytest.mark.gpu
def test_the_driver_reads_a_graph_torch_captured_on_two_streams():
    """On the GPU: a graph captured through (a subclass of) torch.cuda.CUDAGraph, patched as the doctor patches
    it, computes what it did, and its three kernels come back with the branch's edges."""
    import torch

    from ccoverlap.analysis.graphs import Topology
    from ccoverlap.doctor.graph_capture import Sink, install

    class Graph(torch.cuda.CUDAGraph):
        pass

    sink = Sink()
    install(Graph, sink)
    x = torch.randn(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    g = Graph()
    with torch.cuda.graph(g):
        y = x * 2
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            z = y + 1
        w = y * 3
        torch.cuda.current_stream().wait_stream(side)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(z, x * 2 + 1) and torch.equal(w, x * 2 * 3)
    assert not sink.skipped, sink.skipped
    (doc,) = sink.graphs
    topo = Topology.from_json(doc)
    assert len(topo.names) == 3 and all(topo.names) and all(grid > 0 and block > 0 for grid, block in topo.shapes)
    assert topo.preds == ((), (0,), (0,))


def test_a_torch_that_cannot_keep_its_graph_is_left_as_it_is():
    from ccoverlap.doctor.graph_capture import Sink, install

    class OldGraph:
        def capture_end(self):
            pass

    before = OldGraph.__dict__.copy()
    sink = Sink()
    install(OldGraph, sink)
    assert OldGraph.__dict__ == before and "cannot keep a captured graph" in sink.skipped[0]


def test_analyze_on_a_doctor_folder_reads_its_records_graphs(tmp_path, capsys):
    """`ccoverlap analyze DIR` on the doctor's folder sees what the doctor saw: the captured graph's edges."""
    from ccoverlap.cli import main
    from ccoverlap.doctor import record

    dispatch_replay(tmp_path)  # rank0_trace.json
    lines = [{"format": record.FORMAT, "rank": 0, "pid": 7},
             {"window": "open", "cuda": True, "trace": "rank0_trace.json", "t": 1.0},
             {"window": "closed", "trace": "rank0_trace.json", "recorded": 1, "complete": True, "t": 2.0},
             {"graphs": [TOPOLOGY], "graphs_skipped": []}]
    (tmp_path / ("rank0" + record.STEPS_SUFFIX)).write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["analyze", str(tmp_path), "--json", "-"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    (rank,) = doc["ranks"]
    assert rank["recommendations"][0]["lever"] == "priority+comm-carveout-hint", rank["verdict"]
    lines[-1]["graphs_skipped"] = ["ValueError: it holds a conditional node"]
    (tmp_path / ("rank0" + record.STEPS_SUFFIX)).write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["analyze", str(tmp_path), "--json", "-"]) == 0
    assert "1 CUDA graph(s) the program captured were not read (first: ValueError: it holds a conditional node)" \
        in capsys.readouterr().err


# -- serial twins: a branched graph's kernels alone (doctor/graph_capture.py, the interposer, analysis/alone.py) --

TWIN = TOPOLOGY | {"serial": [0, 1, 2]}


def twin_alone(tmp_path: Path, t0: float, order: tuple[str, ...] = ("first", "padded_kernel", "ncclDevKernel_SendRecv"),
               durs: dict | None = None):
    """The dispatch program's alone window, its graph replayed by its serial twin: the three nodes one after
    another on one stream (the twin's), in `order`."""
    durs = durs or {"first": 80, "padded_kernel": 5000, "ncclDevKernel_SendRecv": 900}
    shape = {"first": {"block": 128, "grid": 132},
             "padded_kernel": {"block": 256, "grid": 6 * 2 * 132, "regs": 16, "smem": 100000},
             "ncclDevKernel_SendRecv": {"block": 256, "grid": 16, "smem": 16384}}
    kernels, at = [ks.K("plain", t0 + 100, 90, launch_ts=t0 + 10)], t0 + 300
    for name in order:
        kernels.append(ks.K(name, at, durs[name], stream=21, launch_ts=t0 + 250, **shape[name]))
        at += durs[name] + 5
    return read_trace(graph_trace(tmp_path / "alone.json", kernels, [1, 2, 3], t0))


def test_a_twin_topology_is_read_with_its_serial_order_and_a_bad_one_refused():
    from ccoverlap.analysis.graphs import parse

    (topo, no), bad = parse([TWIN, TOPOLOGY | {"no_twin": "it holds graph memory nodes"},
                             TOPOLOGY | {"serial": [0, 1]}, TOPOLOGY | {"serial": [2, 0, 1]}])
    assert bad == 2  # not every node once; the collective before the kernel it waits for
    assert topo.serial == (0, 1, 2) and topo.no_twin is None
    assert no.serial is None and no.no_twin == "it holds graph memory nodes"


def test_a_branched_graphs_kernels_take_their_serial_twins_times_node_by_node(tmp_path):
    """The window ran the grid and the collective at once on two streams; the alone window ran the twin, all
    three on another stream one after another: each kernel gets its node's time, none is left unknown."""
    import dataclasses

    from ccoverlap.analysis.graphs import parse

    trace = dataclasses.replace(dispatch_replay(tmp_path), graphs=parse([TWIN])[0])
    trace, m = with_alone(trace, twin_alone(tmp_path, 20_000))
    assert (m.launches, m.matched, m.unmatched) == (4, 4, 0), m.first
    key = key_of(trace)
    assert {k.name: trace.alone_us[key(k)] for k in trace.kernels} == {
        "plain": 90, "first": 80, "padded_kernel": 5000, "ncclDevKernel_SendRecv": 900}


def test_without_the_twins_order_the_branched_replay_stays_unknown(tmp_path):
    """The same alone replay without "serial" in the topology (no twin made): matched by stream, as before, the
    streams disagree (stream 7 has three launches there, one alone) and every launch stays unknown, counted; an
    alone replay not in the twin's order is not taken for it either."""
    import dataclasses

    from ccoverlap.analysis.graphs import parse

    trace = dataclasses.replace(dispatch_replay(tmp_path), graphs=parse([TOPOLOGY])[0])
    _, m = with_alone(trace, twin_alone(tmp_path, 20_000))
    assert (m.matched, m.unmatched) == (0, 4) and "stream 7: 3 launch(es), 1 in the alone window" in m.first
    trace = dataclasses.replace(trace, graphs=parse([TWIN])[0])
    _, m = with_alone(trace, twin_alone(tmp_path, 20_000, ("first", "ncclDevKernel_SendRecv", "padded_kernel")))
    assert (m.matched, m.unmatched) == (0, 4)


class FakeCuda:
    """libcuda's graph calls over graphs of Python lists, as ctypes hands them their arguments."""

    def __init__(self, kinds: list[int], edges: list[tuple[int, int]]):
        nodes, pairs = [100 + i for i in range(len(kinds))], [(100 + a, 100 + b) for a, b in edges]
        self.graphs = {1: {"nodes": nodes, "edges": pairs}}
        self.kinds = {100 + i: k for i, k in enumerate(kinds)} | {5000 + i: k for i, k in enumerate(kinds)}
        self.instantiated: dict[int, list] = {}
        self.destroyed: list[int] = []

    @staticmethod
    def _value(p):
        return getattr(p, "value", p)

    def cuGraphGetNodes(self, graph, out, n):
        nodes = self.graphs[self._value(graph)]["nodes"]
        if out is not None:
            for i, node in enumerate(nodes):
                out[i] = node
        n._obj.value = len(nodes)
        return 0

    def cuGraphNodeGetType(self, node, kind):
        kind._obj.value = self.kinds[self._value(node)]
        return 0

    def cuGraphGetEdges_v2(self, graph, src, dst, data, n):
        edges = self.graphs[self._value(graph)]["edges"]
        if src is not None:
            for i, (a, b) in enumerate(edges):
                src[i], dst[i] = a, b
        n._obj.value = len(edges)
        return 0

    def cuGraphKernelNodeGetParams_v2(self, node, p):
        p._obj.grid[0] = p._obj.block[0] = 1
        return 0

    def cuGraphClone(self, out, graph):
        g = self.graphs[self._value(graph)]
        self.graphs[2] = {"nodes": [n + 4900 for n in g["nodes"]],
                          "edges": [(a + 4900, b + 4900) for a, b in g["edges"]]}
        out._obj.value = 2
        return 0

    def cuGraphNodeFindInClone(self, out, node, clone):
        out._obj.value = self._value(node) + 4900
        return 0

    def cuGraphRemoveDependencies_v2(self, graph, a, b, data, n):
        edges = self.graphs[self._value(graph)]["edges"]
        for i in range(n.value):
            edges.remove((a[i], b[i]))
        return 0

    def cuGraphAddDependencies_v2(self, graph, a, b, data, n):
        self.graphs[self._value(graph)]["edges"] += [(a[i], b[i]) for i in range(n.value)]
        return 0

    def cuGraphInstantiateWithFlags(self, out, graph, flags):
        self.instantiated[77] = list(self.graphs[self._value(graph)]["edges"])
        out._obj.value = 77
        return 0

    def cuGraphDestroy(self, graph):
        del self.graphs[self._value(graph)]
        return 0

    def cuGraphExecDestroy(self, exe):
        self.destroyed.append(self._value(exe))
        return 0


def test_a_branched_graph_gets_a_chained_twin_registered_for_its_executable():
    """A kernel, two branches (a kernel and a memset), an empty node joining them: the twin is a clone whose
    edges are one chain in the graph's order, instantiated and registered for the graph's executable; the clone
    is destroyed (the executable does not need it) and the line says the twin's order of the work nodes."""
    from ccoverlap.doctor.graph_capture import KERNEL, MEMSET, Driver

    empty = 5
    cuda = FakeCuda([KERNEL, KERNEL, MEMSET, empty], [(0, 1), (0, 2), (1, 3), (2, 3)])
    registered = []
    doc = Driver(cuda).topology(1, 9000, lambda exe, twin: registered.append((exe, twin)) or True)
    assert registered == [(9000, 77)] and doc["serial"] == [0, 1, 2] and "no_twin" not in doc
    assert cuda.instantiated[77] == [(5000, 5001), (5001, 5002), (5002, 5003)] and 2 not in cuda.graphs
    assert doc["edges"] == [[0, 1], [0, 2]]  # the graph's own edges, as before


def test_a_chain_needs_no_twin_and_a_refused_or_impossible_one_says_why():
    from ccoverlap.doctor.graph_capture import KERNEL, Driver

    chain = FakeCuda([KERNEL, KERNEL], [(0, 1)])
    doc = Driver(chain).topology(1, 9000, lambda exe, twin: True)
    assert "serial" not in doc and "no_twin" not in doc and not chain.instantiated
    refused = FakeCuda([KERNEL, KERNEL], [])
    doc = Driver(refused).topology(1, 9000, lambda exe, twin: None)  # no interposer loaded
    assert "serial" not in doc and "did not take the twin" in doc["no_twin"] and refused.destroyed == [77]
    memory = FakeCuda([KERNEL, KERNEL, 10], [])  # a graph memory allocation
    doc = Driver(memory).topology(1, 9000, lambda exe, twin: True)
    assert doc["no_twin"] == "it holds graph memory nodes" and not memory.instantiated
    assert len(doc["nodes"]) == 2  # the topology itself still written


@pytest.mark.gpu
def test_the_twin_of_a_graph_torch_captured_on_two_streams_computes_what_the_graph_does():
    """On the GPU: the serial twin of a real two-stream capture, made through the driver as the doctor makes it,
    replayed on new inputs, gives the graph's results; its order puts each node after the node it waits for."""
    import ctypes

    import torch

    from ccoverlap.analysis.graphs import Topology
    from ccoverlap.doctor.graph_capture import Driver

    x = torch.randn(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        y = x * 2
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            z = y + 1
        w = y * 3
        torch.cuda.current_stream().wait_stream(side)
    g.instantiate()
    twins: list[int] = []
    driver = Driver()
    doc = driver.topology(g.raw_cuda_graph(), g.raw_cuda_graph_exec(), lambda exe, twin: twins.append(twin) or True)
    assert "no_twin" not in doc and len(twins) == 1
    topo = Topology.from_json(doc)
    assert topo.serial is not None and topo.serial[0] == 0 and sorted(topo.serial) == [0, 1, 2]
    x.copy_(torch.randn_like(x))
    stream = torch.cuda.current_stream()
    assert driver.lib.cuGraphLaunch(ctypes.c_void_p(twins[0]), ctypes.c_void_p(stream.cuda_stream)) == 0
    torch.cuda.synchronize()
    assert torch.equal(z, x * 2 + 1) and torch.equal(w, x * 2 * 3)
    assert driver.lib.cuGraphExecDestroy(ctypes.c_void_p(twins[0])) == 0
