"""The reader's batches and its two-process read (reader._batches, reader._split) build the very model, and raise
the very error, that one pass over one event at a time does: on every recorded trace, on traces whose text
looks like a cut where there is none (strings holding '},{', nested arrays of objects, one event longer than a
batch), on top levels where the events' start is guessed wrong, and on damaged ones. Forced here: SPLIT_BYTES 0
and batches of a few hundred bytes."""
from __future__ import annotations

import copy
import gzip
import json
import os
import random
import sys
from pathlib import Path

import pytest

from ccoverlap.analysis import reader as T
from ccoverlap.analysis.model import Classifier
from ccoverlap.analysis.reader import read_trace
from ccoverlap.util.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
RECORDED = sorted(p for p in (ROOT / "tests" / "data" / "traces").rglob("*")
                  if p.is_file() and p.name.endswith((".json", ".json.gz")) and "trace" in p.name)
CAPTURE = ROOT / "tests" / "data" / "traces" / "h200" / "default" / "rank0_trace.json.gz"


def _one_at_a_time(text: memoryview, start: int, stop: int):
    """The reader before batches: every event decoded on its own."""
    for raw in T._RAWS.decode(b"[" + text[start:stop] + b"]"):
        yield [T._EVENT.decode(raw)]


def _outcome(path: Path, classifier: Classifier = Classifier(), **kw):
    try:
        return read_trace(path, classifier, **kw)
    except UsageError as exc:
        return f"refused: {exc}"


def _both(path: Path, monkeypatch, batch: int = 300, classifier: Classifier = Classifier()) -> tuple:
    """What one pass one event at a time gives, and what the two processes with `batch`-byte batches give."""
    with monkeypatch.context() as m:
        m.setattr(T, "_batches", _one_at_a_time)
        once = _outcome(path, classifier)
    monkeypatch.setattr(T, "SPLIT_BYTES", 0)
    monkeypatch.setattr(T, "_BATCH", batch)
    return once, _outcome(path, classifier, split=True)


@pytest.mark.parametrize("path", RECORDED, ids=[str(p.relative_to(ROOT)) for p in RECORDED])
def test_batches_and_halves_give_the_model_of_one_pass(path, monkeypatch):
    once, split = _both(path, monkeypatch)
    assert split == once


def _doc() -> dict:
    return json.loads(gzip.decompress(CAPTURE.read_bytes()))


def _write(tmp_path: Path, doc: dict, name: str = "rank0_trace.json", indent: int | None = None) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=indent))
    return path


@pytest.mark.parametrize("indent", [None, 1])
def test_text_that_looks_like_a_cut_is_not_taken_for_one(tmp_path, monkeypatch, indent):
    """Names and args holding '},{' and '}, {', args with arrays of objects, and one cpu_op longer than a batch:
    a cut inside them leaves the batch before it unbalanced, so it is not taken, and the rest is read right."""
    doc = _doc()
    events = doc["traceEvents"]
    for n, ev in enumerate(events):
        if ev.get("cat") == "cpu_op" and n % 3 == 0:
            ev["name"] = 'aten::odd},{"ph": "X", "cat": "kernel"},{' + ev["name"]
            ev.setdefault("args", {})["nested"] = [{"a": [{"b": "}, {"}]}, {"c": {"d": [{}, {}]}}]
        elif ev.get("cat") == "cpu_op" and n % 3 == 1:
            ev.setdefault("args", {})["Input Dims"] = [[{"x": i}, {"y": "},{"}] for i in range(200)]  # > a batch
    path = _write(tmp_path, doc, indent=indent)
    for batch in (64, 300, 4096):
        once, split = _both(path, monkeypatch, batch)
        assert not isinstance(once, str) and split == once


def test_a_cut_inside_an_event_reads_the_file_in_this_process(tmp_path, monkeypatch):
    """Every candidate cut after the midpoint lies inside one huge event's string: a batch cut there does not
    decode, whichever process takes it, the child's answer is dropped, and this process reads the file in one
    pass."""
    doc = _doc()
    events = doc["traceEvents"]
    middle = len(events) // 2
    events[middle]["name"] = "},{" * 200_000
    path = _write(tmp_path, doc)
    split_read = []
    real = T._split
    monkeypatch.setattr(T, "_split", lambda *a: split_read.append(real(*a)) or split_read[-1])
    once, split = _both(path, monkeypatch)
    assert not isinstance(once, str) and split == once and split_read == [None]


@pytest.mark.parametrize("slow", ["this process", "the child"])
def test_the_batches_go_to_whichever_process_is_free(monkeypatch, slow):
    """One process slowed (every batch it reads takes a millisecond more): the other takes the batches it reaches
    first, and the model is one pass's."""
    real, here = T._Reading.feed, os.getpid()

    def feed(self, events):
        if (os.getpid() == here) == (slow == "this process"):
            __import__("time").sleep(0.001)
        real(self, events)

    monkeypatch.setattr(T._Reading, "feed", feed)
    once, split = _both(CAPTURE, monkeypatch)
    assert split == once


def test_a_silent_child_is_read_for_in_this_process(tmp_path, monkeypatch):
    monkeypatch.setattr(T.Forked, "result", lambda self: (self.cancel(), None)[1])
    once, split = _both(CAPTURE, monkeypatch)
    assert split == once


