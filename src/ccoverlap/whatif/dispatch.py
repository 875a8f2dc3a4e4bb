"""Event-driven, block-level dispatch of one Step onto the SMs.

Which kernel's CTAs go next: among kernels that may dispatch (launched; their stream's previous kernel, their
event dependencies and, in `serial` steps, the kernel launched before them done; the kernel ahead of them in
their hardware queue fully dispatched, streams taking the `queues` queues in turn), the most urgent stream
priority first, then a grid whose dispatch has begun, then launch order. A kernel whose next CTA finds no room
holds every kernel after it: a grid of equal priority waits until the one dispatching is fully dispatched, and a
pending higher-priority CTA takes the next room that fits it (both measured on the H200: docs/lab.md, NOTES). A
merged CTA (`Pace.blocks`) stands for real CTAs run one after another in its slot: where a more urgent kernel waits
for room, it ends at its next real CTA's end and gives the rest of its work back to its grid, one CTA pending (the
real slot frees there; the merged one would hold it until all its CTAs' work was done); what finds no room once that
kernel is placed is shared by the grid's CTAs running.
CTAs go round-robin over the SMs a kernel may use, most free first and, among equals, the modelled GPCs in turn (a
partial wave leaves its free SMs spread over the GPCs, so they hold no cluster: measured on heldout_fp32_gemm, H100);
clusters to SMs of one modelled GPC at once.
Each CTA then runs at the pace `duration.Pace` gives it, recomputed whenever what shares its SM, or what runs on
the GPU, changes.

Each kernel also records what it waited for last (`KernelTimes.ready_by`, `room_by`), so `critical_path` can
walk back from the kernel that ends the step: an earlier start shortens the step only on that chain.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from ccoverlap.whatif import residency
from ccoverlap.whatif.duration import Pace
from ccoverlap.whatif.step import Step

EPS = 1e-9
#: A kernel that waits on another stream's kernel through a CUDA event becomes ready this long after that kernel
#: ends; its own stream's next kernel, already queued, does not wait. Measured on the H200: collectives ready by an
#: event started 1.12-1.47 us after their producer ended where nothing held them (`known-answers-run3-2026-12-02-h200`,
#: same_name's doctor capture); the smallest is taken. It decides who takes SMs two streams want at once: the
#: same-stream successor first, whose single wave can then hold every SM.
EVENT_LATENCY_US = 1.12


@dataclass(frozen=True)
class KernelTimes:
    ready_us: float  # when it was launched with its stream's previous kernel and its dependencies done
    start_us: float  # its first CTA's start
    end_us: float  # its last CTA's end
    ready_by: int | None = None  # the kernel whose end made it ready (None: its launch came last)
    ready_how: str = "launch"  # "stream" (its stream's previous kernel), "event", "serial" or "launch"
    room_by: int | None = None  # started after it was ready: the kernel whose CTA's end made room for it


@dataclass(frozen=True)
class Link:
    """One launch on the critical path and the span of the step it holds: from its start until it ends or
    lets the next link go (`until_us`); `how` it waited for the link before it ("launch" for the first)."""

    kernel: int
    start_us: float
    until_us: float
    how: str


@dataclass(frozen=True)
class Result:
    kernels: tuple[KernelTimes, ...]
    step_us: float  # the last end, from the step's start (0)

    def critical_path(self) -> tuple[Link, ...]:
        """The chain of launches that ends last, in time order: from the last end back, each launch to what it
        waited for last (the room another kernel's CTA left, else what made it ready), until a launch that
        waited for nothing but its launch call."""
        ks = self.kernels
        if not ks:
            return ()
        i = max(range(len(ks)), key=lambda j: ks[j].end_us)
        until, path, seen = ks[i].end_us, [], set()
        while i is not None and i not in seen:
            seen.add(i)
            k = ks[i]
            waited_room = k.room_by is not None and k.start_us > k.ready_us + EPS
            how, before = ("room", k.room_by) if waited_room else (k.ready_how, k.ready_by)
            path.append(Link(i, k.start_us, min(until, k.end_us), how))
            until, i = k.start_us, before
        return tuple(reversed(path))


class _Sim:
    def __init__(self, step: Step, pace: Pace, gpcs: int):
        self.step, self.pace, self.dev = step, pace, step.device
        ks = step.kernels
        self.copy = [k.footprint is None for k in ks]
        self.fps = [k.footprint for k in ks]
        self.hints = [k.hint for k in ks]
        self.is_comm = [k.comm for k in ks]
        self.warps = [0 if c else -(-k.footprint.threads // self.dev.warp_size) for k, c in zip(ks, self.copy)]
        self.plan = [((1, k.alone_us),) if c else pace.blocks(self.dev, k) for k, c in zip(ks, self.copy)]
        self.pending = [n if c else -(-n // max(k.footprint.cluster, 1)) * max(k.footprint.cluster, 1)
                        for n, k, c in zip((sum(n for n, _ in p) for p in self.plan), ks, self.copy)]
        self.placed = [0] * len(ks)  # CTAs dispatched so far: which group of its plan the next one is in
        self.alone_warps = [0 if c else pace.alone_warps(self.dev, k, self.dev.warp_size)
                            for k, c in zip(ks, self.copy)]
        self.running = [0] * len(ks)
        self.left = list(self.pending)  # CTAs not yet finished
        self.pooled = [False] * len(ks)  # a persistent grid sharing its work among the CTAs that run (`_pool`)
        self.sms = [residency.SM() for _ in range(self.dev.sm_count)]
        self.on_sm: list[set[int]] = [set() for _ in self.sms]  # CTA ids per SM
        self.ctas: dict[int, list] = {}  # id -> [kernel, sm, remaining work, last update, rate, version]
        self.returned: list[list[float]] = [[] for _ in ks]  # work given back by split merged CTAs, placed first
        self.heap: list = []
        self.next_id = 0
        self.gpc = residency.gpc_size(self.dev, gpcs)
        self.ready = [None] * len(ks)
        self.ready_by: list[int | None] = [None] * len(ks)
        self.ready_how = ["launch"] * len(ks)
        self.room_by: list[int | None] = [None] * len(ks)
        self.freed: int | None = None  # the kernel whose CTA ended last (what made room, where a kernel starts late)
        self.wakeups: set[float] = set()  # when an event's signal reaches a waiting kernel
        self.waiting = list(range(len(ks)))
        self.start = [None] * len(ks)
        self.end = [None] * len(ks)
        self.dispatched = [False] * len(ks)
        order: dict[int, int] = {}
        for k in ks:
            order.setdefault(k.stream, len(order))
        self.queue = [order[k.stream] % max(step.queues, 1) for k in ks]
        self.prev_stream = [max((j for j in range(i) if ks[j].stream == k.stream), default=-1)
                            for i, k in enumerate(ks)]
        self.prev_queue = [max((j for j in range(i) if self.queue[j] == self.queue[i]), default=-1)
                           for i in range(len(ks))]
        self.priority = [step.priorities.get(k.stream, 0) for k in ks]
        self.least_urgent = max(self.priority, default=0)
        self.rank = sorted(range(len(ks)), key=lambda i: (self.priority[i], i))
        self.active = 0  # kernels with CTAs resident

    # --- readiness --------------------------------------------------------------------------------
    def _done(self, j: int) -> bool:
        return j < 0 or self.end[j] is not None

    def _mark_ready(self, t: float) -> None:
        """Note when each kernel is launched with its stream's previous kernel and its dependencies done."""
        for i in self.waiting[:]:
            k = self.step.kernels[i]
            if k.release_us > t + EPS:
                continue
            waits = [(self.prev_stream[i], "stream"), *((j, "event") for j in k.deps)] + (
                [(i - 1, "serial")] if self.step.serial else [])
            if all(self._done(j) for j, _ in waits):
                signalled = max((self.end[j] + EVENT_LATENCY_US for j in k.deps
                                 if self.step.kernels[j].stream != k.stream), default=t)
                if signalled > t + EPS:
                    self.wakeups.add(signalled)
                    continue
                self.ready[i] = t
                self.waiting.remove(i)
                waited = [(self.end[j] + (EVENT_LATENCY_US if how == "event" and self.step.kernels[j].stream != k.stream
                                          else 0.0), j, how) for j, how in waits if j >= 0]
                if waited and (last := max(waited))[0] >= k.release_us - EPS:
                    self.ready_by[i], self.ready_how[i] = last[1], last[2]

    def may_dispatch(self, i: int) -> bool:
        """Ready, with the kernel ahead of it in its hardware queue fully dispatched."""
        return self.ready[i] is not None and (self.prev_queue[i] < 0 or self.dispatched[self.prev_queue[i]])

    # --- placement -------------------------------------------------------------------------------
    def _allowed(self, i: int) -> range:
        lo, hi = self.step.kernels[i].sms or (0, self.dev.sm_count)
        return range(lo, min(hi, self.dev.sm_count))

    def _admits(self, s: int, i: int) -> bool:
        return residency.admits(self.dev, self.sms[s], i, self.fps[i], self.fps, self.hints)

    def _place_one(self, i: int, s: int, t: float) -> None:
        residency.place(self.dev, self.sms[s], i, self.fps[i], self.hints[i])
        cid = self.next_id
        self.next_id += 1
        if self.returned[i]:
            work = self.returned[i].pop(0)
        else:
            work = self._work(i)
            self.placed[i] += 1
        self.ctas[cid] = [i, s, work, t, 0.0, 0]
        self.on_sm[s].add(cid)
        self.pending[i] -= 1
        if self.running[i] == 0:
            self.active += 1
            self._global_change = True
        self.running[i] += 1
        if self.start[i] is None:
            self.start[i] = t
            if t > self.ready[i] + EPS:
                self.room_by[i] = self.freed
        if self.pending[i] == 0:
            self.dispatched[i] = True
        self._touched.add(s)
        if self.pooled[i]:
            self._join(i, cid, t)

    def _work(self, i: int) -> float:
        """The work of kernel i's next CTA: its plan's group that CTA falls in (a cluster's padding: the last's)."""
        n = self.placed[i]
        for count, work in self.plan[i]:
            if n < count:
                return work
            n -= count
        return self.plan[i][-1][1]

    def _fill(self, i: int, sms, t: float) -> bool:
        """Place kernel i's CTAs on `sms`, round-robin; True when none is left pending."""
        cluster = max(self.fps[i].cluster, 1)
        if cluster > 1:
            return self._fill_clusters(i, sms, t, cluster)
        candidates = sorted(sms, key=lambda s: (len(self.on_sm[s]), s % self.gpc))  # GPCs in turn
        while self.pending[i] and candidates:
            still = []
            for s in candidates:
                if not self.pending[i]:
                    break
                if self._admits(s, i):
                    self._place_one(i, s, t)
                    still.append(s)
            candidates = still
        return not self.pending[i]

    def _fill_clusters(self, i: int, sms, t: float, cluster: int) -> bool:
        allowed = set(self._allowed(i))
        gpcs = sorted({s // self.gpc for s in sms})
        progress = True
        while self.pending[i] and progress:
            progress = False
            for g in gpcs:
                if not self.pending[i]:
                    break
                free = [s for s in range(g * self.gpc, min((g + 1) * self.gpc, self.dev.sm_count))
                        if s in allowed and self._admits(s, i)]
                if len(free) >= cluster:
                    for s in sorted(free, key=lambda s: len(self.on_sm[s]))[:cluster]:
                        self._place_one(i, s, t)
                    progress = True
        return not self.pending[i]

    def _persistent(self, i: int) -> bool:
        """A library's persistent grid: exactly one full wave of the whole device (blocks per SM alone x SMs);
        its tiles go to the CTAs that run (a tile scheduler), so CTAs that find no room hand their work over."""
        k = self.step.kernels[i]
        return (not self.copy[i] and not self.is_comm[i] and self.fps[i].cluster == 1
                and self.fps[i].grid == residency.alone_per_sm(self.dev, k.footprint, k.hint) * self.dev.sm_count)

    def _pool(self, i: int) -> None:
        """A persistent grid whose first wave found room for some of its CTAs: its tile scheduler hands the tiles to
        the CTAs that run, so those placed take the whole grid's work; the others stay pending (the grid holds the
        kernels after it until they are placed), each placed later taking an even share of what is left (`_join`);
        any still pending when the work is done never run."""
        placed = [cid for cid, c in self.ctas.items() if c[0] == i]
        if not placed or not self.pending[i]:
            return
        scale = (len(placed) + self.pending[i]) / len(placed)
        for cid in placed:
            self.ctas[cid][2] *= scale
        self.pooled[i] = True

    def _join(self, i: int, cid: int, t: float) -> None:
        """CTA `cid` of pooled grid i just placed: the work its running CTAs have left, shared evenly by them and it."""
        mine = [c for c, x in self.ctas.items() if x[0] == i]
        left = 0.0
        for c in mine:
            x = self.ctas[c]
            if c != cid:
                x[2] -= (t - x[3]) * x[4]
                left += max(x[2], 0.0)
            x[3] = t
        for c in mine:
            self.ctas[c][2] = left / len(mine)
            self._touched.add(self.ctas[c][1])

    def _spread(self, i: int) -> None:
        """A grid simulated in merged CTAs (`Pace.blocks`: many waves) whose first merged wave found less room than
        it has alone: its merged CTAs made fewer and longer by the share of its room the kernels holding it take
        over the grid's time alone (each SM's missing slots for as long as the CTAs there have work left, at most
        that time), the same work in all. The real grid's small waves take the room there is as it comes; merged
        CTAs sized for the whole wave alone would add a whole merged CTA's time for a few slots held a while."""
        plan, placed = self.plan[i], self.placed[i]
        k = self.step.kernels[i]
        per_sm = residency.alone_per_sm(self.dev, k.footprint, k.hint)
        sms = self._allowed(i)
        if len(plan) < 2 or self.fps[i].cluster > 1 or not placed or placed >= per_sm * len(sms):
            return
        held = 0.0
        for s in sms:
            mine = sum(1 for cid in self.on_sm[s] if self.ctas[cid][0] == i)
            others = [self.ctas[cid][2] for cid in self.on_sm[s] if self.ctas[cid][0] != i]
            if mine < per_sm and others:
                held += (per_sm - mine) * min(k.alone_us, max(others))
        (merged, work), last = plan
        fewer = max(placed, round(merged * (1 - held / (per_sm * len(sms) * k.alone_us))))
        if fewer >= merged:
            return
        scale = merged / fewer
        for c in self.ctas.values():
            if c[0] == i:
                c[2] *= scale
        self.plan[i] = ((fewer, work * scale), last)
        self.pending[i] -= merged - fewer
        self.left[i] -= merged - fewer
        self.n_left -= merged - fewer

    def dispatch(self, t: float) -> None:
        self._mark_ready(t)
        # of equal priority, a grid whose dispatch has begun goes on before one that has not begun, whichever was
        # launched first (measured: a collective launched before its stream's producer's same-stream successor, ready
        # by an event after it, waits until that successor's grid is fully dispatched)
        live = sorted((i for i in self.rank if self.pending[i]),
                      key=lambda i: (self.priority[i], self.start[i] is None))
        for i in live:
            if not self.may_dispatch(i):
                continue
            if self.copy[i]:  # a copy engine's: no SM, never in the way
                self.pending[i], self.dispatched[i], self.start[i] = 0, True, t
                if t > self.ready[i] + EPS:  # its hardware queue held it
                    self.room_by[i] = self.freed
                heapq.heappush(self.heap, (t + self.step.kernels[i].alone_us, -1 - i, 0))
                continue
            first = self.start[i] is None
            done = self._fill(i, self._allowed(i), t)
            if not done and first and self._persistent(i):
                self._pool(i)
            elif not done and first:
                self._spread(i)
            elif not done and self.returned[i]:
                done = self._share_returned(i, t)
            if not done:
                self._split_for(i, t)
                return  # head of line: nothing after it dispatches

    def _split_for(self, i: int, t: float) -> None:
        """Kernel i waits for room: each running merged CTA of a less urgent kernel on the SMs i may use ends at its
        next real CTA's end (a real CTA's work: its plan's last group's), the whole real CTAs after it pending again
        as one CTA. A clustered grid's merged CTAs are left whole (its CTAs go to the SMs a cluster at a time)."""
        if self.priority[i] >= self.least_urgent:  # nothing less urgent: called at every wait, it stops here
            return
        allowed = self._allowed(i)
        for cid, c in self.ctas.items():
            j = c[0]
            if (self.priority[j] <= self.priority[i] or self.pooled[j] or self.fps[j].cluster > 1
                    or c[1] not in allowed):
                continue
            unit = self.plan[j][-1][1]
            left = c[2] - (t - c[3]) * c[4]
            if left <= unit + EPS:
                continue
            piece = left - unit * int((left - EPS) // unit)  # to the next real end (a whole CTA if exactly on one)
            self.returned[j].append(left - piece)
            self.pending[j] += 1
            self.left[j] += 1
            self.n_left += 1
            self.dispatched[j] = False
            c[2], c[3] = piece, t
            self._touched.add(c[1])  # re-paced, its end pushed again (`_settle`)

    def _share_returned(self, i: int, t: float) -> bool:
        """Work split merged CTAs gave back that finds no room once the more urgent kernel is placed goes to the
        grid's CTAs running, shared evenly: the real grid's next CTAs take whichever of its slots frees next (as one
        CTA pending it would wait for a whole slot, a tail the real grid does not have). True when nothing of the grid
        is left pending."""
        running = [c for c in self.ctas.values() if c[0] == i]
        if not running:
            return False
        work = sum(self.returned[i]) / len(running)
        for c in running:
            c[2] += work - (t - c[3]) * c[4]
            c[3] = t
            self._touched.add(c[1])
        n = len(self.returned[i])
        self.returned[i] = []
        self.pending[i] -= n
        self.left[i] -= n
        self.n_left -= n
        self.dispatched[i] = not self.pending[i]
        return self.dispatched[i]

    # --- pace ------------------------------------------------------------------------------------
    def _rate(self, cid: int) -> float:
        i, s = self.ctas[cid][0], self.ctas[cid][1]
        now = sum(self.warps[j] * n for j, n in self.sms[s].blocks.items())
        k = self.step.kernels[i]
        return self.pace.pace(self.alone_warps[i], now, self.dev, self.active > 1, k.memory_bound, k.held)

    def _repace(self, cids, t: float) -> None:
        for cid in cids:
            c = self.ctas[cid]
            c[2] -= (t - c[3]) * c[4]
            c[3] = t
            c[4] = self._rate(cid)
            c[5] += 1
            heapq.heappush(self.heap, (t + max(c[2], 0.0) / c[4], cid, c[5]))

    def run(self) -> Result:
        t = 0.0
        releases = sorted({k.release_us for k in self.step.kernels})
        self.n_left = sum(self.left)
        self._touched, self._global_change = set(), False
        while self.n_left:
            self.dispatch(t)
            self._settle(t)
            self._touched, self._global_change = set(), False
            nxt = [r for r in releases if r > t + EPS]
            self.wakeups = {w for w in self.wakeups if w > t + EPS}
            t_cta = self.heap[0][0] if self.heap else float("inf")
            t_rel = min(nxt[0] if nxt else float("inf"), min(self.wakeups, default=float("inf")))
            if t_cta == float("inf") and t_rel == float("inf"):
                raise RuntimeError("the simulated step is stuck: a kernel never finds room (a footprint no SM holds)")
            if t_rel < t_cta:
                t = t_rel
                continue
            t = t_cta
            while self.heap and self.heap[0][0] <= t + EPS:
                _, cid, version = heapq.heappop(self.heap)
                if cid < 0:
                    self.left[-1 - cid], self.end[-1 - cid] = 0, t
                    self.n_left -= 1
                    self.freed = -1 - cid
                    continue
                c = self.ctas.get(cid)
                if c is None or c[5] != version:
                    continue
                self._finish(cid, t)
                self.n_left -= 1
        return Result(tuple(KernelTimes(*times) for times in zip(self.ready, self.start, self.end, self.ready_by,
                                                                  self.ready_how, self.room_by)),
                      max((e for e in self.end if e is not None), default=0.0))

    def _finish(self, cid: int, t: float) -> None:
        i, s = self.ctas.pop(cid)[:2]
        self.freed = i
        self.on_sm[s].discard(cid)
        residency.leave(self.sms[s], i)
        self.running[i] -= 1
        self.left[i] -= 1
        self._touched.add(s)
        if self.running[i] == 0:
            self.active -= 1
            self._global_change = True
            if self.pooled[i] and self.pending[i]:  # its work is done: the CTAs still pending never run
                self.left[i] -= self.pending[i]
                self.n_left -= self.pending[i]
                self.pending[i], self.dispatched[i] = 0, True
        if self.left[i] == 0:
            self.end[i] = t

    def _settle(self, t: float) -> None:
        """Re-pace the CTAs whose sharing changed (every one, where a kernel started or ended)."""
        if self._global_change:
            cids = list(self.ctas)
        else:
            cids = [cid for s in self._touched for cid in self.on_sm[s]]
        self._repace(cids, t)


def simulate(step: Step, pace: Pace, gpcs: int = 8) -> Result:
    """The step's kernels' ready, start and end times (us) under the dispatch and pace models."""
    return _Sim(step, pace, gpcs).run()
