"""The doctor's capture, inside an unmodified program: installed by the start-up hook (ccoverlap/control/startup.py)
in every Python process of the command as it imports torch.

Steps are the program's optimizer steps, seen through torch's global optimizer-step hooks (every
torch.optim optimizer calls them); where a program steps several optimizers, the first one to step sets
the pace. The profiler (profiling.Recorder) starts in the optimizer step of step K (--skip), which is its
warm-up, records steps K+1..K+N and writes rank<r>_trace.json.gz at the end of step K+N. Every step's
time goes to rank<r>_steps.jsonl (doctor/record.py) as it ends, so the steps outside the window can be
compared with a run without the doctor: the profiler's start, export and stop fall between two steps'
clocks, not in them.

With --seconds the window is wall-clock time instead, opened --skip-seconds after `import torch`, or
later, once the process has initialised CUDA or torch.distributed or stepped an optimizer: the program's
ranks, not a launcher such as torchrun or a data loader's workers. The profiler records the CPU side of the thread that
starts it, so a timer thread asks the main thread to open and close the window, as a pending call (the mechanism
Python's own signal handlers use): the main thread does it between two bytecodes.

With --hold on, the capture holds the GPU before each recorded step (doctor/hold.py: from the step's first
kernel launch the current stream waits on a flag until the step's optimizer step has ended), so the step's
launches queue ahead of the GPU as they do where the host outruns it unprofiled.

Right after the window, the alone window records the same number of steps again with every kernel launch
made alone (the launch interposer's serialized launches: each starts on an idle device and ends before the
next starts), to rank<r>_trace.alone.gz: the doctor matches its launches to the first window's and so knows
what each launch takes alone (analysis/alone.py). Without the interposer in the process it is skipped,
and the record says why.

The topology of every CUDA graph the program captures through torch.cuda.CUDAGraph before the window closes
goes to the record as the window closes (doctor/graph_capture.py): a replay's trace has its kernels, not the
graph's edges.

A process that ends inside the window writes what the profiler recorded: at exit (atexit: a normal end,
sys.exit, an exception) and on SIGTERM where the program left its default action (torchrun and `ccoverlap
doctor` send it to stop a job). SIGKILL leaves the step lines written so far and no trace of the open
window. Nothing here changes what the program computes.
"""
from __future__ import annotations

import atexit
import collections
import ctypes
import dataclasses
import os
import signal
import sys
import threading
import time
import weakref
from pathlib import Path

import torch

from ccoverlap.util import profiling
from ccoverlap.doctor import graph_capture, hold
from ccoverlap.doctor.config import CaptureConfig
from ccoverlap.doctor.record import Identity, Log, identity

#: how long the end of a process waits for the GPU to finish its last steps' events (never a device sync:
#: a program that failed may have a collective that never completes)
DRAIN_S = 1.0
#: how often a process of --seconds checks whether it is a rank yet (a launcher never is: it checks on, cheaply)
RANK_POLL_S = 0.05


def _say(what: str) -> None:
    print(f"ccoverlap doctor: {what} (pid {os.getpid()}, {sys.executable})", file=sys.stderr)


def _identity() -> Identity:
    """Which rank of the job this process is: torch.distributed's, once initialised, else its launcher's
    (torchrun, SLURM, Open MPI: record.identity), and its host."""
    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    me = identity(os.environ, (dist.get_rank(), dist.get_world_size()) if initialised else None)
    return dataclasses.replace(me, in_process=True) if initialised and _store_in_process(dist) else me


def _store_in_process(dist) -> bool:
    """The default group's store is a HashStore, which only this process can reach: every rank of the group is
    this process (an emulation, a fake group), so no other process of it will write a record."""
    store = dist.distributed_c10d._get_default_store()
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return isinstance(store, dist.HashStore)


def _cuda_in_use() -> bool:
    """The program has initialised CUDA (asking must not do it: a rank picks its device first)."""
    return torch.cuda.is_initialized()


