"""The hold before each profiled step (doctor/hold.py), on the CPU with a fake flag: which holds are placed and
released when, the timer's release, and what the record keeps; the real flag on a GPU in the gpu-marked tests."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ccoverlap.doctor import hold, record
from ccoverlap.doctor.config import DoctorConfig
from ccoverlap.util.errors import UsageError

TRAIN = str(Path(__file__).parent / "data" / "doctor_train.py")


class FakeWord:
    """Records every wait placed and every value written, as a driver would see them."""

    def __init__(self):
        self.calls: list[tuple[str, int, int]] = []
        self.value = 0
        self.lock = threading.Lock()

    def arm(self, stream: int, value: int) -> None:
        with self.lock:
            self.calls.append(("arm", stream, value))

    def set(self, value: int) -> None:
        with self.lock:
            self.calls.append(("set", -1, value))
            self.value = value


def test_timeout_is_a_multiple_of_the_longest_host_step_within_its_bounds():
    assert hold.timeout_for(40.0) == pytest.approx(hold.TIMEOUT_STEPS * 0.04)
    assert hold.timeout_for(0.0) == hold.TIMEOUT_MIN_S
    assert hold.timeout_for(1.0) == hold.TIMEOUT_MIN_S
    assert hold.timeout_for(1e6) == hold.TIMEOUT_MAX_S


def test_each_hold_is_one_higher_and_a_release_sets_exactly_it():
    word = FakeWord()
    h = hold.Hold(word)
    h.release()  # nothing held: nothing written
    assert word.calls == [] and not h.held
    h.place(5, 10.0)
    assert h.held
    h.release()
    h.release()  # twice: written once
    h.place(6, 10.0)
    h.release()
    assert word.calls == [("arm", 5, 1), ("set", -1, 1), ("arm", 6, 2), ("set", -1, 2)]
    assert h.summary() == {"held": 2, "timed_out": 0, "timeout_ms": 10000.0}


def test_the_timer_lets_a_host_that_waits_for_the_gpu_go_and_a_late_timer_never_lowers_the_flag():
    word = FakeWord()
    h = hold.Hold(word)
    h.place(1, 0.01)
    deadline = time.monotonic() + 30
    while h.held and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not h.held and word.value == 1 and h.timed_out == 1
    h.place(1, 10.0)
    h._expire(1)  # hold 1's timer firing late: hold 2 stays
    assert h.held and word.value == 1 and h.timed_out == 1
    h.release()
    assert word.value == 2 and h.summary()["timed_out"] == 1


def test_many_threads_releasing_and_expiring_leave_the_flag_at_the_last_hold():
    word = FakeWord()
    h = hold.Hold(word)
    for _ in range(50):
        h.place(1, 0.0005)
        threads = [threading.Thread(target=h.release) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    written = [v for what, _, v in word.calls if what == "set"]
    assert written == sorted(set(written)) and word.value == 50 and not h.held


def test_hold_is_an_option_validated_like_the_others():
    assert DoctorConfig().hold == "off" and DoctorConfig().capture().hold == "off"
    assert DoctorConfig(hold="on").capture().hold == "on"
    with pytest.raises(UsageError, match=r"--hold maybe: valid on, off"):
        DoctorConfig(hold="maybe").validate()


def _run(tmp_path, monkeypatch, word: FakeWord | OSError, steps: int = 3, skip: int = 2, total: int = 7, **cfg):
    """A Capture driven through `total` optimizer steps on the CPU (the profiler's CPU side), its stream 7; the
    flag `word`, or the error its creation raises."""
    from ccoverlap.doctor import capture as capture_mod

    def create(cls):
        if isinstance(word, OSError):
            raise word
        return word

    monkeypatch.setattr(capture_mod, "_holdable_stream", lambda: 7)
    monkeypatch.setattr(hold.InterposerWord, "create", classmethod(create))
    cfg = {"hold": "on"} | cfg
    c = capture_mod.Capture(DoctorConfig(out=str(tmp_path), skip=skip, steps=steps, alone="off", **cfg).capture())
    placed = []  # the holds placed when each step began

    class Opt:
        pass

    opt = Opt()
    for _ in range(total):
        placed.append(len([1 for what, *_ in getattr(word, "calls", ()) if what == "arm"]))
        c.pre_step(opt, (), {})
        c.post_step(opt, (), {})
    c.finish()
    return c, placed, record.read(tmp_path / "rank0_steps.jsonl")


def test_every_recorded_step_and_only_those_begin_held_and_end_released(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    word = FakeWord()
    c, placed, rec = _run(tmp_path, monkeypatch, word)
    # step 2 is the profiler's warm-up; steps 3, 4, 5 are recorded: each began behind a hold placed as the one
    # before it ended, released as it ended
    assert placed == [0, 0, 1, 2, 3, 3, 3]
    assert [(w, v) for w, _, v in word.calls] == [("arm", 1), ("set", 1), ("arm", 2), ("set", 2), ("arm", 3),
                                                   ("set", 3)]
    assert [s.step for s in rec.steps if s.profiled] == [3, 4, 5]
    assert rec.hold["held"] == 3 and rec.hold["timed_out"] == 0 and rec.hold_note is None
    assert rec.hold["timeout_ms"] == pytest.approx(1e3 * hold.timeout_for(max(s.ms for s in rec.steps[2:4])), abs=1e-3)
    assert rec.summary()["hold"] == rec.hold and rec.held
    assert record.processes(tmp_path, [rec])[0].held  # what the verdict reads


def test_off_places_no_hold_and_a_missing_interposer_is_one_line_and_the_steps_go_on(tmp_path, monkeypatch, capfd):
    pytest.importorskip("torch")
    word = FakeWord()
    _, _, rec = _run(tmp_path / "off", monkeypatch, word, hold="off")
    assert word.calls == [] and rec.hold is None and rec.hold_note is None

    why = "the launch interposer is not loaded in this process (it must be preloaded)"
    c, _, rec = _run(tmp_path / "refused", monkeypatch, OSError(why))
    assert c.done == 7 and [s.step for s in rec.steps if s.profiled] == [3, 4, 5]
    assert rec.hold is None and rec.hold_note == why
    err = capfd.readouterr().err
    assert err.count("the GPU is not held before the profiled steps") == 1


def test_a_process_that_ends_inside_the_window_lets_the_gpu_go(tmp_path, monkeypatch):
    """A program that stops in the middle of its recorded steps: its exit releases the hold (a synchronize in its
    exit would otherwise wait for the timer)."""
    pytest.importorskip("torch")
    word = FakeWord()
    c, _, rec = _run(tmp_path, monkeypatch, word, steps=5, total=4)
    assert word.value == 3 and not c.hold.held  # the hold placed for step 5, which never came, let go
    assert rec.hold is not None and rec.hold["held"] == 3


def _doctor(tmp_path, name: str, *options: str, env: dict | None = None):
    from test_doctor import losses
    from test_interposer import clean_env

    out = subprocess.run([sys.executable, "-m", "ccoverlap", "doctor", "--out", str(tmp_path / name), "--json",
                          str(tmp_path / f"{name}.json"), "--steps", "3", "--skip", "3", *options, "--",
                          sys.executable, TRAIN, "--cuda", "--steps", "12"], env=clean_env() | (env or {}),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout, losses(out.stdout), json.loads((tmp_path / f"{name}.json").read_text())["step_times"][0]


@pytest.mark.gpu
@pytest.mark.parametrize("sync", [False, True], ids=["queued", "sync-inside-the-step"])
def test_on_a_gpu_the_doctor_holds_every_profiled_step_and_the_losses_stay_the_same(tmp_path, sync):
    env = {"DOCTOR_TRAIN_SYNC": "1"} if sync else {}
    held_out, held_losses, held = _doctor(tmp_path, "held", "--hold", "on", env=env)
    _, plain_losses, plain = _doctor(tmp_path, "plain", env=env)
    assert held_losses == plain_losses and len(held_losses) == 12
    assert held["hold"]["held"] == 3 and plain["hold"] is None
    # a host that waits for the GPU inside the step is let go by the timer; one that does not, never
    assert held["hold"]["timed_out"] == (3 if sync else 0)
    assert "hold rank 0: the GPU held before each of 3 profiled step(s)" in held_out
