"""Why a collective started late (`ccoverlap.analysis.contention`, `deps`, `replay`, `recommend`): constructed
traces with known answers (and alone windows, where a time alone matters), the breakdown invariant, the replay by
mechanism, and the real H200 fixture."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import kineto_synth as ks
from ccoverlap.control import levers
from ccoverlap.analysis import analyze
from ccoverlap.analysis.alone import with_alone
from ccoverlap.analysis.contention import PARTS, diagnose
from ccoverlap.analysis.mechanisms.base import COMM_SLOWED, COMPUTE_SLOWED, SM_WAIT, Cause
from ccoverlap.analysis.mechanisms.sm_wait import RESOURCE_CAUSES
from ccoverlap.analysis.deps import graph
from ccoverlap.analysis.intervals import length
from ccoverlap.analysis.metrics import exposed_intervals, rank_metrics
from ccoverlap.analysis.process import Process
from ccoverlap.analysis.recommend import LEVERS_FOR, NOTHING_TO_GAIN_PCT, verdict
from ccoverlap.analysis.replay import Node, makespan, replay
from ccoverlap.analysis.model import KernelClass, analysed_kernels
from ccoverlap.analysis.reader import read_trace
from ccoverlap.cli import main
from ccoverlap.model.occupancy import CARVEOUT, Resource
from hta_reference import TRACES
from test_analysis import good_trace_files

TOLERANCE_US = 50  # the target: SM-wait within 50 us of what the construction implies
NCCL = dict(stream=13, block=544, grid=24, regs=96, smem=103808, driver=True, args=ks.collective())


def alone_window(kernels, durations=None, start=10_000.0):
    """The alone window of `kernels`: the same launches one after the other (the serialized window), each taking
    its duration in `durations` (default: as measured)."""
    out, t = [], start
    for k, dur in zip(kernels, durations or [k.dur for k in kernels], strict=True):
        out.append(ks.K(**{**vars(k), "ts": t, "dur": dur, "launch_ts": t - 8}))
        t += dur + 20
    return out


def one_rank(tmp_path: Path, kernels, steps=(), name="rank0_trace.json", rank=0, world=1, alone=None, **kw):
    """One rank's trace and diagnosis; `alone`: the durations of its alone window, in `kernels`' order."""
    path = ks.write(tmp_path / name, rank, world, list(kernels), list(steps), **kw)
    trace = read_trace(path)
    if alone is not None:
        apath = ks.write(tmp_path / (name + ".alone.json"), rank, world, alone_window(list(kernels), alone), [])
        trace, _ = with_alone(trace, read_trace(apath))
    return trace, diagnose({trace.rank: trace})[trace.rank]


def comm_of(diagnosis):
    (c,) = diagnosis.comm
    return c


# --- constructed cases: cause and SM-wait known by construction ---

def test_registers_behind_a_full_occupancy_kernel(tmp_path):
    """128 threads x 64 registers, 8 blocks per SM, one full wave: the NCCL CTA (544 x 96) finds no registers
    until the compute drains at 1100; it was ready when its launch call ended (160)."""
    compute = ks.K("fma_kernel", 100, 1000, block=128, grid=8 * 132, regs=64, launch_ts=90, launch_dur=10)
    comm = ks.K(ks.NCCL, 1100, 500, launch_ts=150, launch_dur=10, **NCCL)
    trace, d = one_rank(tmp_path, [compute, comm])
    c = comm_of(d)
    assert c.ready_us == 160 and c.ready_by == "launch"
    assert abs(c.sm_wait_us - 940) <= TOLERANCE_US
    assert c.cause is Cause.REGISTERS and c.blocked_by == ("fma_kernel",)
    # exposed: the comm ran [1100, 1600] alone; it would have run beside the compute from 160
    assert c.exposed == pytest.approx({"sm_wait": 500, "slowdown": 0, "dependency": 0, "skew": 0})
    # replayed without its wait: comm at 160 beside the compute, done at 660; the step ends with the compute at 1100
    assert d.headroom_ms == pytest.approx(0.5) and d.step_ms == pytest.approx(1.5)
    assert d.mechanism_ms()[SM_WAIT + "registers"] == pytest.approx(0.5)
    # but no lever makes room: 8 blocks x 128 x 64 registers fill the SM (a 288-thread CTA does not fit either),
    # the grid is one wave (priority has no retiring block to hand over) and it was launched before the
    # collective (a pad only reaches compute launched while communication is in flight)
    v = verdict([d])
    assert v.recommendations == () and v.lever_headroom_ms == 0
    assert v.line.startswith("nothing a scheduling lever can do: headroom 0.500 ms (33.3%)")
    assert "registers SM-wait behind fma_kernel, which holds every SM: only an SM partition" in v.line
    (finding,) = rank_metrics("s", trace, diagnosis=d).findings
    assert finding.rule == "persistent_holds_sms" and "a hang" in finding.says


def test_registers_behind_a_multi_wave_grid_yield_to_priority(tmp_path):
    """The same full-register blocks in three waves (333 us each): a high-priority collective takes the registers
    of the first blocks to retire, as a thread-bound one does (held-out unfused attention, H100: priority realized
    0.329 ms behind a softmax's register-bound grid). The one-wave case above has nothing to hand over."""
    compute = ks.K("fma_kernel", 100, 1000, block=128, grid=3 * 8 * 132, regs=64, launch_ts=90, launch_dur=10)
    comm = ks.K(ks.NCCL, 1100, 500, launch_ts=150, launch_dur=10, **NCCL)
    _, d = one_rank(tmp_path, [compute, comm])
    assert comm_of(d).cause is Cause.REGISTERS
    v = verdict([d])
    assert v.recommendations[0].lever == "priority"
    assert 0 < v.recommendations[0].gain_ms <= d.headroom_ms == pytest.approx(0.5)


def test_a_smaller_nccl_cta_fits_beside_a_low_register_kernel(tmp_path):
    """Four 128 x 32-register blocks with 24 KB each per SM leave 48K registers and the shared memory: NCCL's
    544 x 96 CTA needs 52K registers, 288 threads (NCCL_NTHREADS=256 and Simple's sync warp) 27.6K: nccl-threads
    makes room."""
    compute = ks.K("fma_kernel", 100, 1000, block=128, grid=4 * 132, regs=32, smem=24576, launch_ts=90, launch_dur=10)
    comm = ks.K(ks.NCCL, 1100, 500, launch_ts=150, launch_dur=10, **NCCL)
    _, d = one_rank(tmp_path, [compute, comm])
    assert comm_of(d).cause is Cause.REGISTERS
    v = verdict([d])
    assert [r.lever for r in v.recommendations] == ["nccl-threads"] and v.lever_headroom_ms == pytest.approx(0.5)
    assert "100% of allreduce SM-wait is registers behind fma_kernel" in v.recommendations[0].evidence


def test_shape_reaches_only_compute_launched_after_the_collective(tmp_path):
    """The same wait behind a kernel launched (CPU side) after the collective: the interposer's gate pads it, and
    a pad of 128-thread, 16-register blocks makes room for the CTA."""
    compute = ks.K("fma_kernel", 100, 1000, block=128, grid=8 * 132, regs=16, launch_ts=80, launch_dur=10)
    comm = ks.K(ks.NCCL, 1100, 500, launch_ts=60, launch_dur=10, **NCCL)
    _, d = one_rank(tmp_path, [comm, compute])
    c = comm_of(d)
    assert c.cause is Cause.THREADS or c.cause is Cause.SHARED_MEMORY or c.cause is Cause.REGISTERS
    assert "shape" in [r.lever for r in verdict([d]).recommendations]


def test_carveout_behind_a_zero_smem_elementwise_kernel(tmp_path):
    """One 128-thread, 0 B block per SM (as the H200 carveout measurement): threads and registers leave room,
    but the SM took the configuration of a 0 B kernel, too small for NCCL's 104 KB."""
    elementwise = ks.K(ks.ELEMENTWISE, 100, 2000, block=128, grid=132, regs=32, smem=0, launch_ts=90)
    comm = ks.K(ks.NCCL, 2100, 400, launch_ts=200, **NCCL)
    _, d = one_rank(tmp_path, [elementwise, comm])
    c = comm_of(d)
    assert c.cause is Cause.CARVEOUT and abs(c.sm_wait_us - 1896) <= TOLERANCE_US
    top = verdict([d]).recommendations[0]
    assert [r.lever for r in verdict([d]).recommendations] == ["carveout-hint"]  # launched after: not launch order
    assert top.evidence.startswith("100% of allreduce SM-wait is carveout behind "
                                   "at::native::vectorized_elementwise_kernel")


def test_a_collective_launched_before_its_blocker_is_dispatched_first_from_one_queue(tmp_path):
    """The same wait where the collective was launched (and ready) before the kernel that blocked it: one hardware
    queue (max-connections=1) dispatches it first. The hint stays first (the table's order at an equal gain)."""
    elementwise = ks.K(ks.ELEMENTWISE, 100, 2000, block=128, grid=132, regs=32, smem=0, launch_ts=60)
    comm = ks.K(ks.NCCL, 2100, 400, launch_ts=40, **NCCL)
    _, d = one_rank(tmp_path, [comm, elementwise])
    recs = verdict([d]).recommendations
    assert [r.lever for r in recs] == ["carveout-hint", "max-connections"] and recs[0].gain_ms == recs[1].gain_ms


def test_dispatch_order_behind_a_multi_wave_grid(tmp_path):
    """A 6-wave grid (2 blocks/SM by shared memory) leaves room for a small comm CTA beside it, but equal
    priority dispatches the comm only after the grid's last wave was dispatched (at 5100)."""
    grid = ks.K("padded_kernel", 100, 6000, block=256, grid=6 * 2 * 132, regs=16, smem=100000, launch_ts=90,
                launch_dur=10)
    comm = ks.K("ncclDevKernel_SendRecv", 5100, 1500, stream=13, block=256, grid=16, regs=32, smem=16384,
                launch_ts=990, launch_dur=10)
    _, d = one_rank(tmp_path, [grid, comm])
    c = comm_of(d)
    assert c.ready_us == 1000 and abs(c.sm_wait_us - 4100) <= TOLERANCE_US
    assert c.cause is Cause.DISPATCH_ORDER and c.blocked_by == ("padded_kernel",)
    assert any("priorities" in n for n in d.notes)  # the equal-priority assumption is said
    assert c.exposed["sm_wait"] == 500 and d.headroom_ms == pytest.approx(0.5)  # it ran past the grid's end by 500
    # priority; not max-connections: one hardware queue dispatches in launch order, and the collective came second
    assert [r.lever for r in verdict([d]).recommendations] == ["priority"]


def test_cluster_when_idle_sms_could_not_take_a_cluster(tmp_path):
    """A 100-block grid leaves 32 SMs idle; NCCL's CTA does not fit beside it (registers) but would fit on the idle
    SMs: with NCCL's default clusters of 4 (assumed, and said) the cause is cluster; told clusters of 1, unknown."""
    compute = ks.K("wide_kernel", 100, 1000, block=1024, grid=100, regs=64, launch_ts=90)
    comm = ks.K(ks.NCCL, 1100, 300, launch_ts=200, **NCCL)
    trace, d = one_rank(tmp_path, [compute, comm])
    assert comm_of(d).cause is Cause.CLUSTER and any("cluster" in n for n in d.notes)
    assert verdict([d]).recommendations[0].lever == "nccl-cluster=1"
    told = diagnose({0: trace}, comm_cluster=1)[0]
    assert comm_of(told).cause is Cause.UNKNOWN and not any("cluster" in n for n in told.notes)


def test_no_wait_is_cause_none(tmp_path):
    compute = ks.K(ks.GEMM, 100, 1000, block=384, grid=132, regs=168, smem=213504, launch_ts=90)
    comm = ks.K(ks.NCCL, 300, 400, launch_ts=290, launch_dur=5, **NCCL)  # starts 5 us after its call ended
    _, d = one_rank(tmp_path, [compute, comm])
    c = comm_of(d)
    assert c.cause is Cause.NONE and c.sm_wait_us == 5 and c.blocked_by == ()


def _event_case(tmp_path, *, sync: bool = True, record_known: bool = False, cuda_event: bool = False,
                record_tid: int | None = None, **extra):
    """A GEMM on stream 7 [100, 600]; an event recorded after its launch, stream 13 waits for it, then an
    all-reduce is launched on stream 13 (ready when the GEMM ends, starts 5 us later)."""
    gemm = ks.K(ks.GEMM, 100, 500, block=384, grid=132, regs=168, smem=213504, launch_ts=95, launch_dur=5)
    comm = ks.K(ks.NCCL, 605, 500, launch_ts=115, **NCCL)
    record = ks.Call("cudaEventRecordWithFlags", 110, 1, tid=record_tid)
    wait = ks.Call("cudaStreamWaitEvent", 112, 1)
    waits = [ks.Wait(wait, 13, event_id=7, wait_on_stream=7 if record_known else -1,
                     record=record if record_known else None)] if sync else []
    return one_rank(tmp_path, [gemm, comm], calls=[record, wait], waits=waits,
                    cuda_events=[(record, 7, 7)] if cuda_event else [], **extra)


@pytest.mark.parametrize("how", ["thread-fallback", "record-correlation", "cuda-event-id"])
def test_event_dependency_makes_the_collective_ready_when_the_compute_ends(tmp_path, how):
    trace, d = _event_case(tmp_path, record_known=how == "record-correlation", cuda_event=how == "cuda-event-id")
    c = comm_of(d)
    assert (c.ready_us, c.ready_by, c.sm_wait_us, c.cause, c.unresolved) == (600, "event", 5, Cause.NONE, ())
    assert c.exposed == pytest.approx({"sm_wait": 0, "slowdown": 0, "dependency": 500, "skew": 0})
    assert d.headroom_ms == 0  # a 5 us launch gap is no mechanism a lever removes
    assert verdict([d]).line.startswith("nothing to gain here: headroom 0.000 ms (0.0%)")
    assert any("same CPU thread" in n for n in d.notes) == (how == "thread-fallback")


def test_a_join_recorded_after_the_main_streams_launch_waits_for_the_side_stream(tmp_path):
    """torch 2.11 names neither the record's stream nor its call: the thread's last launch before the record is
    the main stream's own GEMM, and a stream waiting on its own work would be a no-op, so the join (the record on
    the collective's stream) is matched to the collective, which ended just before the gated kernel started."""
    comm = ks.K(ks.NCCL, 100, 500, launch_ts=90, **NCCL)  # stream 13, [100, 600]
    gemm = ks.K(ks.GEMM, 100, 300, block=384, grid=132, regs=168, smem=213504, launch_ts=95)  # stream 7, [100, 400]
    after = ks.K(ks.ELEMENTWISE, 602, 10, launch_ts=115)  # stream 7: started when the collective ended
    record = ks.Call("cudaEventRecordWithFlags", 105, 1)
    wait = ks.Call("cudaStreamWaitEvent", 108, 1)
    trace, _ = one_rank(tmp_path, [comm, gemm, after], calls=[record, wait], waits=[ks.Wait(wait, 7, event_id=3)])
    g = graph(trace)
    (i,) = [n for n, k in enumerate(trace.kernels) if k.name == ks.ELEMENTWISE]
    (c,) = [n for n, k in enumerate(trace.kernels) if k.stream == 13]
    assert g.events.get(i) == (c,)
    # the collective ending after the gated kernel started was not what it waited for: as before, no edge
    late = ks.K(ks.ELEMENTWISE, 450, 10, launch_ts=115)
    trace, _ = one_rank(tmp_path / "late", [comm, gemm, late], calls=[record, wait],
                        waits=[ks.Wait(wait, 7, event_id=3)])
    assert not graph(trace).events


def test_a_wait_skips_the_later_records_of_its_own_streams_work(tmp_path):
    """FSDP2's copy-in stream waits for the copy-out recorded on the main stream, and the thread records events
    after its own copy-in launches in between (torch 2.11 names neither record's stream): the latest record whose
    producer is on the waiting stream itself would be a no-op wait, so the copy-out's record is the one matched,
    and the copy-in waits for it (the main stream's next kernel, a gather, ended after the copy-in started: not it)."""
    copy_out = ks.K(ks.ELEMENTWISE, 100, 200, launch_ts=90)  # stream 7, [100, 300]
    gather = ks.K("gather", 300, 40, launch_ts=97)  # stream 7, after the copy-out's record
    copy_in = ks.K("copy_in", 50, 20, stream=15, launch_ts=100)  # stream 15, launched after the copy-out
    gated = ks.K("copy_in_next", 302, 20, stream=15, launch_ts=130)  # started as the copy-out ended
    out_record = ks.Call("cudaEventRecordWithFlags", 95, 1)  # after the copy-out's launch
    own_record = ks.Call("cudaEventRecordWithFlags", 110, 1)  # after the copy-in's launch: its own stream's work
    wait = ks.Call("cudaStreamWaitEvent", 120, 1)
    trace, _ = one_rank(tmp_path, [copy_out, gather, copy_in, gated], calls=[out_record, own_record, wait],
                        waits=[ks.Wait(wait, 15, event_id=3)])
    names = [k.name for k in trace.kernels]
    assert graph(trace).events == {names.index("copy_in_next"): (names.index(ks.ELEMENTWISE),)}


def test_a_record_waits_for_the_streams_work_another_thread_launched(tmp_path):
    """torch's backward launches from its autograd thread onto the stream the main thread then records on: the
    record (its stream unknown, torch 2.11) is matched to the stream of the main thread's last launch, and the
    collective waits for that stream's last launch from any thread (the backward's), not the main thread's."""
    forward = ks.K(ks.ELEMENTWISE, 100, 10, launch_ts=90)  # stream 7, the main thread
    backward = ks.K(ks.GEMM, 120, 400, block=384, grid=132, regs=168, smem=213504, launch_ts=100, tid=99)
    comm = ks.K(ks.NCCL, 525, 300, launch_ts=115, **NCCL)  # stream 13: started as the backward ended
    record, wait = ks.Call("cudaEventRecordWithFlags", 110, 1), ks.Call("cudaStreamWaitEvent", 112, 1)
    trace, d = one_rank(tmp_path, [forward, backward, comm], calls=[record, wait],
                        waits=[ks.Wait(wait, 13, event_id=7)])
    names = [k.name for k in trace.kernels]
    assert graph(trace).events == {names.index(ks.NCCL): (names.index(ks.GEMM),)}
    c = comm_of(d)
    assert (c.ready_us, c.ready_by, c.sm_wait_us) == (520, "event", 5)


def test_a_record_on_another_thread_is_unresolved_and_listed(tmp_path):
    _, d = _event_case(tmp_path, record_tid=77)
    c = comm_of(d)
    assert c.ready_us == 119 and c.unresolved and "no earlier call on its thread" in str(c.unresolved[0])
    assert c.cause is Cause.UNKNOWN and c.exposed["sm_wait"] == 0
    assert any("could not be matched" in n for n in d.notes)


def test_an_unresolved_wait_reads_as_its_message(tmp_path):
    """An unresolved reason is kept as a template, the stream and the wait's time (deps.Unresolved): its text is
    the message it stands for, braces in the producer's name included (a template's own braces are fields)."""
    name = "void gemm<{lambda(float)#1}>(float*)"
    gemm = ks.K(name, 100, 600, block=384, grid=132, regs=168, smem=213504, launch_ts=95, launch_dur=5)
    comm = ks.K(ks.NCCL, 605, 500, launch_ts=115, **NCCL)  # started before the GEMM it waited for ended
    record, wait = ks.Call("cudaEventRecordWithFlags", 110, 1), ks.Call("cudaStreamWaitEvent", 112, 1)
    _, d = one_rank(tmp_path, [gemm, comm], calls=[record, wait],
                    waits=[ks.Wait(wait, 13, event_id=7, wait_on_stream=7, record=record)])
    (why,) = comm_of(d).unresolved
    assert str(why) == f"stream 13 waited at 112.000: the matched producer {name!r} ends after the kernel started"


def test_a_trace_without_cuda_sync_events_says_what_it_could_not_resolve(tmp_path, capsys):
    """The same program recorded without sync events: the cudaStreamWaitEvent call has no record, so the
    all-reduce after it has an unknown dependency, listed; its 486 us 'wait' is not called SM contention."""
    trace, d = _event_case(tmp_path, sync=False)
    c = comm_of(d)
    assert c.ready_us == 119 and c.cause is Cause.UNKNOWN and len(c.unresolved) == 1
    assert "no Stream Wait Event record" in str(c.unresolved[0])
    assert c.exposed == pytest.approx({"sm_wait": 0, "slowdown": 0, "dependency": 500, "skew": 0})
    assert d.headroom_ms == 0  # released at its measured start: no gain claimed behind an unknown wait
    code = main(["analyze", str(tmp_path), "--json", "-", "--rows"])
    out = capsys.readouterr()
    (line,) = [x for x in out.err.splitlines() if "stream wait" in x]
    assert code == 0 and "1 stream wait(s) without a Stream Wait Event record" in line
    assert "enable_cuda_sync_events=True" in line
    assert json.loads(out.out)["ranks"][0]["comm_kernels"][0]["cause"] == "unknown"


def test_two_ranks_with_skew(tmp_path):
    """Rank 0 reaches the all-reduce at 100, rank 1 at 700: rank 0's kernel runs 1000 us, 600 of them waiting for
    its peer (skew). In the alone window rank 0 waits for rank 1 again (700 us), rank 1 takes 410: the collective's
    time alone is the fewest, the rank that started it last."""
    for rank, start, dur, alone in ((0, 100, 1000, 700), (1, 700, 400, 410)):
        k = ks.K(ks.NCCL, start, dur, launch_ts=start - 10, launch_dur=10, **NCCL)
        ks.write(tmp_path / f"rank{rank}_trace.json", rank, 2, [k], [])
        ks.write(tmp_path / f"rank{rank}_trace.alone.gz", rank, 2, alone_window([k], [alone]), [])
    result = analyze(tmp_path)
    d0, d1 = (r.diagnosis for r in result.ranks)
    c0, c1 = comm_of(d0), comm_of(d1)
    assert (c0.skew_us, c1.skew_us, c0.uncontended_us, c1.uncontended_us) == (600, 0, 410, 410)
    assert c0.exposed == pytest.approx({"sm_wait": 0, "slowdown": 0, "dependency": 400, "skew": 600})
    assert c1.exposed == pytest.approx({"sm_wait": 0, "slowdown": 0, "dependency": 400, "skew": 0})
    assert d0.headroom_ms == 0  # no scheduler on rank 0 removes its peer's lateness
    v = verdict([d0, d1])
    assert v.recommendations == () and v.unrecoverable_ms == pytest.approx({"skew": 0.3, "dependency": 0.4})
    assert [m.to_dict() for m in result.alone.values()] == [
        {"launches": 1, "matched": 1, "unmatched": 0, "first_unmatched": None, "steps": [1, 1]}] * 2


def test_the_exposed_parts_are_the_median_typical_steps_as_the_headroom_is(tmp_path):
    """Four profiler steps, each a 500 us collective that nothing overlaps (dependency); the last is not analysed
    (the profiler cuts it short): the verdict says 0.500 ms, the median step's, not the 1.500 ms of the three
    (beside a per-step headroom, a part that grows with the steps profiled)."""
    kernels = [ks.K(ks.NCCL, 2000 * n + 100, 500, launch_ts=2000 * n + 90, launch_dur=5, **NCCL) for n in range(4)]
    _, d = one_rank(tmp_path, kernels, steps=[(2000 * n, 2000) for n in range(4)])
    assert d.exposed_ms["dependency"] == pytest.approx(1.5)  # the rank's own record: every analysed step
    v = verdict([d])
    assert v.unrecoverable_ms["dependency"] == pytest.approx(0.5) and v.exposed_ms["dependency"] == pytest.approx(0.5)
    assert "exposed beyond any lever: dependency 0.500 ms" in v.line

@pytest.mark.parametrize(("step_ms", "said"), [((1.0, 1.2), True), ((1.15, 1.2), False), ((None, None), False)])
def test_steps_the_profiler_paced_by_the_host_are_said_to_hide_queued_contention(tmp_path, step_ms, said):
    """Each step: two kernels 300 us apart (the GPU idle 27% of the step, waiting for the host's launch). Where the
    profiler also slowed the steps 20% against the program's own, its launches queue ahead of the GPU unprofiled:
    the verdict says what the profiled steps cannot show; at 4% slower, or with no step records, it says nothing."""
    kernels = [ks.K(ks.ELEMENTWISE, 2000 * n + at, 400, launch_ts=2000 * n + at - 5)
               for n in range(4) for at in (100, 800)]
    trace = read_trace(ks.write(tmp_path / "rank0_trace.json", 0, 1, kernels, [(2000 * n, 2000) for n in range(4)]))
    d = diagnose({0: trace}, processes={0: Process(step_ms=step_ms)})[0]
    line = verdict([d]).line
    assert line.startswith("nothing to gain here")
    assert ("paced these steps by the host (rank 0's GPU idle 27% of the median typical step, 1.20 ms a step "
            "against 1.00 ms unprofiled)" in line) == said and ("paced" in line) == said


def test_held_steps_are_never_said_to_be_paced_by_the_host(tmp_path):
    """The same steps with the GPU idle 27% of each, profiled 20% slower than the program's own: held (the doctor's
    hold queued their launches), the idle is the program's, not the profiler's pacing, and nothing is said."""
    kernels = [ks.K(ks.ELEMENTWISE, 2000 * n + at, 400, launch_ts=2000 * n + at - 5)
               for n in range(4) for at in (100, 800)]
    trace = read_trace(ks.write(tmp_path / "rank0_trace.json", 0, 1, kernels, [(2000 * n, 2000) for n in range(4)]))
    said = [verdict([diagnose({0: trace}, processes={0: Process(step_ms=(1.0, 1.2), held=held)})[0]]).line
            for held in (False, True)]
    assert "paced" in said[0] and "paced" not in said[1]


def _slowed(tmp_path, alone):
    """A GEMM [100, 1100] and an all-reduce that took 1000 us beside it from 300 (it ended at 1300)."""
    kernels = [ks.K(ks.GEMM, 100, 1000, block=384, grid=132, regs=168, smem=213504, launch_ts=90),
               ks.K(ks.NCCL, 300, 1000, launch_ts=290, launch_dur=5, **NCCL)]
    return one_rank(tmp_path, kernels, alone=alone)


def test_slowdown_against_the_launch_measured_alone(tmp_path):
    """The all-reduce took 300 us in the alone window: 1000 beside the GEMM is a slowdown, and replayed at 300 the
    step ends with the GEMM at 1100, 200 us sooner. No lever is known to remove it: headroom beyond any lever."""
    _, d = _slowed(tmp_path, alone=[1000, 300])
    c = comm_of(d)
    assert c.uncontended_us == 300 and c.slowdown == pytest.approx(1000 / 300)
    # exposed [1100, 1300]: slowdown explains it (it would have ended at 600 alone)
    assert c.exposed == pytest.approx({"sm_wait": 0, "slowdown": 200, "dependency": 0, "skew": 0})
    assert d.mechanism_ms()[COMM_SLOWED] == pytest.approx(0.2) and d.headroom_ms == pytest.approx(0.2)
    v = verdict([d])
    assert v.recommendations == () and v.line.startswith("nothing a scheduling lever can do: headroom 0.200 ms")
    assert "collectives ran 0.200 ms slower than alone beside compute: no lever is known" in v.line


def test_without_an_alone_window_slowdown_is_unknown_not_guessed(tmp_path):
    """The same run with no alone window: its slowdown, and what it costs, are unknown (None), never a guess
    from another launch; the SM-wait (read off the timeline) still counts."""
    trace, d = _slowed(tmp_path, alone=None)
    c = comm_of(d)
    assert c.uncontended_us is None and c.slowdown is None
    assert d.exposed_ms["slowdown"] is None and d.mechanism_ms()[COMM_SLOWED] is None
    assert d.compute_slowdown_beside_comm is None and not d.slowdown_known
    v = verdict([d])
    assert "unknown (no alone window" in v.line and v.by_mechanism_ms[COMM_SLOWED] is None
    rank = rank_metrics("s", trace, diagnosis=d).to_dict()
    assert rank["exposed_comm_breakdown_ms"]["slowdown"] is None and rank["alone_us"] is None
    assert rank["comm_kernels"][0]["slowdown"] is None


def test_compute_slowdown_beside_communication(tmp_path):
    """The elementwise kernel took 100 us alone (measured) and 150 beside the all-reduce."""
    kernels = [ks.K(ks.ELEMENTWISE, 100, 100, block=128, grid=132, regs=32, launch_ts=90),
               ks.K(ks.ELEMENTWISE, 300, 150, block=128, grid=132, regs=32, launch_ts=290, launch_dur=10),
               ks.K(ks.NCCL, 300, 100, launch_ts=290, launch_dur=10, **NCCL)]
    _, d = one_rank(tmp_path, kernels, alone=[100, 100, 100])
    assert d.compute_slowdown_beside_comm == pytest.approx(1.5)
    assert d.headroom_ms == pytest.approx(0.05)  # unslowed, the second kernel ends at 400, not 450
    assert d.mechanism_ms()[COMPUTE_SLOWED] == pytest.approx(0.05)
    # fewer or smaller NCCL CTAs would relieve the kernel, but the collective (24 CTAs, 100 us) would then take
    # 3x-12x longer and end the step later: no lever is named whose net is not a gain
    (s,) = d.compute_slowed
    assert s.cause == "unknown" and s.alone_us == 100
    v = verdict([d])
    assert v.recommendations == ()
    assert (v.line.startswith("nothing a scheduling lever can do")
            and "nccl-ctas=8: the collectives longer, the step" in v.line)
    assert "cause unknown (shared SM throughput or memory bandwidth" in v.line


def test_same_name_and_shape_with_different_work_is_not_a_slowdown(tmp_path):
    """The issue's program: a 300 us and a 3 ms launch of one kernel name and launch shape, a collective beside the
    long one. Each launch is matched to its own time alone: the long one is not "10x slower" than the short."""
    kernels = [ks.K("busy_kernel", 100, 300, grid=132, launch_ts=90),
               ks.K("busy_kernel", 410, 3000, grid=132, launch_ts=95),
               ks.K(ks.NCCL, 410, 1000, launch_ts=300, **NCCL)]
    _, d = one_rank(tmp_path, kernels, alone=[300, 3000, 1000])
    assert d.compute_slowdown_beside_comm == pytest.approx(1.0) and d.headroom_ms == 0
    assert verdict([d]).line.startswith("nothing to gain here")


# --- the breakdown: its four parts are the exposed communication ---

def _random_traces(tmp_path: Path) -> list[Path]:
    out = []
    for seed in range(4):
        kernels, steps = ks.random_run(seed, 6, float_times=seed % 2 == 1)
        out.append(ks.write(tmp_path / f"r{seed}" / "rank0_trace.json", 0, 1, kernels, steps if seed < 3 else []))
    return out


def test_breakdown_parts_sum_to_the_exposed_communication(tmp_path):
    paths = good_trace_files() + _random_traces(tmp_path)
    for path in paths:
        trace = read_trace(path)
        m = rank_metrics("s", trace)
        parts = m.diagnosis.exposed_ms  # no alone window: slowdown unknown, its time in dependency
        assert list(parts) == list(PARTS) and parts["slowdown"] is None, path
        assert all(v >= 0 for p, v in parts.items() if p != "slowdown"), path
        assert sum(v or 0 for v in parts.values()) * 1000 == pytest.approx(m.exposed_comm_us, abs=1e-3), path
        assert sum(c.exposed_us for c in m.diagnosis.comm) == pytest.approx(
            length(exposed_intervals(analysed_kernels(trace))), abs=1e-3)


# --- the ideal replay on hand-built graphs ---

def test_replay_chain_parallel_and_join():
    a, b = Node(0, 10), Node(2, 20)  # two streams, no dependency
    c = Node(0, 5, deps=(0, 1))  # waits for both (an event and its stream)
    assert replay([a, b, c]) == [(0, 10), (2, 22), (22, 27)] and makespan([a, b, c]) == 27
    assert replay([Node(0, 10), Node(50, 1, deps=(0,))]) == [(0, 10), (50, 51)]  # released after its dependency
    assert replay([Node(0, 10), Node(0, 10, after=((0, 3),))]) == [(0, 10), (3, 13)]  # a measured start-to-start lag
    assert makespan([]) == 0


def test_replay_refuses_a_dependency_that_comes_later():
    with pytest.raises(ValueError, match="must come earlier"):
        replay([Node(0, 1, deps=(1,)), Node(0, 1)])


def test_headroom_is_never_negative_and_below_the_step(tmp_path):
    for path in good_trace_files() + _random_traces(tmp_path):
        d = rank_metrics("s", read_trace(path)).diagnosis
        assert all(0 <= s.headroom_us <= s.span_us for s in d.steps), path


# --- tables: one mapping from the occupancy model, levers from the registry ---

def test_every_blocking_resource_has_one_cause():
    assert set(RESOURCE_CAUSES) == {r.value for r in Resource} | {CARVEOUT}
    assert {c.value for c in RESOURCE_CAUSES.values()} == {"registers", "threads", "shared_memory", "blocks",
                                                           "carveout"}
    assert [c.value for c in Cause] == ["none", "registers", "threads", "shared_memory", "carveout", "blocks",
                                        "cluster", "dispatch_order", "unknown"]


def test_every_recommended_lever_is_in_the_registry():
    for what, remedies in LEVERS_FOR.items():
        for r in remedies:
            strategy = levers.strategy(r.lever)  # parses, with its value in the lever's domain
            assert all(lever in levers.BY_NAME for lever, _ in strategy.levers), (what, r.lever)
    causes = {SM_WAIT + c.value for c in Cause} - {SM_WAIT + "none", SM_WAIT + "unknown"}
    assert causes | {COMM_SLOWED, COMPUTE_SLOWED} == set(LEVERS_FOR)  # every mechanism has its row (maybe empty)
    assert LEVERS_FOR[COMM_SLOWED] == ()  # no lever is known to remove it: none is named


def test_nothing_to_gain_below_the_threshold(tmp_path):
    kernels = [ks.K(ks.GEMM, 100, 1000, block=384, grid=132, regs=168, smem=213504, launch_ts=90, launch_dur=10)]
    _, d = one_rank(tmp_path, kernels)
    v = verdict([d])
    assert d.headroom_ms == 0 and v.headroom_pct < NOTHING_TO_GAIN_PCT and v.recommendations == ()
    assert v.line == "nothing to gain here: headroom 0.000 ms (0.0%)"


# --- the model: launches (runtime and driver), waits; windows ---

def test_driver_launches_and_sync_records_are_in_the_model(tmp_path):
    trace, _ = _event_case(tmp_path, record_known=True)
    comm = next(k for k in trace.kernels if k.kind is KernelClass.COMMUNICATION)
    call = trace.launches[comm.correlation]  # launched with cuLaunchKernelEx (cat cuda_driver)
    assert (call.ts, call.end, call.tid) == (115, 119, 4242)
    (w,) = trace.waits
    assert (w.stream, w.event_id, w.wait_on_stream) == (13, 7, 7)
    assert trace.launches[w.record_correlation].ts == 110 and trace.launches[w.correlation].ts == 112
    assert len(trace.records) == len(trace.wait_calls) == 1
    assert comm.collective[:2] == ("allreduce", 1 << 20)
    g = graph(trace)
    assert g.events == {trace.kernels.index(comm): (0,)} and not g.unresolved


def test_foreign_collective_args_are_keys_too(tmp_path):
    """Collective args of a shape torch does not write (a list, an object) still identify the collective."""
    odd = dict(NCCL, args={"Collective name": ["allreduce"], "In msg nelems": {"n": 4}})
    trace, d = one_rank(tmp_path, [ks.K(ks.NCCL, 100, 50, **odd), ks.K(ks.NCCL, 200, 70, **odd)], alone=[40, 60])
    assert trace.kernels[0].collective[:2] == ('["allreduce"]', '{"n": 4}')
    assert [c.uncontended_us for c in d.comm] == [40, 60]  # each launch its own, not the fastest of the two


def test_a_trace_without_profiler_steps_is_one_window(tmp_path):
    kernels, _ = ks.random_run(3, 3)
    trace, d = one_rank(tmp_path, kernels)
    assert [s.name for s in d.steps] == ["trace"] and len(d.comm) == 3
    kernels, steps = ks.random_run(3, 3)
    _, d = one_rank(tmp_path, kernels, steps, name="rank1_trace.json")
    assert [s.name for s in d.steps] == ["ProfilerStep#1", "ProfilerStep#2"]  # the last step is not analysed


# --- the JSON and the terminal ---

def test_json_has_the_doctor_keys(tmp_path, capsys):
    compute = ks.K("fma_kernel", 100, 1000, block=128, grid=8 * 132, regs=64, launch_ts=90, launch_dur=10)
    ks.write(tmp_path / "rank0_trace.json", 0, 1, [compute, ks.K(ks.NCCL, 1100, 500, launch_ts=150,
                                                                   launch_dur=10, **NCCL)], [])
    assert main(["analyze", str(tmp_path), "--json", "-", "--rows"]) == 0
    rank = json.loads(capsys.readouterr().out)["ranks"][0]
    (c,) = rank["comm_kernels"]
    assert {"name", "start_us", "ready_us", "sm_wait_us", "blocked_by", "cause", "slowdown"} <= set(c)
    assert (c["name"], c["start_us"], c["ready_us"], c["sm_wait_us"], c["blocked_by"], c["cause"], c["slowdown"]) == (
        ks.NCCL, 1100, 160, 940, ["fma_kernel"], "registers", None)
    assert rank["exposed_comm_breakdown_ms"] == {"sm_wait": 0.5, "slowdown": None, "dependency": 0, "skew": 0}
    assert rank["scheduling_headroom_ms"] == pytest.approx(0.5) and rank["lever_headroom_ms"] == 0
    assert rank["headroom_by_mechanism_ms"] == {SM_WAIT + "registers": 0.5, COMM_SLOWED: None}
    assert rank["recommendations"] == [] and rank["verdict"].startswith("nothing a scheduling lever can do")
    assert [f["rule"] for f in rank["findings"]] == ["persistent_holds_sms"]


def test_terminal_prints_a_verdict_per_strategy(capsys):
    assert main(["analyze", str(TRACES / "strategies")]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("verdict ")]
    assert [x.split(":")[0] for x in lines] == ["verdict default", "verdict shaping"]
    assert all("headroom" in x for x in lines)


# --- the real traces: 2 x H200, no CUDA sync events ---

@pytest.mark.parametrize("strategy", ["isolated", "default", "priority"])
def test_real_h200_traces_give_sane_values(strategy):
    result = analyze(TRACES / "h200" / strategy, TRACES / "h200" / "isolated")
    assert [r.rank for r in result.ranks] == [0, 1]
    for r in result.ranks:
        d = r.diagnosis
        assert len(d.comm) == 3 and all(c.kernel.collective[0] == "allreduce" for c in d.comm)
        for c in d.comm:
            step = next(s for s in d.steps if s.name == c.step)
            assert 0 <= c.sm_wait_us <= step.span_us and c.skew_us >= 0 and c.slowdown is None  # no alone window
            assert c.unresolved and c.cause in (Cause.NONE, Cause.UNKNOWN)  # no sync events: waits unresolved
        parts = [v for v in d.exposed_ms.values() if v is not None]
        assert 0 <= d.headroom_ms <= d.step_ms and all(not math.isnan(v) and v >= 0 for v in parts)
        assert sum(parts) * 1000 == pytest.approx(r.exposed_comm_us, abs=1e-3)
    assert any("without a Stream Wait Event record" in p.message for p in result.problems)
    if strategy == "isolated":  # collectives run alone: their exposed time is dependency (and skew), nothing to gain
        assert all(r.diagnosis.exposed_ms["dependency"] > 2.5 for r in result.ranks)
        assert verdict([r.diagnosis for r in result.ranks]).line.startswith("nothing to gain here")


def test_without_communication_there_is_no_headroom(tmp_path):
    """Compute kernels of one shape with different durations and no collective: nothing for a scheduler to
    recover (their spread is not contention)."""
    kernels = [ks.K("gemm_kernel", 100.0 + 200.0 * i, 100.0 + 40.0 * (i % 3), launch_ts=90.0 + 200.0 * i)
               for i in range(12)]
    _, diagnosis = one_rank(tmp_path, kernels)
    # crediting the slower instances with the mean duration claimed 0.046 ms here; launch latency is no mechanism
    assert diagnosis.headroom_ms == 0


def _one_late_step(tmp_path, late_start: float, comm_us: float):
    """Five profiler steps (four analysed) of one launch sequence: a 0 B elementwise kernel (2000 us), then a 350 us
    kernel; the collective (`comm_us`, 101 KB) launched 100 us into the step, ready at 104 us, and started then in
    every step but the fourth, where it starts at `late_start` (waiting for the elementwise kernel's SMs: carveout)."""
    kernels = []
    for n in range(5):
        b = 4000 * n + 100
        kernels += [ks.K(ks.ELEMENTWISE, b, 2000, block=128, grid=132, regs=32, smem=0, launch_ts=b - 10),
                    ks.K(ks.NCCL, b + (late_start if n == 3 else 104), comm_us, launch_ts=b + 100, **NCCL),
                    ks.K("fma_kernel", b + 2000, 350, block=128, grid=132, regs=32, launch_ts=b + 110)]
    _, d = one_rank(tmp_path, kernels, steps=[(4000 * n, 4000) for n in range(5)])
    assert [c.cause for c in d.comm] == [Cause.NONE] * 3 + [Cause.CARVEOUT]
    return verdict([d])


def test_a_lever_seen_in_some_typical_steps_only_is_named_with_the_steps_where_the_median_has_nothing(tmp_path):
    """A 500 us collective: in steps #1-#3 the step ends with the 350 us kernel at 2350 us; in #4 the collective
    starts at 2000 us and ends the step at 2500 us. The median step has nothing to gain; #4's replay without the wait
    ends 0.150 ms sooner (6% of it), so the verdict names the carveout hint with the step where it reaches that, and
    says what would tell (more steps)."""
    v = _one_late_step(tmp_path, 2000, 500)
    assert v.typical == ("ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4")
    assert v.headroom_ms == 0 and v.lever_headroom_ms == 0
    (top, *_) = v.recommendations
    assert top.lever == "carveout-hint" and top.gain_ms == 0 and top.spread_ms == pytest.approx((0, 0.15))
    assert v.line.startswith("nothing to gain here in the median typical step: headroom 0.000 ms")
    assert ("but in 1 of 4 typical steps (ProfilerStep#4) carveout-hint reaches up to 0.150 ms" in v.line
            and "try carveout-hint, or profile more steps (--steps)" in v.line)


def test_no_lever_where_no_typical_step_reaches_the_nothing_to_gain_line(tmp_path):
    """A 2256 us collective, the one wait 40 us: its replay gains 0.040 ms of a 2.400 ms step, 1.7%, below the 2%
    line: "nothing to gain here", no lever."""
    v = _one_late_step(tmp_path, 144, 2256)
    assert v.recommendations == () and v.line.startswith("nothing to gain here: headroom 0.000 ms (0.0%) [median of "
                                                         "4 typical step(s), 0.0-1.7%]")