def _event():
    """A timing CUDA event recorded on the current stream, where the program uses CUDA and is not capturing a
    graph (recording would break the capture); else None."""
    if not _cuda_in_use() or torch.cuda.is_current_stream_capturing():
        return None
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def _holdable_stream() -> int | None:
    """The current stream's handle, where the program uses CUDA and is not capturing a graph (a wait placed then
    would become part of the graph); else None."""
    try:
        if not _cuda_in_use() or torch.cuda.is_current_stream_capturing():
            return None
        return torch.cuda.current_stream().cuda_stream
    except RuntimeError:  # a CUDA error the program already met, or a torch without CUDA: nothing to hold
        return None


class Capture:
    def __init__(self, cfg: CaptureConfig):
        self.cfg = cfg
        self.enabled = True
        self.log: Log | None = None
        self.leader: weakref.ref | None = None  # the optimizer whose steps are the program's steps
        self.done = 0  # its steps so far
        self.recorder: profiling.Recorder | None = None
        self.phase: str | None = None  # None, "warmup" or "recording": what the profiler does in the current step
        self.alone = False  # the open window is the alone window (launches serialized)
        self.recorded = 0
        self.step_start: float | None = None
        self.gpu_start = None
        self.pending: collections.deque = collections.deque()  # (step line, start event, end event)
        self.busy = False  # inside a hook: a SIGTERM then waits for the hook's end
        self.killed: int | None = None
        self.finished = False
        self.graphs = graph_capture.Sink()  # the CUDA graphs captured so far (written as the window closes)
        self.hold: hold.Hold | None = None  # the GPU held before each recorded step (--hold on), once placed
        self.longest_ms = 0.0  # the longest host step so far: what a hold's timer allows

    # -- the record ---------------------------------------------------------------------------------------

    def _open_log(self) -> Log | None:
        if self.log is None:
            me = _identity()
            window = {"seconds": self.cfg.seconds, "skip_seconds": self.cfg.skip_seconds} if self.cfg.seconds else \
                {"skip": self.cfg.skip, "steps": self.cfg.steps}
            try:
                self.log = Log(Path(self.cfg.out), me.rank, me.header() | window | {"env": _knobs()})
            except OSError as exc:
                _say(f"cannot write in {self.cfg.out} ({exc.strerror or exc}): nothing recorded")
                self.enabled = False
        return self.log

    def _write_ready(self, deadline: float | None = None) -> None:
        """Write the step lines whose GPU time is known (or, past `deadline`, without it)."""
        while self.pending:
            line, start, end = self.pending[0]
            try:
                ready = end.query()
                while not ready and deadline is not None and time.monotonic() < deadline:
                    time.sleep(0.001)
                    ready = end.query()
                if not ready and deadline is None:
                    return
                line["gpu_ms"] = start.elapsed_time(end) if ready else None
            except RuntimeError:  # a CUDA error the program already met: the host time is still good
                line["gpu_ms"] = None
            self.pending.popleft()
            self.log.write(line)

    # -- the window ---------------------------------------------------------------------------------------

    def open_window(self) -> None:
        if self.recorder is not None or self.finished or self._open_log() is None:
            return
        cuda = _cuda_in_use()
        try:
            self.recorder = profiling.Recorder(self.log.trace, cuda, warmup=1,
                                               active=1 if self.cfg.seconds else self.cfg.steps)
            self.recorder.start()
        except Exception as exc:  # noqa: BLE001 - the program runs on, its steps still timed; the record says why
            why = f"{type(exc).__name__}: {exc}"
            _say(f"the profiler did not start: {why}")
            self.recorder = None
            self.log.write({"window": "failed", "error": why})
            return
        self.phase = "warmup"
        self.log.write({"window": "open", "cuda": cuda, "trace": self.log.trace.name, "t": time.monotonic()})
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def advance(self) -> None:
        """End a step of the window: warm-up to recording, or the last recorded step to the trace."""
        if self.phase is None or self.finished:
            return
        if self.phase == "recording":
            self.recorded += 1
        try:
            written = self.recorder.step()
        except Exception as exc:  # noqa: BLE001
            _say(f"the profiler failed: {type(exc).__name__}: {exc}")
            self.close_window(complete=False)
            return
        if written:
            second = self.alone
            self.close_window(complete=True)
            if not second and self.cfg.alone == "on" and not self.cfg.seconds and not self.finished:
                self.open_alone()
        else:
            self.phase = "recording"

    def close_window(self, complete: bool) -> None:
        recorder, self.recorder, self.phase = self.recorder, None, None
        self._release()
        if self.alone:
            self._end_serialized()
        try:
            written = recorder.stop()
        except Exception as exc:  # noqa: BLE001
            _say(f"the trace was not written: {type(exc).__name__}: {exc}")
            written = recorder.written
        self.log.write({"alone_window" if self.alone else "window": "closed",
                        "trace": recorder.path.name if written else None, "recorded": self.recorded,
                        "complete": complete, "t": time.monotonic()}
                       | ({"hold": self.hold.summary()} if self.hold and not self.alone else {}))
        if not self.alone and (self.graphs.graphs or self.graphs.skipped):
            self.log.write({"graphs": self.graphs.graphs, "graphs_skipped": self.graphs.skipped})
        self.alone = False
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) == self._on_sigterm):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    # -- holding the GPU before each recorded step ------------------------------------------------------------

    def _hold_next(self) -> None:
        """Hold the current stream from the next kernel launch until the next step's optimizer step has ended
        (doctor/hold.py)."""
        if self.cfg.hold != "on" or (stream := _holdable_stream()) is None:
            return
        try:
            if self.hold is None:
                self.hold = hold.Hold(hold.InterposerWord.create())
            self.hold.place(stream, hold.timeout_for(self.longest_ms))
        except OSError as exc:
            self.log.write({"hold": "unavailable", "why": str(exc)})
            _say(f"the GPU is not held before the profiled steps ({exc})")
            self.cfg, self.hold = dataclasses.replace(self.cfg, hold="off"), None

    def _release(self) -> None:
        if self.hold is not None:
            self.hold.release()

    # -- the alone window ----------------------------------------------------------------------------------

    def open_alone(self) -> None:
        """The same number of steps again, every launch alone: a warm-up step (serialized too, so the recorded
        steps start from a drained device), then the steps, into the alone trace."""
        from ccoverlap.control import interposer  # on use: the user's program loads it only for the alone window

        if not _cuda_in_use():
            return
        if interposer.set_serialize(True) is None:
            self.log.write({"alone_window": "unavailable",
                            "why": "the launch interposer is not loaded in this process (it must be preloaded)"})
            return
        try:
            self.recorder = profiling.Recorder(self.log.alone, True, warmup=1, active=self.cfg.steps)
            self.recorder.start()
        except Exception as exc:  # noqa: BLE001 - the program runs on; the record says why
            interposer.set_serialize(False)
            self.recorder = None
            self.log.write({"alone_window": "unavailable",
                            "why": f"the profiler did not start: {type(exc).__name__}: {exc}"})
            return
        self.alone, self.phase, self.recorded = True, "warmup", 0
        self.log.write({"alone_window": "open", "trace": self.log.alone.name, "t": time.monotonic()})

    def _end_serialized(self) -> None:
        from ccoverlap.control import interposer  # on use, as in open_alone

        interposer.set_serialize(False)

    # -- optimizer steps ----------------------------------------------------------------------------------

    def _leads(self, optimizer) -> bool:
        if self.leader is None or self.leader() is None:  # the first to step (or the one that replaced it)
            self.leader = weakref.ref(optimizer)
        return self.leader() is optimizer

    def pre_step(self, optimizer, args, kwargs) -> None:
        if not self.enabled or not self._leads(optimizer):
            return
        if self.cfg.profile and not self.cfg.seconds and self.done == self.cfg.skip - 1:
            self._in_hook(self.open_window)

    def post_step(self, optimizer, args, kwargs) -> None:
        if self.enabled and self._leads(optimizer) and self._open_log() is not None:
            self._in_hook(lambda: self._step_ended(optimizer))

    def _step_ended(self, optimizer) -> None:
        end, gpu_end = time.perf_counter(), _event()
        self._release()  # the step's launches are all queued
        self.done += 1
        first = self.phase is not None and not self.alone
        line = {"step": self.done, "ms": None if self.step_start is None else (end - self.step_start) * 1e3,
                "gpu_ms": None, "profiled": first and self.phase == "recording",
                "warmup": first and self.phase == "warmup",
                "alone": self.alone}
        if line["ms"] is not None and not line["warmup"]:  # (the warm-up step's holds the profiler's start)
            self.longest_ms = max(self.longest_ms, line["ms"])
        if self.gpu_start is not None and gpu_end is not None:
            self.pending.append((line, self.gpu_start, gpu_end))
        else:
            self.log.write(line)
        self._write_ready()
        if not self.cfg.seconds:
            self.advance()
            if self.phase == "recording" and not self.alone:
                self._hold_next()  # armed: the wait goes in at the next step's first kernel launch
        if self.cfg.stop and self.done >= self.cfg.skip + self.cfg.steps and self.recorder is None:
            self._stop(optimizer)
        self.step_start, self.gpu_start = time.perf_counter(), _event()

    def _stop(self, optimizer) -> None:
        """The tuner's trial has its steps: the GPU drained (every rank's collectives of this step were enqueued
        before its optimizer step, so none waits on a rank that left), the fingerprint and the remaining step
        lines written, and the process ended at once: the program's own exit (its atexit work, a final
        checkpoint) is not part of a trial."""
        if _cuda_in_use():
            torch.cuda.synchronize()
        if self.cfg.fingerprint:
            self.log.write({"fingerprint": fingerprint(optimizer), "rounding": rounding(optimizer),
                            "after_step": self.done})
        self._write_ready(deadline=time.monotonic() + DRAIN_S)
        self.log.write({"stopped": self.done})
        self.finished = True
        _write_launch_stats()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def _in_hook(self, work) -> None:
        """Do `work` inside the program (in its optimizer step, or at its exit): a SIGTERM meanwhile waits for its
        end, and whatever goes wrong ends the capture with one line, never the program."""
        self.busy = True
        try:
            work()
        except Exception as exc:  # noqa: BLE001
            _say(f"the capture stopped: {type(exc).__name__}: {exc}")
            self.enabled = False
        finally:
            self._hook_end()

    # -- the end ------------------------------------------------------------------------------------------

    def finish(self) -> None:
        """At the end of the process: the window's trace, cut short, and the step lines still waiting for the GPU."""
        if self.enabled and not self.finished:
            self.finished = True
            self._in_hook(self._flush)

    def _flush(self) -> None:
        if self.recorder is not None:  # (closing it lets a hold go: none is placed outside the window)
            self.close_window(complete=False)
        if self.log is not None:
            self._write_ready(deadline=time.monotonic() + DRAIN_S)

    def _on_sigterm(self, sig: int, frame) -> None:
        if self.busy:  # in the middle of a hook: it finishes the job at its end
            self.killed = sig
            return
        self._die(sig)

    def _hook_end(self) -> None:
        self.busy = False
        if self.killed is not None:
            sig, self.killed = self.killed, None
            self._die(sig)

    def _die(self, sig: int) -> None:
        self.finish()
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)

    def forget(self) -> None:
        """In a forked child (a data loader's worker): it is not the rank, its copy of the state is not ours."""
        self.enabled = False
        self.recorder = self.log = self.hold = None

    # -- --seconds -----------------------------------------------------------------------------------------

    def run_timer(self) -> None:
        """The timer thread of --seconds: from --skip-seconds on, wait for the process to be a rank, then open the
        window, start recording and close it, each on the main thread."""
        import torch.distributed as dist

        time.sleep(self.cfg.skip_seconds)
        while not (self.log is not None or _cuda_in_use() or (dist.is_available() and dist.is_initialized())):
            if self.finished or not threading.main_thread().is_alive():
                return
            time.sleep(RANK_POLL_S)
        if not _in_main(self.open_window) or self.phase != "warmup":
            return
        if _in_main(self.advance):  # the profiler is warm: record from here
            time.sleep(self.cfg.seconds)
            _in_main(self.advance)


