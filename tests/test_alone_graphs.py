"""CUDA graphs in the alone window (issue 27.2, the analysis's part): a graph replay's kernels share its
correlation; each is matched by its place in the replay (the graph's node order) and keyed apart, and trusted
where it ran with nothing beside it; a graph's parallel branches that overlapped stay unknown, counted, named."""
from __future__ import annotations

import json
from pathlib import Path

import kineto_synth as ks
from ccoverlap.analysis.alone import key_of, with_alone
from ccoverlap.analysis.contention import diagnose
from ccoverlap.analysis.trace import read_trace


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