def test_the_child_ends_with_the_read(monkeypatch):
    """No child process is left behind, nor a zombie (each is reaped)."""
    children = []
    real = T.Forked.__init__

    def spy(self, *args):
        real(self, *args)
        children.append(self.pid)

    monkeypatch.setattr(T.Forked, "__init__", spy)
    _both(CAPTURE, monkeypatch)
    assert children
    for pid in children:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _top_level(doc: dict, change: str) -> bytes:
    """The capture's text with its top level changed where _split's guess of the events' start can go wrong."""
    if change == "a traceEvents key inside an earlier value":
        return json.dumps({"meta": {"traceEvents": [{"ph": "X"}, {"ph": "X"}]}, **doc}).encode()
    text = json.dumps(doc).encode()
    if change == "the key twice":  # the decoder takes the last
        return text.replace(b"{", b'{"traceEvents": [{"ph": "i"}, {"ph": "i"}], ', 1)
    if change == "cut short":
        return text[:-1]
    if change == "text after it":
        return text + b" x"
    # the guessed cut falls past the events, in a later value that looks like events
    after = len(json.dumps(doc["traceEvents"])) // 100 + 1  # twice the events' text, in objects of 200 bytes
    return json.dumps({**doc, "zzz": [{"x": "." * 190} for _ in range(after)]}).encode()


@pytest.mark.parametrize("change", ["a traceEvents key inside an earlier value", "the key twice", "cut short",
                                    "text after it", "the cut past the events"])
def test_a_top_level_the_guess_misreads_is_read_alike(tmp_path, monkeypatch, change):
    """_split reads from where the events seem to start before the top level is decoded (the forked process
    decodes and checks it): where the guess is wrong, or the top level refused, the file is read in one pass,
    the same model or the same error."""
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(_top_level(_doc(), change))
    split_read = []
    real = T._split
    monkeypatch.setattr(T, "_split", lambda *a: split_read.append(real(*a)) or split_read[-1])
    once, split = _both(path, monkeypatch)
    assert split == once and split_read == [None]


DAMAGE = [None, "x", [], {}, -1, 0, 1e30, True, [{"a": 1}, {"b": 2}]]


@pytest.mark.parametrize("seed", range(12))
def test_a_damaged_trace_is_refused_or_read_alike(tmp_path, monkeypatch, seed):
    """Fields dropped or mistyped (args a string: an event of the wrong type, which the batch does not decode),
    events that are not objects, in either half: the same model, or the same error, as one pass."""
    rng = random.Random(seed)
    doc = copy.deepcopy(_doc())
    events = doc["traceEvents"]
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(events))
        ev = events[at]
        what = rng.choice(["ts", "dur", "name", "ph", "cat", "args", "args.stream", "args.correlation", "event"])
        value = rng.choice(DAMAGE + ["a string arg"])
        if what == "event":
            events[at] = value
        elif what.startswith("args.") and isinstance(ev.get("args"), dict):
            ev["args"][what[5:]] = value
        elif rng.random() < 0.3:
            ev.pop(what, None)
        else:
            ev[what] = value
    path = _write(tmp_path, doc)
    once, split = _both(path, monkeypatch, batch=rng.choice([128, 2048]))
    assert split == once


@pytest.mark.parametrize("events", ["[]", "[ ]", "[1, 2]", "{}", "null", '"x"', '[{"ph": "X"}]'])
def test_odd_event_arrays_are_refused_alike(tmp_path, monkeypatch, events):
    path = tmp_path / "rank0_trace.json"
    path.write_text('{"distributedInfo": {"rank": 0}, "traceEvents": %s}' % events)
    once, split = _both(path, monkeypatch)
    assert isinstance(once, str) and split == once


def _raises():
    raise ValueError("bad value")


def test_forked_sends_back_the_result_its_error_or_nothing():
    """What fn returned; its exception, raised here; None where the child died before it answered."""
    from ccoverlap.analysis.parallel import Forked

    answered = Forked(lambda: [1, 2.5, "x"])
    assert answered.result() == [1, 2.5, "x"]
    answered.cancel()  # the caller reaps a child that answered
    assert answered.pid == 0
    with pytest.raises(ValueError, match="bad value"):
        Forked(_raises).result()
    assert Forked(lambda: os._exit(3)).result() is None
    slow = Forked(lambda: __import__("time").sleep(60))
    slow.cancel()  # killed and reaped at once
    assert slow.pid == 0


def _two_then_raises():
    yield 1
    yield [2.5, "x"]
    raise ValueError("bad value")


def test_forked_sends_what_a_generator_yields_in_turn():
    """Each item as the child makes it, then its exception; None once nothing more comes, and after an item that
    would not pickle (it ends them)."""
    from ccoverlap.analysis.parallel import Forked

    items = Forked(_two_then_raises)
    assert items.result() == 1 and items.result() == [2.5, "x"]
    with pytest.raises(ValueError, match="bad value"):
        items.result()
    assert items.result() is None
    items.cancel()
    unpicklable = Forked(lambda: (x for x in [1, lambda: 0, 3]))
    assert unpicklable.result() == 1 and unpicklable.result() is None
    unpicklable.cancel()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_forked_child_dies_with_the_process_that_forked_it(tmp_path):
    """A parent killed mid-analysis (SIGKILL: no cleanup of its own) leaves no child computing for nobody."""
    import signal
    import subprocess
    import time

    pidfile = tmp_path / "child"
    code = ("import os, sys, time\n"
            "from ccoverlap.analysis.parallel import Forked\n"
            f"f = Forked(lambda: (open({str(pidfile)!r}, 'w').write(str(os.getpid())), time.sleep(60)))\n"
            "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    while time.monotonic() < deadline:
        try:  # gone, or a zombie left for whoever reaps orphans here
            if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail(f"the forked child {child} outlived its killed parent")