#: the variables that decide how launches are scheduled, kept in the record for the doctor's rules
KNOBS = ("CUDA_DEVICE_MAX_CONNECTIONS", "TORCH_NCCL_HIGH_PRIORITY", "NCCL_CGA_CLUSTER_SIZE", "NCCL_MAX_CTAS",
         "NCCL_MIN_CTAS", "NCCL_NTHREADS", "NCCL_CTA_POLICY")


def _knobs() -> dict[str, str]:
    return {k: os.environ[k] for k in KNOBS if k in os.environ}


def _write_launch_stats() -> None:
    """The interposer's stats (where it is preloaded) before an os._exit skips its atexit."""
    if "ccoverlap.control.interposer" in sys.modules or os.environ.get("LD_PRELOAD"):
        from ccoverlap.control import interposer  # only where it is loaded or preloaded (the test above)

        interposer.write_stats()


def fingerprint(optimizer) -> list[float]:
    """The squared norm of every parameter tensor the optimizer steps (this rank's shard of a DTensor), in
    float64: what the tuner compares between runs to see whether a setting changed the training's result.
    One host sync."""
    tensors = [p.to_local() if hasattr(p, "to_local") else p
               for group in optimizer.param_groups for p in group["params"]]
    if not tensors:
        return []
    device = tensors[0].device
    return torch.stack([t.detach().double().pow(2).sum().to(device) for t in tensors]).tolist()


def rounding(optimizer) -> float | None:
    """The unit roundoff of the coarsest floating dtype among the trained parameters (bfloat16: 2^-8), or None:
    the scale of the change that only reordering their sums (another thread count, another reduction order) makes."""
    units = [torch.finfo(p.dtype).eps / 2 for group in optimizer.param_groups for p in group["params"]
             if p.dtype.is_floating_point]
    return max(units, default=None)


_PENDING = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


def _in_main(fn) -> bool:
    """Run `fn` on the main thread between two of its bytecodes; True once it ran, False if the process ended first."""
    done = threading.Event()

    def call(_arg) -> int:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - an exception here would surface in the program's code
            _say(f"the --seconds window failed: {type(exc).__name__}: {exc}")
        finally:
            done.set()
        return 0

    callback = _PENDING(call)  # kept alive until it ran
    add = ctypes.pythonapi.Py_AddPendingCall
    add.argtypes, add.restype = (_PENDING, ctypes.c_void_p), ctypes.c_int
    while add(callback, None) != 0:  # the queue is full: try again
        time.sleep(0.001)
    while not done.wait(0.1):
        if not threading.main_thread().is_alive():
            return False
    return True


def _register_twin(executable: int, twin: int) -> bool | None:
    """A captured graph's serial twin for the alone window, registered with the interposer (doctor/graph_capture.py)."""
    from ccoverlap.control import interposer  # on use, as in open_alone

    return interposer.register_graph_twin(executable, twin)


def install(config: dict) -> None:
    """Called by the start-up hook, once torch is imported: time every optimizer step, open the window."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    cfg = CaptureConfig(**config)
    capture = Capture(cfg)
    register_optimizer_step_pre_hook(capture.pre_step)
    register_optimizer_step_post_hook(capture.post_step)
    atexit.register(capture.finish)
    graph_capture.install(torch.cuda.CUDAGraph, capture.graphs, register=_register_twin)
    os.register_at_fork(after_in_child=capture.forget)
    if cfg.seconds:
        threading.Thread(target=capture.run_timer, name="ccoverlap-doctor", daemon=True).start()
